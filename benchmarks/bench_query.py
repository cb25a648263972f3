"""DP group-by queries per privacy unit: veil.dp.query against OpenDP + Polars and PipelineDP.

Workload of issue #23: 10 rows per user, 1,000 keys with Zipf-skewed popularity
(P(key k) proportional to 1/k), a value in [0, 100]; count and sum per key; each user
limited to 5 keys and 2 rows per key; epsilon 1, delta 1e-6; keys are private (DP partition
selection). Every library gets the same table and the same bounds, in the same process.

* speed: rows per second end to end (calibration, bounding, totals, noise, selection);
* utility: keys released, and over the released keys the mean absolute and relative error
  of the count and the sum against the exact (unbounded) values;
* the same on Adult (each row a person: 1 group, 1 row per unit; count and sum of age in
  [17, 90] per education).

    python benchmarks/bench_query.py                      # 1M rows local, 200k on Spark
    python benchmarks/bench_query.py --rows 10000000 --spark-rows 1000000
    python benchmarks/bench_query.py --no-spark --no-adult

Peers are skipped with a note when not installed (``pip install opendp polars
pipeline-dp``; OpenDP 0.16 needs polars 1.36). Timings depend on the machine's load.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from veil.dp.query import Query

EPSILON, DELTA = 1.0, 1e-6
MAX_GROUPS, MAX_ROWS, BOUNDS = 5, 2, (0, 100)
ADULT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "datasets", "adult",
                     "adult.csv")


def workload(rows: int, seed: int = 0) -> pd.DataFrame:
    r = np.random.default_rng(seed)  # simulation data only
    weights = 1.0 / np.arange(1, 1001)
    return pd.DataFrame({"user": np.repeat(np.arange(rows // 10), 10)[:rows],
                         "key": r.choice(1000, rows, p=weights / weights.sum()),
                         "value": r.integers(0, 101, rows)})


def utility(released: pd.DataFrame, truth: pd.DataFrame) -> dict[str, float]:
    """Keys released; mean absolute / relative error of count and sum over them."""
    both = released.merge(truth, left_index=True, right_index=True, suffixes=("", "_true"))
    out: dict[str, float] = {"keys": float(len(released))}
    for col in ("count", "sum"):
        err = (both[col] - both[f"{col}_true"]).abs()
        out[f"{col}_abs"] = float(err.mean()) if len(both) else float("nan")
        out[f"{col}_rel"] = float((err / both[f"{col}_true"]).mean()) if len(both) \
            else float("nan")
    return out


def truth_of(df: pd.DataFrame, key: str, value: str) -> pd.DataFrame:
    return df.groupby(key)[value].agg(count="size", sum="sum")


def run_veil(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
             max_groups: int, max_rows: int, unit: str) -> tuple[float, pd.DataFrame]:
    q = Query(unit, max_groups=max_groups, max_rows=max_rows).group_by(key).count() \
        .sum(value, bounds)
    start = time.perf_counter()
    res = q.run(df, epsilon=EPSILON, delta=DELTA)
    took = time.perf_counter() - start
    return took, res.table.rename(columns={f"sum({value})": "sum"})


def run_opendp(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
               max_groups: int, max_rows: int, unit: str) -> tuple[float, pd.DataFrame]:
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    lf = pl.LazyFrame(pl.from_pandas(df[[unit, key, value]]))
    rows_are_units = df[unit].is_unique
    start = time.perf_counter()
    # one row per unit (Adult): OpenDP's row-level unit; else the identifier with bounds
    privacy_unit = dp.unit_of(contributions=1) if rows_are_units else dp.unit_of(
        contributions=[dp.polars.Bound(per_group=max_rows),
                       dp.polars.Bound(by=[key], num_groups=max_groups)], identifier=unit)
    ctx = dp.Context.compositor(
        data=lf, privacy_unit=privacy_unit,
        privacy_loss=dp.loss_of(epsilon=EPSILON, delta=DELTA), split_evenly_over=1,
        margins=[dp.polars.Margin(by=[key], max_length=len(df))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        query = ctx.query()
        if not rows_are_units:
            # keep="sample" fails in OpenDP 0.16 with polars 1.36 (duplicate struct field);
            # keep="first" ranks from 1 with "rank < k", so it keeps k - 1 groups per user
            query = query.truncate_per_group(max_rows).truncate_num_groups(
                max_groups, by=[key], keep="first")
        query = query.group_by(key).agg(dp.len(),
                                        pl.col(value).fill_null(0).dp.sum(bounds))
        out = query.release().collect().to_pandas()
    took = time.perf_counter() - start
    return took, out.rename(columns={"len": "count", value: "sum"}).set_index(key)


def _pipeline_params(max_groups: int, max_rows: int, bounds: tuple[float, float]) -> Any:
    import pipeline_dp

    return pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM],
        max_partitions_contributed=max_groups, max_contributions_per_partition=max_rows,
        min_value=bounds[0], max_value=bounds[1])


def run_pipeline(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
                 max_groups: int, max_rows: int, unit: str,
                 spark: Any = None) -> tuple[float, pd.DataFrame]:
    import pipeline_dp

    rows = list(zip(df[unit].tolist(), df[key].tolist(), df[value].tolist()))
    data = spark.sparkContext.parallelize(rows) if spark is not None else rows
    start = time.perf_counter()
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    backend = pipeline_dp.SparkRDDBackend(spark.sparkContext) if spark is not None \
        else pipeline_dp.LocalBackend()
    engine = pipeline_dp.DPEngine(accountant, backend)
    extractors = pipeline_dp.DataExtractors(partition_extractor=lambda r: r[1],
                                            privacy_id_extractor=lambda r: r[0],
                                            value_extractor=lambda r: r[2])
    result = engine.aggregate(data, _pipeline_params(max_groups, max_rows, bounds),
                              extractors)
    accountant.compute_budgets()
    out = result.collect() if spark is not None else list(result)
    took = time.perf_counter() - start
    table = pd.DataFrame([(k, m.count, m.sum) for k, m in out],
                         columns=[key, "count", "sum"]).set_index(key)
    return took, table


def run_veil_spark(spark: Any, df: pd.DataFrame, key: str, value: str,
                   bounds: tuple[float, float], max_groups: int, max_rows: int,
                   unit: str) -> tuple[float, pd.DataFrame]:
    sdf = spark.createDataFrame(df).cache()
    sdf.count()
    q = Query(unit, max_groups=max_groups, max_rows=max_rows).group_by(key).count() \
        .sum(value, bounds)
    start = time.perf_counter()
    res = q.run(sdf, epsilon=EPSILON, delta=DELTA)
    took = time.perf_counter() - start
    sdf.unpersist()
    return took, res.table.rename(columns={f"sum({value})": "sum"})


def compare(title: str, rows: int, runs: dict[str, Any], truth: pd.DataFrame) -> None:
    print(f"\n== {title}: {rows:,} rows, epsilon {EPSILON:g}, delta {DELTA:g}")
    print(f"{'library':<28}{'seconds':>9}{'rows/s':>12}{'keys':>7}{'count MAE':>11}"
          f"{'count MRE':>11}{'sum MAE':>11}{'sum MRE':>10}")
    base = None
    for name, run in runs.items():
        try:
            took, table = run()
        except ImportError as exc:
            print(f"{name:<28} skipped: {exc}")
            continue
        u = utility(table, truth)
        base = base or took
        print(f"{name:<28}{took:9.2f}{rows / took:12,.0f}{u['keys']:7.0f}"
              f"{u['count_abs']:11.2f}{u['count_rel']:11.4f}{u['sum_abs']:11.1f}"
              f"{u['sum_rel']:10.4f}   x{took / base:.2f} of veil's time")


def main() -> None:
    logging.getLogger("veil").setLevel(logging.ERROR)  # bounding drops rows by design
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spark-rows", type=int, default=200_000)
    parser.add_argument("--pipeline-local-rows", type=int, default=200_000)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-adult", action="store_true")
    args = parser.parse_args()
    bounds = BOUNDS
    df = workload(args.rows)
    truth = truth_of(df, "key", "value")
    common = ("key", "value", bounds, MAX_GROUPS, MAX_ROWS, "user")
    run_veil(df.head(10_000), *common)  # warm-up (imports, caches)
    compare("synthetic, one machine", args.rows, {
        "veil (pandas/numpy)": lambda: run_veil(df, *common),
        "OpenDP + Polars": lambda: run_opendp(df, *common)}, truth)
    small = df.head(args.pipeline_local_rows)
    compare("synthetic, PipelineDP local backend", len(small), {
        "veil (pandas/numpy)": lambda: run_veil(small, *common),
        "PipelineDP local": lambda: run_pipeline(small, *common)},
        truth_of(small, "key", "value"))
    if not args.no_spark:
        from veil.dp.query.spark import session

        spark = session("local[2]", "bench_query", partitions=4)
        sdf = df.head(args.spark_rows)
        run_veil_spark(spark, sdf.head(10_000), *common)  # warm-up: Python workers
        compare("synthetic, Spark local[2]", len(sdf), {
            "veil on Spark": lambda: run_veil_spark(spark, sdf, *common),
            "PipelineDP on Spark": lambda: run_pipeline(sdf, *common, spark=spark)},
            truth_of(sdf, "key", "value"))
        spark.stop()
    if not args.no_adult and os.path.exists(ADULT):
        adult = pd.read_csv(ADULT, sep=";").reset_index().rename(columns={"index": "person"})
        a_common = ("education", "age", (17, 90), 1, 1, "person")
        compare("Adult (education: count, sum of age)", len(adult), {
            "veil (pandas/numpy)": lambda: run_veil(adult, *a_common),
            "OpenDP + Polars": lambda: run_opendp(adult, *a_common),
            "PipelineDP local": lambda: run_pipeline(adult, *a_common)},
            truth_of(adult, "education", "age"))
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} cores (shared with other "
          "jobs: timings vary with load)")


if __name__ == "__main__":
    main()
