"""veil.dp.sensitivity: the sensitivity table, local/smooth sensitivity of the median,
clipping (exact norm bounds), exact sums, and sample-and-aggregate."""

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from veil.dp import Ledger
from veil.dp.sensitivity import (
    clip_l1,
    clip_l2,
    clip_values,
    global_sensitivity,
    grid_sum,
    median_local_sensitivity,
    sample_and_aggregate,
    smooth_sensitivity_median,
)
from veil.errors import ConfigError, DataError


def test_global_sensitivity_table():
    b = (-2.0, 10.0)
    assert global_sensitivity("count") == 1 and global_sensitivity(
        "count", neighbours="replace_one") == 0
    assert global_sensitivity("sum", bounds=b) == 10
    assert global_sensitivity("sum", bounds=b, neighbours="replace_one") == 12
    assert global_sensitivity("mean", bounds=b, n=99) == pytest.approx(12 / 100)
    assert global_sensitivity("mean", bounds=b, n=100, neighbours="replace_one") == 12 / 100
    assert global_sensitivity("histogram") == 1
    assert global_sensitivity("histogram", neighbours="replace_one", norm="l2") == math.sqrt(2)
    with pytest.raises(ConfigError, match="bounds"):
        global_sensitivity("sum")
    with pytest.raises(ConfigError, match="n="):
        global_sensitivity("mean", bounds=b)
    with pytest.raises(ConfigError, match="query"):
        global_sensitivity("median", bounds=b)


def brute_force_local_sensitivity(x, lo, hi, grid):
    """max |median(x') - median(x)| over x' replacing one value by any grid point."""
    med = np.sort(x)[(len(x) + 1) // 2 - 1]
    worst = 0.0
    for i in range(len(x)):
        for v in grid:
            y = x.copy()
            y[i] = v
            worst = max(worst, abs(np.sort(y)[(len(y) + 1) // 2 - 1] - med))
    return worst


def test_median_local_and_smooth_sensitivity():
    rng = np.random.default_rng(1)
    grid = np.linspace(0, 10, 101)
    for n in (5, 6, 9):
        x = np.round(rng.uniform(0, 10, n), 1)
        assert median_local_sensitivity(x, (0, 10)) == pytest.approx(
            brute_force_local_sensitivity(x, 0, 10, grid))
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert median_local_sensitivity(x, (0, 10)) == 1.0
    # at distance 1: the largest local sensitivity over datasets one change away
    coarse = np.arange(11.0)
    at_one = max(brute_force_local_sensitivity(np.where(np.arange(5) == i, v, x), 0, 10,
                                               coarse)
                 for i in range(5) for v in coarse)
    assert median_local_sensitivity(x, (0, 10), distance=1) == at_one
    assert median_local_sensitivity(x, (0, 10), distance=2) == 7.0  # hi - x[3]
    smooth = smooth_sensitivity_median(x, (0, 10), beta=0.5)
    assert 1.0 <= smooth <= 10.0
    assert smooth == pytest.approx(max(math.exp(-0.5 * k) * median_local_sensitivity(
        x, (0, 10), distance=k) for k in range(6)))


def test_clip_values():
    clipped, n = clip_values([-1.0, 0.5, 2.0], (0, 1))
    assert n == 2 and clipped.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("clip,order", [(clip_l2, 2), (clip_l1, 1)])
def test_row_clipping_bounds_the_exact_norm(clip, order):
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(500, 37)) * rng.uniform(0.1, 10, size=(500, 1))
    out, n = clip(rows, 3.0)
    norms = np.linalg.norm(rows, ord=order, axis=1)
    assert n == np.count_nonzero(norms > 3.0 * (1 - 1e-12))
    # the exact (rational) norm of every clipped row is at most the bound
    for row in out[:50]:
        if order == 1:
            assert sum(abs(Fraction(v)) for v in row) <= 3
        else:
            assert sum(Fraction(v) ** 2 for v in row) <= 9
    untouched = norms < 3.0 * (1 - 1e-12)
    assert np.array_equal(out[untouched], rows[untouched])
    single, k = clip(np.array([3.0, 4.0]), 1.0)
    assert k == 1 and single.shape == (2,)
    with pytest.raises(ConfigError):
        clip(rows, 0.0)
    with pytest.raises(DataError):
        clip(np.ones((2, 2, 2)), 1.0)


def test_sample_and_aggregate_reveals_neither_estimates_nor_n(caplog):
    data = np.array([3.14159, 2.71828, 1.41421])
    empty = sample_and_aggregate(data, np.mean, blocks=30, bounds=(0, 10), epsilon=1.0, rng=5)
    assert empty.details == {"blocks": 30}  # no count of empty blocks: it would tell n
    for estimator in (lambda b: b.sum() * np.inf if b.size == 2 else b.sum(),
                      lambda b: np.repeat(b, 2) if b.size else [0.0, 0.0]):
        with pytest.raises(DataError) as info:
            sample_and_aggregate(data, estimator, blocks=2, bounds=(0, 10), epsilon=1.0,
                                 rng=1)
        assert not any(c.isdigit() for c in str(info.value)), str(info.value)
    with caplog.at_level("WARNING"):
        sample_and_aggregate(data, np.sum, blocks=2, bounds=(0, 1), epsilon=1.0, rng=1)
    assert "clipped" in caplog.text and not any(f" {k} of " in caplog.text for k in range(4))


def test_grid_sum_is_exact_with_exact_sensitivity():
    values = np.array([1e-9, 0.1, 0.2, 0.3, 5.0, 7.25, -1.0])
    total, add_remove, replace = grid_sum(values, (-1.0, 8.0))
    q = 2.0 ** (4 - 23)  # 8 in [2^3, 2^4)
    assert total == q * sum(round(v / q) for v in np.clip(values, -1, 8))
    assert (add_remove, replace) == (8.0, 9.0)
    # float summation order changes np.sum; the grid sum is order-free
    big = np.random.default_rng(3).uniform(-1, 1, 100_000)
    assert grid_sum(big, (-1, 1))[0] == grid_sum(big[::-1], (-1, 1))[0]
    assert grid_sum([], (0, 1))[0] == 0.0


def test_sample_and_aggregate():
    rng = np.random.default_rng(4)
    data = rng.normal(5.0, 2.0, 20_000)
    ledger = Ledger(2.0, 1e-5)
    r = sample_and_aggregate(data, np.median, blocks=50, bounds=(0, 10), epsilon=1.0,
                             ledger=ledger, rng=5)
    # noise Laplace(10 / (50 * 1)) on the mean of 50 block medians (sd ~ 2 * 1.25 / sqrt(400))
    assert abs(r.value - 5.0) < 15 * 10 / 50 + 0.1
    assert r.epsilon == 1.0 and len(ledger.history()) == 1 and r.details["blocks"] == 50
    df = pd.DataFrame({"x": data[:2000], "y": 2 * data[:2000]})
    vec = sample_and_aggregate(df, lambda b: [b["x"].mean(), b["y"].mean()], blocks=20,
                               bounds=(0, 20), epsilon=1.0, delta=1e-6, ledger=ledger, rng=5)
    assert vec.value.shape == (2,) and "Gaussian" in vec.mechanism
    clipped = sample_and_aggregate(data, np.mean, blocks=10, bounds=(0, 1), epsilon=1.0, rng=5)
    assert clipped.clipped == 10 and clipped.value <= 1.0
    with pytest.raises(DataError, match="block"):
        sample_and_aggregate(data, lambda b: "x", blocks=5, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(DataError, match="empty"):
        sample_and_aggregate([], np.mean, blocks=5, bounds=(0, 1), epsilon=1.0)
