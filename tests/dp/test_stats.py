"""veil.dp.stats: clipping reported, bounds and inputs validated before any charge, costs
right, values accurate to within their noise."""

import logging
import math

import numpy as np
import pandas as pd
import pytest

from veil.dp import Ledger, stats
from veil.errors import BudgetExceededError, ConfigError, DataError

AGES = np.random.default_rng(0).normal(40, 12, 20_000).round()


def test_clipping_is_counted_and_logged(caplog):
    x = np.array([10.0, 20.0, 30.0, 95.0, 100.0, -3.0])
    with caplog.at_level(logging.WARNING, logger="veil.dp.stats"):
        r = stats.mean(x, bounds=(0, 90), epsilon=1.0, rng=1)
    assert r.clipped == 3
    assert "values outside the declared bounds" in caplog.text
    message = caplog.records[0].getMessage()
    assert not any(c.isdigit() for c in message.split("[")[0])  # no private counts
    assert stats.sum(x, bounds=(15, 25), epsilon=1.0, rng=1).clipped == 5
    assert stats.quantile(x, 0.5, bounds=(0, 50), epsilon=1.0, rng=1).clipped == 3
    assert stats.histogram(x, [0, 50, 90], epsilon=1.0, rng=1).clipped == 3


@pytest.mark.parametrize("call,error", [
    (lambda L: stats.mean(AGES, bounds=(90, 17), epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.mean(AGES, bounds=(17, 17), epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.mean(AGES, bounds=(0, float("inf")), epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.sum(AGES, bounds=(0, 1), epsilon=0, ledger=L), ConfigError),
    (lambda L: stats.count(AGES, epsilon=-1, ledger=L), ConfigError),
    (lambda L: stats.variance(AGES, bounds=(0, 1), epsilon=1, delta=1.0, ledger=L),
     ConfigError),
    (lambda L: stats.mean([1.0, float("nan")], bounds=(0, 1), epsilon=1, ledger=L), DataError),
    (lambda L: stats.sum([1.0, float("inf")], bounds=(0, 1), epsilon=1, ledger=L), DataError),
    (lambda L: stats.mean([], bounds=(0, 1), epsilon=1, ledger=L), DataError),
    (lambda L: stats.count([], epsilon=1, ledger=L), DataError),
    (lambda L: stats.mean(pd.Series(["a", "b"]), bounds=(0, 1), epsilon=1, ledger=L),
     DataError),
    (lambda L: stats.quantile(AGES, 1.5, bounds=(0, 1), epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.histogram(AGES, [3, 2, 1], epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.histogram(AGES, epsilon=1, ledger=L), ConfigError),
    (lambda L: stats.histogram(["a", None], categories=["a"], epsilon=1, ledger=L), DataError),
])
def test_bad_input_raises_before_anything_is_charged(call, error):
    ledger = Ledger(10.0, 1e-5)
    with pytest.raises(error):
        call(ledger)
    assert ledger.history() == () and ledger.spent()[0] == 0


def test_costs_are_recorded():
    ledger = Ledger(5.0, 1e-5)
    r = stats.mean(AGES, bounds=(17, 90), epsilon=0.5, ledger=ledger, label="age", rng=2)
    assert (r.epsilon, r.delta) == (0.5, 0.0)
    assert [c.label for c in ledger.history()] == ["age:count", "age:sum"]
    v = stats.variance(AGES, bounds=(17, 90), epsilon=1.0, delta=1e-6, ledger=ledger, rng=2)
    assert (v.epsilon, v.delta) == (1.0, 1e-6)
    assert "Gaussian" in v.mechanism and len(ledger.history()) == 5
    spent, _ = ledger.spent()
    assert spent <= 1.5 * (1 + 1e-9)  # the ledger composes at least as tightly as the sum
    q = stats.quantile(AGES, 0.25, bounds=(17, 90), epsilon=0.25, ledger=ledger, rng=2)
    assert (q.epsilon, q.delta) == (0.25, 0.0)


def test_one_off_ledger_and_budget_refusal():
    r = stats.count(AGES, epsilon=0.3, rng=3)  # ledger=None: a ledger of exactly 0.3
    assert r.epsilon == 0.3
    small = Ledger(0.4)
    with pytest.raises(BudgetExceededError):
        stats.mean(AGES, bounds=(17, 90), epsilon=0.5, ledger=small)
    assert small.history() == ()  # neither part of the mean was charged
    with pytest.raises(BudgetExceededError):  # a Gaussian needs a delta budget
        stats.sum(AGES, bounds=(17, 90), epsilon=0.1, delta=1e-6, ledger=small)


def test_accuracy_within_the_noise():
    # Laplace noise b = sensitivity / eps_part; |noise| < 15 b fails with prob e^-15
    n, eps = AGES.size, 1.0
    c = stats.count(AGES, epsilon=eps, rng=4).value
    assert isinstance(c, int) and abs(c - n) <= 15 / eps
    s = stats.sum(AGES, bounds=(0, 100), epsilon=eps, rng=4).value
    assert abs(s - np.clip(AGES, 0, 100).sum()) < 15 * 100 / eps
    m = stats.mean(AGES, bounds=(0, 100), epsilon=eps, rng=4).value
    true = np.clip(AGES, 0, 100).mean()
    assert abs(m - true) < 15 * (100 / (eps / 2)) / n + true * 15 * (2 / eps) / n
    v = stats.variance(AGES, bounds=(0, 100), epsilon=eps, rng=4).value
    assert abs(v - np.clip(AGES, 0, 100).var()) < 0.05 * 144
    g = stats.mean(pd.Series(AGES), bounds=(0, 100), epsilon=eps, delta=1e-6, rng=4).value
    assert abs(g - true) < 0.1


def test_histograms():
    h = stats.histogram(AGES, [0, 30, 40, 50, 120], epsilon=1.0, rng=5)
    exact = np.histogram(np.clip(AGES, 0, 120), [0, 30, 40, 50, 120])[0]
    assert h.value.dtype == np.int64 and np.all(h.value >= 0)
    assert np.all(np.abs(h.value - exact) <= 16)  # Laplace(1): |noise| < 15 + rounding
    assert h.details["edges"] == [0, 30, 40, 50, 120]
    labels = pd.Series(["a"] * 500 + ["b"] * 300 + ["z"] * 7)
    cat = stats.histogram(labels, categories=["a", "b", "c"], epsilon=1.0, rng=5)
    assert set(cat.value) == {"a", "b", "c"} and cat.clipped == 7
    assert abs(cat.value["a"] - 500) <= 16 and abs(cat.value["b"] - 300) <= 16
    assert stats.count(labels, epsilon=1.0, rng=5).value == pytest.approx(807, abs=16)


def test_quantiles():
    for q in (0.1, 0.5, 0.9):
        r = stats.quantile(AGES, q, bounds=(0, 100), epsilon=1.0, rng=6)
        # the exponential mechanism concentrates within a few ranks' worth of the quantile:
        # the chosen value's rank is within 40 of q n with probability > 1 - 1e-6 here
        rank = np.searchsorted(np.sort(AGES), r.value)
        assert abs(rank - q * AGES.size) < 200 or abs(r.value - np.quantile(AGES, q)) <= 1
    point = stats.quantile(np.full(1000, 42.0), 0.5, bounds=(0, 100), epsilon=1.0, rng=7)
    assert point.value == pytest.approx(42.0, abs=100 / 2 ** 20)
    assert stats.quantile(AGES, 0.5, bounds=(0, 100), epsilon=1.0, resolution=10,
                          rng=7).value in {10.0 * k for k in range(11)}


def test_pandas_series_and_lists_are_accepted():
    s = pd.Series([1.0, 2.0, 3.0], name="x")
    assert stats.sum(s, bounds=(0, 5), epsilon=1.0, rng=8).clipped == 0
    assert stats.sum([1, 2, 3], bounds=(0, 5), epsilon=1.0, rng=8).clipped == 0
    with pytest.raises(DataError, match="DataFrame"):
        stats.sum(s.to_frame(), bounds=(0, 5), epsilon=1.0)
    with pytest.raises(DataError, match="not numeric"):
        stats.sum(pd.Series([1, None, "x"], name="mixed"), bounds=(0, 5), epsilon=1.0)
    assert math.isfinite(stats.mean(pd.Series([1, 2], dtype="Int64"), bounds=(0, 5),
                                    epsilon=1.0, rng=8).value)
