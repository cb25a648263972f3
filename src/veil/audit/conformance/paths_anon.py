"""Registered release paths of :mod:`veil.anon`: SafePub (sampling, generalization,
suppression of classes under k; Bild et al. 2018, after Li, Qardaji & Su), with the levels
fixed by the caller and with SafePub's search choosing them.

The adversarial neighbours are the two places a record can show: alone in a class of its own
(always below k, so always suppressed), and one record more in a class whose sampled size sits
at the suppression threshold k, where one record moves the chance the class is published. For
the search the same records also move the score of each level (the number of published
classes: one more class at the threshold, or a removed record more), so the choice of level.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from veil.anon import Hierarchy
from veil.anon.safepub import SafePub, safepub_k
from veil.audit.conformance.registry import ADD_REMOVE, Pair, register
from veil.dp import Ledger

EPS, DELTA = 1.0, 1e-5
_BETA, _K = safepub_k(EPS, DELTA)
_HIERARCHY = {"v": Hierarchy([["a", "*"], ["b", "*"]], name="v")}
#: class "a" large enough that its sampled size is near k: beta * n ~ k
_AT_K = int(round(_K / _BETA))


def _table(a: int, b: int) -> pd.DataFrame:
    return pd.DataFrame({"v": ["a"] * a + ["b"] * b})


def _pairs(at_k: int):
    def pairs():
        return [Pair("a record alone in its own class", _table(at_k, 0), _table(at_k, 1)),
                Pair("one record more in a class at the threshold", _table(at_k, 0),
                     _table(at_k + 1, 0))]
    return pairs


def _published(table: pd.DataFrame) -> float:
    """What an attacker counts: the published rows of class "a", plus 1000 x those of "b",
    plus 10^6 x those generalized to "*" (the level the search chose)."""
    values = table["v"].to_numpy()
    return float(np.sum(values == "a") + 1000 * np.sum(values == "b")
                 + 1_000_000 * np.sum(values == "*"))


@register("anon.SafePub", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA, pairs=_pairs(_AT_K),
          reduce=_published, structure=lambda t: tuple(t.columns), trials=100,
          covers=("veil.anon.safepub:SafePub.release",))
def _safepub(table, rng):
    release = SafePub(EPS, DELTA, levels={"v": 0}).release(
        table, _HIERARCHY, ledger=Ledger(2 * EPS, 2 * DELTA), rng=rng)   # a throwaway budget
    return release.table


_SEARCH = SafePub(EPS, DELTA, search_epsilon=EPS / 2, steps=1, metric="classes")


@register("anon.SafePub (search)", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
          pairs=_pairs(int(round(_SEARCH.k / _SEARCH.beta))), reduce=_published,
          structure=lambda t: tuple(t.columns), trials=100,
          covers=("veil.anon.safepub:SafePub.release",))
def _safepub_search(table, rng):
    release = _SEARCH.release(table, _HIERARCHY, ledger=Ledger(2 * EPS, 2 * DELTA), rng=rng)
    return release.table
