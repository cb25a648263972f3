import numpy as np
import pandas as pd
import pytest

from veil.anon import add_noise, permute_sensitive, rank_swap
from veil.errors import ConfigError, DataError


def test_permutation_keeps_each_class_distribution(table):
    df, _ = table
    before = df.copy()
    out = permute_sensitive(df, ["sex", "job"], "disease", rng=3)
    pd.testing.assert_frame_equal(df, before)
    assert (out.drop(columns="disease") == df.drop(columns="disease")).all().all()
    for _, group in df.groupby(["sex", "job"]).groups.items():
        assert sorted(out.loc[group, "disease"]) == sorted(df.loc[group, "disease"])
    assert (out["disease"] != df["disease"]).any()
    assert permute_sensitive(df, ["sex", "job"], "disease", rng=3).equals(out)


def test_additive_noise_has_the_declared_scale():
    n = 20000
    df = pd.DataFrame({"x": np.zeros(n), "y": np.arange(n, dtype=float)})
    out = add_noise(df, ["x"], 2.0, rng=5)
    # mean within 5 standard errors (2/sqrt(n)); sample sd within 5 of its ~sd/sqrt(2n)
    assert abs(out["x"].mean()) < 5 * 2.0 / np.sqrt(n)
    assert abs(out["x"].std() - 2.0) < 5 * 2.0 / np.sqrt(2 * n)
    assert out["y"].equals(df["y"])
    uniform = add_noise(df, "x", 1.5, distribution="uniform", rng=5)["x"]
    assert uniform.abs().max() <= 1.5
    assert abs(uniform.var() - 1.5 ** 2 / 3) < 5 * 1.5 ** 2 * np.sqrt(4 / 45 / n)


def test_rank_swap_moves_values_within_the_window():
    n, p = 500, 2.0
    values = np.arange(n, dtype=float)[::-1].copy()
    df = pd.DataFrame({"v": values})
    out = rank_swap(df, "v", p=p, rng=8)["v"].to_numpy()
    assert sorted(out) == sorted(values)                      # same distribution
    window = int(p * n / 100)
    assert np.max(np.abs(out - values)) <= window            # ranks moved <= window
    assert np.mean(out != values) > 0.9


def test_bad_input():
    df = pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0]})
    with pytest.raises(DataError, match="numeric"):
        add_noise(df, "x", 1.0, rng=1)
    with pytest.raises(ConfigError, match="scale"):
        add_noise(df, "y", -1.0, rng=1)
    with pytest.raises(ConfigError, match="p=0"):
        rank_swap(df, "y", p=0)
    with pytest.raises(DataError, match="'z'"):
        permute_sensitive(df, ["z"], "y")
    with pytest.raises(ConfigError, match="also a quasi"):
        permute_sensitive(df, ["x"], "x")
