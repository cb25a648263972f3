"""SafePub: (epsilon, delta)-DP publishing by sampling + data-independent generalization."""

from __future__ import annotations

import math

import pytest

from veil.anon.safepub import SafePub, safepub_k
from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError, DataError

LEVELS = {"age": 3, "zip": 5, "sex": 1, "job": 1}


def test_parameters_follow_li_qardaji_su():
    """beta = 1 - e^-epsilon; k is the smallest class size with d(k) <= delta, and d
    decreases with k (so a smaller k would not do)."""
    from veil.anon.safepub import _delta_of, _gamma

    beta, k = safepub_k(1.0, 1e-6)
    assert beta == pytest.approx(1 - math.exp(-1.0))
    gamma = _gamma(1.0, beta)
    assert _delta_of(k, beta, gamma) <= 1e-6 < _delta_of(k - 1, beta, gamma)
    assert safepub_k(1.0, 1e-8)[1] > k > safepub_k(1.0, 1e-4)[1]


def test_release_is_charged_before_sampling_and_classes_hold_k(table):
    df, hierarchies = table
    mech = SafePub(2.0, 1e-5, levels=LEVELS)
    ledger = Ledger(epsilon=2.05, delta=1.1e-5)
    out = mech.release(df, hierarchies, ledger=ledger, rng=7)
    assert len(ledger.history()) == 1 and ledger.spent()[0] <= 2.05
    assert list(out.table.columns) == list(LEVELS)            # nothing else released
    sizes = out.table.value_counts().to_numpy()
    assert sizes.size == 0 or sizes.min() >= mech.k
    assert out.simulation and out.certificate["certified"] is False
    assert out.certificate["neighbours"] == "add/remove one record"
    # a second release does not fit: refused before anything is drawn or recorded
    with pytest.raises(BudgetExceededError):
        mech.release(df, hierarchies, ledger=ledger)
    assert len(ledger.history()) == 1


def test_sampling_keeps_about_beta_of_the_records(table):
    """At the top levels every kept record falls in one class, which holds ~ beta n."""
    df, hierarchies = table
    top = {c: h.n_levels - 1 for c, h in hierarchies.items()}
    mech = SafePub(1.0, 1e-6, levels=top)
    out = mech.release(df, hierarchies, ledger=Ledger(10.0, 1e-3))
    assert not out.simulation and out.certificate["certified"]
    share = len(out.table) / len(df)
    assert abs(share - mech.beta) < 5 * math.sqrt(mech.beta * (1 - mech.beta) / len(df))


def test_bad_input_is_refused_before_the_ledger_is_charged(table):
    df, hierarchies = table
    ledger = Ledger(5.0, 1e-4)
    with pytest.raises(ConfigError, match="delta=0"):
        SafePub(1.0, 0.0, levels=LEVELS)
    with pytest.raises(ConfigError, match="levels\\['age'\\]=9"):
        SafePub(1.0, 1e-6, levels={**LEVELS, "age": 9}).release(df, hierarchies, ledger=ledger)
    bad = df.assign(sex=["X"] * len(df))
    with pytest.raises(DataError):
        SafePub(1.0, 1e-6, levels=LEVELS).release(bad, hierarchies, ledger=ledger)
    assert len(ledger.history()) == 0


def test_release_is_a_sorted_multiset(table):
    """Row order is canonical (sorted by value), never the input's: the proof is about
    the multiset of released records."""
    df, hierarchies = table
    top = {c: h.n_levels - 1 for c, h in hierarchies.items()}
    top["age"] = 1
    mech = SafePub(1.0, 1e-4, levels=top)
    out = mech.release(df, hierarchies, ledger=Ledger(10.0, 1e-2), rng=3)
    assert out.table.equals(out.table.sort_values(list(top)).reset_index(drop=True))
