"""The Spark backend against the pandas one, on a real local Spark session."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veil.dp import Ledger
from veil.dp.query import Query
from veil.dp.query.spark import java_home
from veil.errors import DataError

pytest.importorskip("pyspark", reason="pyspark is not installed (extra 'spark')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'spark')")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning",
                                        "ignore:The copy keyword is deprecated")
if java_home() is None:
    pytest.skip("no Java 17+ for Spark (a system package: make test never installs one; "
                "Debian: openjdk-17-jre-headless)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    from veil.dp.query.spark import session

    s = session("local[1]", "veil-tests", partitions=2)
    yield s
    s.stop()


def table(seed: int = 0, n_units: int = 300) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    rows = r.integers(1, 7, n_units)
    unit = np.repeat(np.arange(n_units), rows)
    return pd.DataFrame({"id": unit, "ward": r.choice(list("abc"), unit.size),
                         "age": r.uniform(0, 100, unit.size).round(1)})


def test_spark_and_pandas_release_the_same_table(spark):
    # every unit within the bounds: bounding keeps every row, the totals are exact on both
    # backends, and the same noise generator then gives the same released table
    df = table()
    q = (Query("id", max_groups=3, max_rows=6).group_by("ward").count().mean("age", (0, 100))
         .quantile("age", 0.5, (0, 100)))
    res_a = q.run(df, epsilon=2.0, delta=1e-6, rng=7)
    res_b = q.run(spark.createDataFrame(df), epsilon=2.0, delta=1e-6, rng=7)
    pd.testing.assert_frame_equal(res_a.table, res_b.table)
    assert res_a.diagnostics == res_b.diagnostics


def test_spark_bounds_each_unit_and_keeps_the_deterministic_totals(spark):
    # units over max_rows in some ward but never over max_groups: the kept count of each
    # ward is min(rows, max_rows) summed over units, whichever rows are sampled
    df = table(3)
    q = Query("id", max_groups=3, max_rows=2).group_by("ward", keys=list("abcd")).count()
    from veil.dp.query import spark as backend
    from veil.random import Generator

    t = backend.table_totals(spark.createDataFrame(df), "id", ("ward",), q.keys,
                             q.measurements(), max_groups=3, max_rows=2, rng=Generator(2))
    expect = df.groupby(["id", "ward"]).size().clip(upper=2).groupby("ward").sum()
    got = dict(zip(t.keys["ward"], t.dense[0][:, 0]))
    assert got == {**expect.to_dict(), "d": 0}
    assert t.diagnostics["rows_over_max_rows"] == len(df) - expect.sum()


def test_spark_bad_input_charges_nothing(spark):
    ledger = Ledger(1.0, 1e-6)
    df = table()
    q = Query("id", max_groups=2, max_rows=2).group_by("ward").count()
    with pytest.raises(DataError, match="'person'"):
        Query("person").group_by("ward").count().run(spark.createDataFrame(df), epsilon=0.5,
                                                    delta=1e-7, ledger=ledger)
    nan_keys = spark.createDataFrame(df.assign(ward=df.ward.where(df.index % 7 != 0, None)))
    with pytest.raises(DataError, match="missing values"):
        q.run(nan_keys, epsilon=0.5, delta=1e-7, ledger=ledger)
    assert ledger.history() == ()


def test_spark_and_pandas_build_candidates_from_the_kept_rows_only(spark):
    # issue 28 item 1: both backends make a candidate of a key only if a row of it is kept
    # after bounding. Within the bounds the candidates are every key; a unit alone in 30
    # keys with max_groups=2 adds exactly 2 of them (at random) on both backends.
    from veil.dp.query import local
    from veil.dp.query import spark as backend
    from veil.random import Generator

    lone = pd.DataFrame({"id": 10_000, "ward": [f"lone{i}" for i in range(30)], "age": 1.0})
    q = Query("id", max_groups=2, max_rows=2).group_by("ward").count()
    for df, max_groups in ((table(4), 6), (pd.concat([table(4), lone]), 2)):
        keys = []
        for run in (local.table_totals, backend.table_totals):
            data = df if run is local.table_totals else spark.createDataFrame(df)
            t = run(data, "id", ("ward",), None, q.measurements(), max_groups=max_groups,
                    max_rows=2, rng=Generator(5))
            assert np.all(t.dense[0][:, 0] > 0)
            keys.append(set(t.keys["ward"]))
        common = set(df.ward) - set(lone.ward)
        assert keys[0] - set(lone.ward) == keys[1] - set(lone.ward) == common
        assert len(keys[0]) == len(keys[1]) == len(common) + (max_groups == 2) * 2
