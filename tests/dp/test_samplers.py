"""Exact samplers: their pmfs (chi-square), both paths (fast and slow), and their guards.

Chi-square tests use fixed seeds and a significance level of 1e-4 on bins whose expected
count is at least 5 (the tails are pooled into one bin), so a correct sampler fails with
probability 1e-4 per test and a sampler with a biased pmf fails almost surely.
"""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtr

from veil.dp import intervals, samplers
from veil.errors import ConfigError
from veil.random import Generator

ALPHA = 1e-4


def chi2_pvalue(draws: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square p-value of integer ``draws`` against ``pmf`` on ``support`` (everything
    outside the support and every bin expected below 5 pooled into one bin)."""
    n = draws.size
    observed = np.array([np.count_nonzero(draws == k) for k in support], dtype=float)
    expected = pmf * n
    big = expected >= 5
    obs = np.append(observed[big], n - observed[big].sum())
    exp = np.append(expected[big], n - expected[big].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep]).pvalue


def laplace_cdf(x):
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0)), 1 - 0.5 * np.exp(-np.maximum(x, 0)))


def rounded_pmf(cdf, center, scale, grid, support):
    """P(K = k) = P((k - 1/2) grid <= center + scale N < (k + 1/2) grid)."""
    return (cdf(((support + 0.5) * grid - center) / scale)
            - cdf(((support - 0.5) * grid - center) / scale))


@pytest.fixture
def slow_only(monkeypatch):
    """Force every sample through the MPFR slow path (the fast path never decides)."""
    monkeypatch.setattr(samplers, "KAPPA", 1.0)
    monkeypatch.setattr(intervals, "KAPPA", 1.0)


@pytest.mark.parametrize("center", [0.0, 0.3, -7.71])
def test_rounded_laplace_pmf(center):
    grid, scale = 0.25, 1.0
    k = samplers.rounded_laplace(np.full(200_000, center), scale, grid, rng=1)
    support = np.arange(-80, 80)
    pmf = rounded_pmf(laplace_cdf, center, scale, grid, support)
    assert chi2_pvalue(k, support, pmf) > ALPHA


@pytest.mark.parametrize("center", [0.0, 0.3, 123.456])
def test_rounded_gaussian_pmf(center):
    grid, sigma = 0.25, 1.0
    k = samplers.rounded_gaussian(np.full(200_001, center), sigma, grid, rng=2)
    support = np.arange(int(center / grid) - 40, int(center / grid) + 40)
    pmf = rounded_pmf(ndtr, center, sigma, grid, support)
    assert chi2_pvalue(k, support, pmf) > ALPHA


def test_grid_samplers_scale_and_variance():
    # noise / grid over 10^6 draws: Var(Laplace(b)) = 2 b^2, Var(N) = sigma^2, plus the
    # rounding's grid^2 / 12. The sample variance of n draws has standard deviation
    # sqrt((m4 - var^2) / n): m4 = 24 b^4 (Laplace), 3 sigma^4 (normal); 5 of them.
    n, grid = 1_000_000, 2.0 ** -10
    lap = samplers.rounded_laplace(np.zeros(n), 3.0, grid, rng=3) * grid
    var = 2 * 9.0 + grid ** 2 / 12
    assert abs(lap.var() - var) < 5 * math.sqrt((24 * 3.0 ** 4 - var ** 2) / n)
    gau = samplers.rounded_gaussian(np.zeros(n), 2.0, grid, rng=3) * grid
    assert abs(gau.var() - 4.0) < 5 * math.sqrt(2 * 16.0 / n)
    assert abs(lap.mean()) < 5 * math.sqrt(18 / n) and abs(gau.mean()) < 5 * 2 / math.sqrt(n)


def test_discrete_laplace_pmf():
    for scale in (0.7, 4.0):
        k = samplers.discrete_laplace(scale, 200_000, rng=4)
        support = np.arange(-200, 201)
        pmf = math.tanh(1 / (2 * scale)) * np.exp(-np.abs(support) / scale)
        assert chi2_pvalue(k, support, pmf) > ALPHA


def test_discrete_gaussian_pmf():
    for sigma in (0.6, 2.5, 30.0):
        k = samplers.discrete_gaussian(sigma, 100_000, rng=5)
        support = np.arange(-int(12 * sigma) - 3, int(12 * sigma) + 4)
        w = np.exp(-support.astype(float) ** 2 / (2 * sigma ** 2))
        assert chi2_pvalue(k, support, w / w.sum()) > ALPHA


def test_bernoulli_coins():
    # mean of n coins within 5 standard deviations sqrt(p (1 - p) / n)
    n = 400_000
    for p in (0.3, 1e-3, 0.999):
        mean = samplers.bernoulli(p, n, rng=6).mean()
        assert abs(mean - p) < 5 * math.sqrt(p * (1 - p) / n)
    x = np.array([0.0, 0.1, 1.0, 3.0])
    coins = samplers.bernoulli_exp(np.repeat(x, n // 4).reshape(4, -1), rng=6)
    for row, xi in zip(coins, x):
        p = math.exp(-xi)
        assert abs(row.mean() - p) < 5 * math.sqrt(p * (1 - p) / row.size + 1e-12)
    assert samplers.bernoulli(0.0, 5, rng=1).sum() == 0 and samplers.bernoulli(1.0, 5).all()


def test_noisy_argmax_gumbel_is_the_exponential_mechanism():
    u = np.array([0.0, 1.0, 1.5, 3.0])
    m = np.array([4.0, 1.0, 2.0, 0.0])  # a zero weight never wins
    rng = Generator(7)
    wins = np.array([samplers.noisy_argmax(u, coef=0.8, multiplicities=m, rng=rng)
                     for _ in range(10_000)])
    w = m * np.exp(0.8 * u)
    assert np.count_nonzero(wins == 3) == 0
    assert chi2_pvalue(wins, np.arange(3), (w / w.sum())[:3]) > ALPHA


def test_noisy_argmax_laplace_two_candidates():
    # P(u1 + b L1 > u0 + b L0) = P(L0 - L1 < d/b) with d = u1 - u0; the difference of two
    # Laplace(1) has CDF 1 - exp(-t)(1 + t/2)/2 for t >= 0.
    rng = Generator(8)
    wins = np.array([samplers.noisy_argmax([0.0, 1.0], noise="laplace", scale=2.0, rng=rng)
                     for _ in range(8000)])
    t = 0.5
    p1 = 1 - math.exp(-t) * (1 + t / 2) / 2
    assert abs(wins.mean() - p1) < 5 * math.sqrt(p1 * (1 - p1) / wins.size)


def test_slow_path_distributions(slow_only):
    grid = 0.25
    support = np.arange(-40, 40)
    lap = samplers.rounded_laplace(np.full(3000, 0.3), 1.0, grid, rng=9)
    assert chi2_pvalue(lap, support, rounded_pmf(laplace_cdf, 0.3, 1.0, grid, support)) > ALPHA
    gau = samplers.rounded_gaussian(np.full(3000, -0.3), 1.0, grid, rng=9)
    assert chi2_pvalue(gau, support, rounded_pmf(ndtr, -0.3, 1.0, grid, support)) > ALPHA
    dg = samplers.discrete_gaussian(1.5, 1500, rng=9)
    ks = np.arange(-10, 11)
    w = np.exp(-ks ** 2 / (2 * 1.5 ** 2))
    assert chi2_pvalue(dg, ks, w / w.sum()) > ALPHA
    rng = Generator(9)
    wins = np.array([samplers.noisy_argmax([0.0, 1.0, 2.0], rng=rng) for _ in range(1500)])
    w = np.exp([0.0, 1.0, 2.0])
    assert chi2_pvalue(wins, np.arange(3), w / w.sum()) > ALPHA


def test_fast_decisions_agree_with_the_exact_path():
    # Replay the stream: every index the fast path returned must be the one the MPFR path
    # finds for the same uniform cells (one block, so the words are the stream's first).
    n, s, grid = 2000, 1500.0, 2.0 ** -10
    center = np.random.default_rng(0).uniform(-5, 5, n)
    m = np.floor(center / grid)
    k = samplers.laplace_grid(center, s, grid, Generator(10))
    words = Generator(10).random_raw(n).view(np.int64)
    for i in range(0, n, 7):
        x = int(words[i])
        exact = samplers._slow_laplace(center[i], grid, m[i], -s if x < 0 else s,
                                       x if x >= 0 else -x - 1, Generator(0))
        assert k[i] == m[i] + exact
    k = samplers.gaussian_grid(center, s, grid, Generator(11))
    h = n // 2
    xs, ys, exact, *_ = samplers._disc_points(h, Generator(11))
    for i in range(0, n, 7):
        pair = i % h
        cells = exact.get(pair) or [(int(xs[pair]), 63), (int(ys[pair]), 63)]
        found = samplers._slow_gaussian(cells, [int(i >= h)], [center[i]], grid, [m[i]], s,
                                        Generator(0))
        assert k[i] == m[i] + found[0]


def test_grid_release_support_is_the_grid():
    # Mironov's attack reads the low bits of x + noise; grid releases have none to read.
    grid = 2.0 ** -6
    for center in (0.1, 0.1 + 1e-12, math.pi):
        k = samplers.rounded_laplace(np.full(1000, center), 1.0, grid, rng=11)
        out = k * grid
        assert np.array_equal(out / grid, np.round(out / grid))


def test_guards():
    with pytest.raises(ConfigError, match="power of two"):
        samplers.rounded_laplace(0.0, 1.0, 0.3)
    with pytest.raises(ConfigError, match="too large"):
        samplers.rounded_gaussian(2.0 ** 60, 1.0, 1.0)
    with pytest.raises(ConfigError, match="scale"):
        samplers.discrete_laplace(-1.0, 3)
    with pytest.raises(ConfigError, match="p="):
        samplers.bernoulli(1.5)
    with pytest.raises(ConfigError, match="noise"):
        samplers.noisy_argmax([1.0, 2.0], noise="cauchy")


def test_default_generator_is_secure_and_numpy_state_untouched():
    before = np.random.get_state()[1].copy()
    a = samplers.rounded_laplace(np.zeros(64), 1.0, 2.0 ** -10)
    b = samplers.rounded_laplace(np.zeros(64), 1.0, 2.0 ** -10)
    samplers.discrete_gaussian(3.0, 10), samplers.noisy_argmax([1.0, 2.0])
    assert not np.array_equal(a, b)  # OS-seeded, not a fixed default seed
    assert np.array_equal(before, np.random.get_state()[1])
