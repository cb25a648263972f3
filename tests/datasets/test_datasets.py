import numpy as np
import pandas as pd
import pytest

from veil.datasets import (
    available,
    load_adult,
    load_adult_hierarchies,
    load_nursery,
    load_xy,
    partition,
    synthetic_census,
)
from veil.datasets.files import fetch
from veil.errors import ConfigError, DataError


def test_adult_splits(adult_available):
    arx = load_adult("arx")
    assert arx.shape == (30162, 9) and arx.columns[0] == "sex"
    train, test = load_adult("train"), load_adult("test")
    assert train.shape == (30162, 15) and test.shape == (15060, 15)
    assert set(test["income"]) == {"<=50K", ">50K"}
    hier = load_adult_hierarchies()
    assert set(hier) >= {"age", "education", "sex"}
    assert (hier["age"].iloc[:, -1] == "*").all()


def test_adult_encoding_uses_public_ranges(adult_available):
    data = load_xy("adult")
    X, y = data
    assert X.shape[0] == 30162 and X.shape[1] == len(data.feature_names)
    assert X.min() >= 0 and X.max() <= 1
    assert 0.2 < y.mean() < 0.3


def test_nursery(nursery_available):
    df = load_nursery()
    assert df.shape == (12960, 9)
    d = load_xy("nursery")
    assert d.X.shape == (12960, 27) and set(np.unique(d.y)) <= set(range(5))


def test_sklearn_sets_and_unknown_name():
    d = load_xy("breast_cancer")
    assert d.X.shape == (569, 30) and d.task == "classification"
    assert load_xy("diabetes").task == "regression"
    with pytest.raises(ConfigError, match="name='nope'"):
        load_xy("nope")
    assert available("digits")


def test_missing_file_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("VEIL_DATA", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    import veil.datasets.files as files
    monkeypatch.setattr(files, "search_roots", lambda path=None: [tmp_path / "none"])
    with pytest.raises(DataError, match="downloads are off"):
        fetch("adult/adult.csv")


def test_explicit_path_and_malformed_csv(tmp_path):
    (tmp_path / "nursery").mkdir()
    (tmp_path / "nursery" / "nursery.data").write_text('a,b\n"unterminated\n')
    with pytest.raises(DataError, match="not a readable CSV"):
        load_nursery(tmp_path)


def test_synthetic_census_skew_and_determinism():
    a = synthetic_census(5000, rng=1)
    b = synthetic_census(5000, rng=1)
    pd.testing.assert_frame_equal(a, b)
    assert a["age"].between(17, 90).all() and a["zip"].str.len().eq(5).all()
    top = a["zip"].value_counts(normalize=True)
    assert top.iloc[0] > 10 * top.iloc[len(top) // 2]  # Zipf skew: dense and sparse areas
    assert a.groupby("education")["income"].median().loc["Doctorate"] > \
        a.groupby("education")["income"].median().loc["HS-grad"]


def test_iid_and_quantity_skew_cover_all_rows():
    for parts in (partition.iid(103, 10, rng=2), partition.quantity_skew(103, 10, alpha=0.5,
                                                                          min_size=2, rng=2)):
        allrows = np.concatenate(parts)
        assert np.array_equal(np.sort(allrows), np.arange(103))
        assert min(len(p) for p in parts) >= 2
    sizes = [len(p) for p in partition.iid(103, 10, rng=3)]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_label_skew():
    y = np.repeat(np.arange(10), 100)
    skewed = partition.dirichlet(y, 10, alpha=0.1, rng=4)
    flat = partition.dirichlet(y, 10, alpha=1000.0, rng=4)
    assert np.array_equal(np.sort(np.concatenate(skewed)), np.arange(1000))

    def classes_per_party(parts):
        return np.mean([len(np.unique(y[p])) for p in parts if len(p)])

    assert classes_per_party(skewed) < classes_per_party(flat)
    with pytest.raises(ConfigError, match="parties=2000"):
        partition.dirichlet(y, 2000)


def test_vertical_split():
    df = pd.DataFrame({"id": range(200), "a": 1, "b": 2, "c": 3, "y": 0}).set_index("id")
    parts = partition.vertical(df, 2, label="y", overlap=0.7, rng=5)
    assert "y" in parts[0].columns and "y" not in parts[1].columns
    cols = [set(p.columns) - {"y"} for p in parts]
    assert cols[0].isdisjoint(cols[1]) and cols[0] | cols[1] == {"a", "b", "c"}
    ids = [set(p.index) for p in parts]
    common = ids[0] & ids[1]
    assert 0 < len(common) < 200 and ids[0] != ids[1]
    assert ids[0] | ids[1] == set(range(200))
