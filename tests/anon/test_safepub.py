"""SafePub: (epsilon, delta)-DP publishing by sampling + generalization, with the levels
fixed by the caller or chosen by SafePub's search (the exponential mechanism on the lattice).

ARX's ``TestAnonymizationDifferentialPrivacy`` data-dependent cases (19-48 on Adult, cup and
FARS) run ARX's seeded ``java.util.Random`` through its exponential mechanism, whose
candidates come out of a ``HashMap`` in hash order, and release the pivot of best exact
score (veil draws it: see :mod:`veil.anon.safepub`): their transformations cannot be
compared. Their sample can: ``test_scores_are_arxs`` replays ARX's sampling stream and
checks every score function against the score ARX reports for its output on Adult.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from veil.anon import Hierarchy
from veil.anon.safepub import METRICS, SafePub, _Scores, safepub_k
from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import default_rng

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


ADULT = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
         "occupation", "salary-class"]
# ARX TestAnonymizationDifferentialPrivacy, Adult, epsilon 2, search budget 1, delta 1e-5:
# (case, metric, ARX's score of its output, its output)
ARX_SCORES = [
    (19, "loss", -387.20969001288375, [1, 4, 0, 2, 2, 1, 1, 2, 0]),
    (22, "loss", -364.91072721704967, [0, 3, 1, 0, 2, 1, 1, 2, 0]),
    (25, "precision", -347.1666666666667, [0, 4, 0, 1, 1, 1, 2, 1, 0]),
    (28, "precision", -349.6703096539162, [0, 4, 0, 0, 2, 2, 1, 2, 0]),
    (31, "entropy", -354.6331995737269, [1, 4, 0, 1, 2, 2, 1, 1, 0]),
    (34, "entropy", -337.4125485059108, [0, 3, 1, 1, 2, 1, 1, 1, 1]),
    (37, "classes", 46.0, [0, 4, 0, 0, 2, 2, 2, 1, 1]),
    (40, "classes", 88.0, [1, 3, 1, 1, 1, 2, 2, 0, 1]),
    (43, "discernibility", -189.1673041207017, [1, 3, 1, 2, 3, 2, 2, 0, 1]),
    (46, "discernibility", -184.58604046896227, [0, 4, 1, 1, 3, 2, 2, 0, 1]),
]


@pytest.fixture(scope="module")
def _arx_sample(java_random):
    """ARX's sample of Adult: record i kept when the i-th ``nextDouble()`` of
    ``new Random(0xDEADBEEF)`` (an int literal: sign-extended) is below beta."""
    from veil.datasets import load_adult, load_adult_hierarchies

    frames = load_adult_hierarchies()
    df = load_adult("arx")
    hierarchies = [Hierarchy(frames[c], name=c) for c in ADULT]
    mech = SafePub(2.0, 1e-5, search_epsilon=1.0)
    sampled = np.flatnonzero(java_random(0xDEADBEEF).random(len(df)) < mech.beta)
    positions = [h.positions(df[c], c) for c, h in zip(ADULT, hierarchies)]
    return mech, positions, hierarchies, sampled, len(df)


@pytest.fixture
def arx_sample(adult_available, _arx_sample):
    return _arx_sample


@pytest.mark.parametrize(("case", "metric", "score", "levels"), ARX_SCORES,
                         ids=[f"{c}-{m}" for c, m, _, _ in ARX_SCORES])
def test_scores_are_arxs(arx_sample, case, metric, score, levels):
    """Every score function, on ARX's own sample, gives the score ARX reports for its
    output (to 1e-12). ARX's k is one more than veil's (its ``calculateK`` returns the k
    after the first that fits: 62 where 61 fits delta at epsilon_anon = 1)."""
    mech, positions, hierarchies, sampled, n = arx_sample
    assert mech.epsilon_anon == 1.0 and mech.k == 61
    scores = _Scores(positions, hierarchies, sampled, n, mech.k + 1, metric)
    assert scores(tuple(levels)) == pytest.approx(score, rel=1e-12)


def _two_values(a: int, b: int) -> tuple[pd.DataFrame, dict[str, Hierarchy]]:
    return (pd.DataFrame({"v": ["a"] * a + ["b"] * b}),
            {"v": Hierarchy([["a", "*"], ["b", "*"]], name="v")})


def test_search_draws_with_the_exponential_mechanism():
    """On a two-node lattice (v at level 0 or 1) one step walks to the bottom, and the
    release draws between the two pivots with probability proportional to
    ``exp(e u / 2)``, e = search_epsilon / 2 (the final draw's half): the frequency of each
    choice over 600 searches is within 4 standard errors of it. A mechanism at the wrong
    scale (e u, or the whole search_epsilon) lands outside."""
    df, hierarchies = _two_values(300, 300)
    mech = SafePub(3.0, 1e-3, search_epsilon=2.0, steps=1, metric="classes")
    positions = [hierarchies["v"].positions(df["v"], "v")]
    picks, expected = [], []
    for seed in range(600):
        sampled = np.flatnonzero(default_rng(seed).random(len(df)) < mech.beta)
        scores = _Scores(positions, [hierarchies["v"]], sampled, len(df), mech.k, "classes")
        u = np.array([scores((1,)), scores((0,))])
        p = np.exp(0.5 * u)
        expected.append(p[1] / p.sum())
        picks.append(mech._search(scores, default_rng(10_000 + seed)) == (0,))
    mean = float(np.mean(expected))
    assert 0.6 < mean < 0.8                          # u: 2 classes vs 1 (+ the removed)
    assert abs(np.mean(picks) - mean) < 4 * math.sqrt(mean * (1 - mean) / 600)


def test_search_with_a_large_budget_finds_the_best_node(table):
    """With steps enough to visit the whole lattice (sex x job: 6 nodes) and a large
    search budget (99.75 per unit of score in the final draw), the final draw is a node of
    best score on the sample: another node is e^99 times less likely."""
    df, hierarchies = table
    hierarchies = {c: hierarchies[c] for c in ("sex", "job")}
    nodes = list(np.ndindex(2, 3))
    mech = SafePub(400.0, 1e-5, search_epsilon=399.0, steps=len(nodes), metric="classes")
    out = mech.release(df, hierarchies, ledger=Ledger(401.0, 1e-4), rng=5)
    sampled = np.flatnonzero(default_rng(5).random(len(df)) < mech.beta)
    positions = [hierarchies[c].positions(df[c], c) for c in hierarchies]
    scores = _Scores(positions, list(hierarchies.values()), sampled, len(df), mech.k,
                     "classes")
    values = sorted(scores(g) for g in nodes)
    assert values[0] < values[-1]                    # the choice matters
    assert scores((out.levels["sex"], out.levels["job"])) == values[-1]


@pytest.mark.parametrize("metric", METRICS)
def test_searched_release_is_charged_once_and_holds_k(table, metric):
    df, hierarchies = table
    mech = SafePub(2.0, 1e-5, search_epsilon=0.5, steps=8, metric=metric)
    assert mech.epsilon_anon + mech.search_epsilon <= 2.0
    assert mech.k == safepub_k(mech.epsilon_anon, 1e-5)[1]
    ledger = Ledger(2.05, 1.1e-5)
    out = mech.release(df, hierarchies, ledger=ledger, rng=11)
    assert len(ledger.history()) == 1 and 2.0 <= ledger.spent()[0] <= 2.05
    assert set(out.levels) == set(hierarchies)
    for c, h in hierarchies.items():
        assert 0 <= out.levels[c] < h.n_levels
        assert set(out.table[c]) <= set(h.labels(out.levels[c]).astype(str))
    sizes = out.table.value_counts().to_numpy()
    assert sizes.size == 0 or sizes.min() >= mech.k
    cert = out.certificate
    assert cert["search_epsilon"] == 0.5 and cert["epsilon"] == 2.0 and metric in cert["mechanism"]
    with pytest.raises(BudgetExceededError):       # the whole budget went in one charge
        mech.release(df, hierarchies, ledger=ledger)


def test_search_parameters_are_checked_before_the_ledger_is_charged(table):
    df, hierarchies = table
    with pytest.raises(ConfigError, match="search_epsilon=1.0"):
        SafePub(1.0, 1e-6, search_epsilon=1.0)
    with pytest.raises(ConfigError, match="search_epsilon=0.1"):
        SafePub(1.0, 1e-6, levels=LEVELS, search_epsilon=0.1)
    with pytest.raises(ConfigError, match="metric"):
        SafePub(1.0, 1e-6, metric="height")
    with pytest.raises(ConfigError, match="steps"):
        SafePub(1.0, 1e-6, steps=0)
    assert SafePub(1.0, 1e-6).search_epsilon == pytest.approx(0.1)     # a tenth by default
    ledger = Ledger(5.0, 1e-4)
    with pytest.raises(DataError):
        SafePub(1.0, 1e-6).release(df.assign(job=["pilot"] * len(df)), hierarchies,
                                   ledger=ledger)
    assert len(ledger.history()) == 0
