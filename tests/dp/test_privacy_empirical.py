"""Empirical differential-privacy checks on neighbouring inputs.

Pure epsilon-DP: for every output bin, ``|log P(bin | x) - log P(bin | x')| <= epsilon``.
From N draws under each input with counts ``c, c'`` in a bin, the estimate
``log(c / c')`` has standard deviation about ``sqrt(1/c + 1/c')`` (delta method for
Poisson counts, accurate for counts >= 200, the only bins used). With m bins tested, a
Bonferroni margin ``z sqrt(1/c + 1/c')`` with ``z = Phi^-1(1 - alpha / (2m))`` and
``alpha = 1e-6`` holds for all bins at once with probability >= 1 - 1e-6, so the check
``max_bins |log(c/c')| - margin <= epsilon`` fails for a correct mechanism with
probability at most 1e-6 (the seeds are fixed, so it either passes or does not).

(epsilon, delta)-DP: for location families the worst sets are half-lines, so for each
half-line S of outputs we check ``P(S|x) - e^eps P(S|x') <= delta + z sd`` with sd the
standard deviation of the estimate, ``sqrt((p (1-p) + e^(2 eps) p' (1-p')) / N)``.

Each check is paired with a negative control that must fail it: the same mechanism with
too little noise, which shows that the check has the power to catch a broken mechanism.
"""

import math

import numpy as np
from scipy.stats import norm

from veil.dp import (
    AboveThreshold,
    DiscreteGaussian,
    DiscreteLaplace,
    Exponential,
    Gaussian,
    Laplace,
    RandomizedResponse,
)
from veil.random import Generator

ALPHA = 1e-6


def pure_excess(a: np.ndarray, b: np.ndarray, min_count: int = 200) -> float:
    """max over bins of |log(c_a / c_b)| minus its Bonferroni margin (equal sample sizes)."""
    assert a.size == b.size
    values, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    ca = np.bincount(inverse[:a.size], minlength=values.size).astype(float)
    cb = np.bincount(inverse[a.size:], minlength=values.size).astype(float)
    use = (ca >= min_count) & (cb >= min_count)
    z = norm.ppf(1 - ALPHA / (2 * use.sum()))
    excess = np.abs(np.log(ca[use] / cb[use])) - z * np.sqrt(1 / ca[use] + 1 / cb[use])
    return float(excess.max())


def approx_excess(a: np.ndarray, b: np.ndarray, epsilon: float, delta: float) -> float:
    """max over half-lines S of P(S|a) - e^eps P(S|b) - delta - margin, both directions."""
    n = a.size
    cuts = np.unique(np.quantile(np.concatenate([a, b]), np.linspace(0.001, 0.999, 200)))
    z = norm.ppf(1 - ALPHA / (4 * cuts.size))
    worst = -np.inf
    below = {id(x): np.searchsorted(np.sort(x), cuts, side="right") / n for x in (a, b)}
    for x, y in ((a, b), (b, a)):
        for lower in (True, False):
            p = below[id(x)] if lower else 1 - below[id(x)]
            q = below[id(y)] if lower else 1 - below[id(y)]
            sd = np.sqrt((p * (1 - p) + math.exp(2 * epsilon) * q * (1 - q)) / n)
            worst = max(worst, float(np.max(p - math.exp(epsilon) * q - delta - z * sd)))
    return worst


def draws(mechanism, value, n, seed):
    return mechanism._randomize(np.full(n, value), Generator(seed))


def test_laplace_log_ratio_stays_under_epsilon():
    eps, n = 1.0, 1_000_000
    mech = Laplace(eps, sensitivity=1.0)
    binned = [np.floor(draws(mech, x, n, s) / 0.25) for x, s in ((0.0, 1), (1.0, 2))]
    assert pure_excess(*binned) <= eps
    weak = Laplace(2 * eps, sensitivity=1.0)  # claims eps, spends 2 eps
    binned = [np.floor(draws(weak, x, n, s) / 0.25) for x, s in ((0.0, 1), (1.0, 2))]
    assert pure_excess(*binned) > eps


def test_discrete_laplace_log_ratio():
    eps, n = 0.7, 1_000_000
    mech = DiscreteLaplace(eps, sensitivity=2)
    assert pure_excess(draws(mech, 0, n, 3), draws(mech, 2, n, 4)) <= eps
    weak = DiscreteLaplace(eps, sensitivity=1)  # calibrated for sensitivity 1, shifted by 2
    assert pure_excess(draws(weak, 0, n, 3), draws(weak, 2, n, 4)) > eps


def test_gaussian_half_lines():
    eps, delta, n = 1.0, 1e-5, 1_000_000
    mech = Gaussian(eps, delta, sensitivity=1.0)
    assert approx_excess(draws(mech, 0.0, n, 5), draws(mech, 1.0, n, 6), eps, delta) <= 0
    weak = Gaussian(eps, delta, sensitivity=1.0 / 3)  # a third of the noise needed
    assert approx_excess(draws(weak, 0.0, n, 5), draws(weak, 1.0, n, 6), eps, delta) > 0


def test_discrete_gaussian_half_lines():
    eps, delta, n = 1.0, 1e-5, 400_000
    mech = DiscreteGaussian(eps, delta, sensitivity=1.0)
    a, b = draws(mech, 0, n, 7), draws(mech, 1, n, 8)
    assert approx_excess(a.astype(float), b.astype(float), eps, delta) <= 0
    weak = DiscreteGaussian(eps, delta, sensitivity=0.25)
    a, b = draws(weak, 0, n, 7), draws(weak, 1, n, 8)
    assert approx_excess(a.astype(float), b.astype(float), eps, delta) > 0


def test_randomized_response_log_ratio():
    eps, n = 1.2, 400_000
    mech = RandomizedResponse(eps, 3)
    assert pure_excess(draws(mech, 0, n, 9), draws(mech, 1, n, 10)) <= eps
    weak = RandomizedResponse(2 * eps, 3)
    assert pure_excess(draws(weak, 0, n, 9), draws(weak, 1, n, 10)) > eps


def test_exponential_mechanism_log_ratio():
    # neighbouring utility vectors: each utility moves by at most the sensitivity 1, in
    # opposite directions (the non-monotone case that needs the factor 2): the true log
    # ratio at candidate 0 is 0.84 for epsilon = 1, and 1.81 without the factor 2
    eps, n = 1.0, 4000
    u, u2 = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 0.0, 1.0, 2.0])

    def picks(mech, utilities, seed):
        rng = Generator(seed)
        return np.array([mech._randomize(utilities, rng) for _ in range(n)])

    mech = Exponential(eps, 1.0)
    assert pure_excess(picks(mech, u, 11), picks(mech, u2, 12), min_count=100) <= eps
    weak = Exponential(eps, 1.0, monotone=True)  # wrongly claims monotone utilities
    assert pure_excess(picks(weak, u, 11), picks(weak, u2, 12), min_count=100) > eps


def test_above_threshold_log_ratio():
    # query answers moved by at most the sensitivity; output = index of the first "above"
    eps, n = 1.0, 3000
    answers, neighbour = np.array([9.0, 10.0, 11.0]), np.array([10.0, 9.0, 10.0])

    def runs(mech, values, seed):
        rng = Generator(seed)
        out = [mech._randomize(values, rng) for _ in range(n)]
        return np.array([-1 if o is None else o for o in out])

    mech = AboveThreshold(eps, threshold=10.0, sensitivity=1.0)
    assert pure_excess(runs(mech, answers, 13), runs(mech, neighbour, 14),
                       min_count=100) <= eps
    weak = AboveThreshold(4 * eps, threshold=10.0, sensitivity=1.0)
    assert pure_excess(runs(weak, answers, 13), runs(weak, neighbour, 14),
                       min_count=100) > eps
