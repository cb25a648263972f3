"""The synthesizers' entries in the privacy conformance suite (:mod:`veil.audit.conformance`).

Registered here, not in ``veil.audit``, because ``veil.synth`` sits above it; importing
``veil.synth`` registers them. Neighbours: add/remove one row, the relation every fit's
certificate names. The adversarial neighbour is the most distinguishable one for a
marginal-based synthesizer: a row ``(1, 1)`` added to a table whose rows are all ``(0, 0)``;
the attacker counts the synthetic rows with the target's first value. The schema and the
number of rows sampled are public, so the output's shape is the same on both sides.
"""

from __future__ import annotations

import pandas as pd

from veil.audit.conformance import ADD_REMOVE, Pair, register
from veil.synth.aim import AIM
from veil.synth.independent import Independent
from veil.synth.mst import MST
from veil.synth.schema import Schema

EPS, DELTA = 1.0, 1e-6
_SCHEMA = Schema.from_dict({"a": {"type": "categorical", "categories": [0, 1]},
                            "b": {"type": "categorical", "categories": [0, 1]}})
_BASE = pd.DataFrame({"a": [0] * 40, "b": [0] * 40})
_WITH = pd.concat([_BASE, pd.DataFrame({"a": [1], "b": [1]})], ignore_index=True)


def _pairs():
    return [Pair("a (1, 1) row added to all-(0, 0) rows", _BASE, _WITH)]


def _register(method) -> None:
    @register(f"synth.{method.__name__}", relation=ADD_REMOVE, epsilon=EPS, delta=DELTA,
              pairs=_pairs, reduce=lambda t: float((t["a"] == 1).sum()),
              structure=lambda t: (tuple(t.columns), len(t)), trials=100,
              covers=("veil.synth.base:Synthesizer.fit",))
    def run(table, rng):
        return method(_SCHEMA, epsilon=EPS, delta=DELTA, iters=20, rng=rng).fit(
            table).sample(200, rng=rng)


for _method in (Independent, MST, AIM):
    _register(_method)
