"""Mondrian, MDAV and Anatomy: their outputs satisfy the models they promise."""

import numpy as np
import pandas as pd
import pytest

from veil.anon import KAnonymity, LDiversity, TCloseness, anonymize, check
from veil.anon.metrics import information_loss
from veil.anon.microaggregation import mdav
from veil.errors import DataError
from veil.random import default_rng

QIS = ["age", "zip", "sex", "job"]


def _categorical(hierarchies: dict) -> dict:
    """Mondrian's quasi-identifiers: hierarchies for categories, None for numbers."""
    return {**hierarchies, "age": None, "zip": None}


def _covers(original: pd.Series, released: pd.Series) -> bool:
    """Every released value stands for its record's original value."""
    for x, label in zip(original.astype(str), released.astype(str)):
        if label.startswith("["):
            lo, hi = (float(v) for v in label[1:-1].split(","))
            if not lo <= float(x) <= hi:
                return False
        elif label.startswith("{"):
            if x not in label[1:-1].split(","):
                return False
        elif label != x:
            return False
    return True


@pytest.mark.parametrize("strict", [False, True])
def test_mondrian_satisfies_k_and_covers_originals(table, strict):
    df, hierarchies = table
    result = anonymize(df, _categorical(hierarchies), "disease", [KAnonymity(5)],
                       algorithm="mondrian", strict=strict)
    assert check(result.table, QIS).k >= 5
    assert result.metrics["k"] >= 5
    assert all(_covers(df[c], result.table[c]) for c in QIS)
    assert 0 < result.metrics["loss"] < 1
    pycanon = pytest.importorskip("pycanon.anonymity")
    assert pycanon.k_anonymity(result.table, QIS) >= 5


def test_mondrian_with_l_and_t(table):
    df, hierarchies = table
    models = [KAnonymity(3), LDiversity(3), TCloseness(0.3)]
    result = anonymize(df, _categorical(hierarchies), "disease", models, algorithm="mondrian")
    report = check(result.table, QIS, "disease")
    assert report.k >= 3 and report.l_distinct >= 3 and report.t <= 0.3 + 1e-12


def test_mondrian_without_hierarchies_and_unmet(table):
    df, _ = table
    result = anonymize(df, QIS, "disease", [KAnonymity(10)], algorithm="mondrian")
    assert check(result.table, QIS).k >= 10
    with pytest.raises(DataError, match="whole table"):
        anonymize(df, QIS, "disease", [LDiversity(6, "entropy")], algorithm="mondrian")


def test_mondrian_on_adult_satisfies_k(adult):
    df, hierarchies = adult
    result = anonymize(df, {**hierarchies, "age": None}, "occupation", [KAnonymity(5)],
                       algorithm="mondrian")
    qis = list(hierarchies)
    assert check(result.table, qis).k >= 5
    assert result.metrics["loss"] < 0.1    # far finer than full-domain generalization


def test_mdav_by_hand():
    # n = 6 = 2k: the record farthest from the centroid (1) takes its 2 nearest; the rest
    # form the last group. SSE = 2 * (1 + 0 + 1) = 4, SST = 125.5 (scale-free ratio).
    x = np.array([[1.0], [2.0], [3.0], [10.0], [11.0], [12.0]])
    groups = mdav(x, 3)
    assert groups[0] == groups[1] == groups[2] != groups[3] == groups[4] == groups[5]
    assert information_loss(x, groups) == pytest.approx(100 * 4 / 125.5)


def test_mdav_groups_hold_k_to_2k_minus_1_records():
    rng = default_rng(4)
    n, k = 203, 5
    df = pd.DataFrame({"a": rng.normal(size=n), "b": rng.exponential(size=n) * 10,
                       "c": rng.integers(0, 50, n), "s": rng.integers(0, 3, n)})
    result = anonymize(df, ["a", "b", "c"], models=[KAnonymity(k)], algorithm="mdav")
    sizes = result.table.groupby(["a", "b", "c"]).size()
    assert sizes.min() >= k and result.metrics["groups"] <= n // k
    assert check(result.table, ["a", "b", "c"]).k >= k
    assert 0 < result.metrics["information_loss"] < 100
    # centroids keep the column means
    assert np.allclose(result.table[["a", "b", "c"]].mean(), df[["a", "b", "c"]].mean())


def test_anatomy_buckets_are_l_diverse(table):
    df, _ = table
    l = int(len(df) // df["disease"].value_counts().max())
    result = anonymize(df, QIS, "disease", [LDiversity(l)], algorithm="anatomy", rng=9)
    qit, st = result.table, result.sensitive_table
    assert "disease" not in qit.columns and "group" in qit.columns
    assert st["count"].sum() == len(df)
    assert (st["count"] == 1).all()                      # a value at most once per group
    per_group = st.groupby("group").size()
    assert per_group.min() >= l and per_group.max() <= l + 1    # residues spread out
    assert result.metrics["l_distinct"] >= l
    joined = qit.assign(disease=df["disease"]).groupby(["group", "disease"]).size()
    assert joined.to_dict() == st.set_index(["group", "disease"])["count"].to_dict()
    with pytest.raises(DataError, match="no l-diverse anatomy"):
        anonymize(df, QIS, "disease", [LDiversity(l + 1)], algorithm="anatomy", rng=9)
