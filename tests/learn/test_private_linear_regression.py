"""Private LinearRegression: sensitivity by neighbouring datasets, noise on every entry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError
from veil.learn.private import LinearRegression
from veil.learn.private.linear_regression import statistics_sensitivity, sufficient_statistics


def data(n=60, d=3, seed=0):
    g = np.random.default_rng(seed)
    X = g.uniform(-1, 2, size=(n, d))
    y = X @ np.array([1.0, -2.0, 0.5])[:d] + 0.3 + 0.1 * g.normal(size=n)
    return X, np.clip(y, -5, 5)


def design(X, lo, hi):
    mid = (lo + hi) / 2
    Z = np.clip(X, lo, hi) - mid
    return np.hstack([Z, np.ones((len(Z), 1))])


def test_sensitivity_bounds_every_neighbour_and_is_attained():
    X, y = data()
    lo, hi, lo_y, hi_y = -1.0, 2.0, -5.0, 5.0
    r = np.append(np.full(3, 1.5), 1.0)
    l1, l2 = statistics_sensitivity(r, 5.0)
    base = sufficient_statistics(design(X, lo, hi), y)
    g = np.random.default_rng(1)
    extra = [g.uniform(lo, hi, size=3) for _ in range(200)] + [np.full(3, hi), np.full(3, lo)]
    worst = 0.0
    for x in extra:
        for t in (lo_y, hi_y, g.uniform(lo_y, hi_y)):
            neighbour = sufficient_statistics(design(np.vstack([X, x]), lo, hi),
                                              np.append(y, t))
            diff = neighbour - base
            assert np.abs(diff).sum() <= l1 * (1 + 1e-12)
            assert np.linalg.norm(diff) <= l2 * (1 + 1e-12)
            worst = max(worst, np.abs(diff).sum())
    # a record at a corner of the box with an extreme label attains the bound
    assert worst == pytest.approx(l1, rel=1e-12)


def test_noise_reaches_every_entry_of_xtx_and_xty_with_the_laplace_variance():
    X, y = data(n=40, d=2)
    bounds_X, bounds_y = (-1.0, 2.0), (-5.0, 5.0)
    exact = sufficient_statistics(design(X, *bounds_X), y - 0.0)
    p = 3
    upper = np.triu_indices(p)
    r = np.array([1.5, 1.5, 1.0])
    l1, _ = statistics_sensitivity(r, 5.0)
    epsilon, runs = 2.0, 300
    noise = []
    for seed in range(runs):
        model = LinearRegression(epsilon=epsilon, bounds_X=bounds_X, bounds_y=bounds_y,
                                 rng=seed).fit(X, y)
        assert np.allclose(model.XtX_, model.XtX_.T)  # the noisy triangle is mirrored
        released = np.concatenate([model.XtX_[upper], model.Xty_])
        noise.append(released - exact)
    noise = np.array(noise)
    assert np.all(noise != 0)  # diffprivlib #104: no entry is left without noise
    # Laplace(b) has variance 2 b^2, b = L1 sensitivity / epsilon; the sample variance of
    # Laplace draws has relative standard error sqrt(5 / runs) (kurtosis 6): 5 SE per entry
    expected = 2 * (l1 / epsilon) ** 2
    ratios = noise.var(axis=0) / expected
    assert np.all(np.abs(ratios - 1) < 5 * math.sqrt(5 / runs))
    assert abs(noise.mean(axis=0) / math.sqrt(expected)).max() < 5 / math.sqrt(runs)


def test_gaussian_noise_with_delta_and_accuracy_at_large_epsilon():
    X, y = data(n=2000)
    model = LinearRegression(epsilon=50.0, delta=1e-6, bounds_X=(-1, 2), bounds_y=(-5, 5),
                             rng=0).fit(X, y)
    assert np.allclose(model.coef_, [1.0, -2.0, 0.5], atol=0.1)
    assert model.intercept_ == pytest.approx(0.3, abs=0.15)
    assert model.score(X, y) > 0.95
    assert model.ledger_.spent()[0] <= 50.0


def test_bounds_are_declared_or_estimated_never_read():
    X, y = data(n=3000)
    with pytest.raises(ConfigError, match="estimate"):
        LinearRegression(epsilon=1.0, bounds_y=(-5, 5)).fit(X, y)
    ledger = Ledger(20.0)
    model = LinearRegression(epsilon=20.0, bounds_X="estimate", bounds_y="estimate",
                             ledger=ledger, rng=3).fit(X, y)
    # three histograms of X's columns, one of y, then the statistics
    assert len(ledger.history()) == 5
    assert ledger.spent()[0] <= 20.0 * (1 + 1e-9)
    assert model.score(X, y) > 0.9


def test_budget_is_checked_before_anything_is_charged():
    X, y = data()
    ledger = Ledger(0.5)
    with pytest.raises(BudgetExceededError):
        LinearRegression(epsilon=1.0, bounds_X="estimate", bounds_y=(-5, 5),
                         ledger=ledger).fit(X, y)
    assert ledger.history() == ()
