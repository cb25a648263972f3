"""DP group-by queries per privacy unit: veil.dp.query against OpenDP + Polars and PipelineDP.

Workload of issue #23: 10 rows per user, 1,000 keys with Zipf-skewed popularity
(P(key k) proportional to 1/k), a value in [0, 100]; count and sum per key; each user
limited to 5 keys and 2 rows per key; epsilon 1, delta 1e-6; keys are private (DP partition
selection). Every library gets the same table and the same bounds, in the same process.

The query each side runs (checked by ``same_work`` before anything is timed):

* bounds per key: a user keeps at most 2 rows in each key and at most 5 keys (veil
  ``max_rows=2, max_groups=5``; OpenDP ``Bound(by=[key], per_group=2, num_groups=5)`` with
  ``truncate_per_group(2, by=[key])`` and ``truncate_num_groups(.., by=[key])``; PipelineDP
  ``max_contributions_per_partition=2, max_partitions_contributed=5``);
* outputs: count and sum of value clipped to [0, 100] per key, keys chosen by a threshold
  on the noisy count (veil, OpenDP) or PipelineDP's own partition selection;
* budget: epsilon 1, delta 1e-6 for the whole query, Laplace noise, the epsilon shared
  equally by the count and the sum (veil ``noise="laplace"``: its parts have equal
  weights, composed tightly by PLD; OpenDP splits evenly over its two expressions).
  "veil (default)" is veil's own choice (Gaussian here: 5 keys per user).

The one-machine table also runs beside a plain pandas group-by (count, sum per key, no
privacy) of the same table, in the same run, and again with its rows shuffled (a table
not ordered by user: veil's bounding then sorts in full).

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
import math
import os
import sys
import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from veil.dp.query import Query

EPSILON, DELTA = 1.0, 1e-6
MAX_GROUPS, MAX_ROWS, BOUNDS, KEYS = 5, 2, (0, 100), 1000
ADULT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "datasets", "adult",
                     "adult.csv")


def workload(rows: int, seed: int = 0) -> pd.DataFrame:
    r = np.random.default_rng(seed)  # simulation data only
    weights = 1.0 / np.arange(1, KEYS + 1)
    return pd.DataFrame({"user": np.repeat(np.arange(rows // 10), 10)[:rows],
                         "key": r.choice(KEYS, rows, p=weights / weights.sum()),
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


def run_plain(df: pd.DataFrame, key: str, value: str, *_: Any) -> tuple[float, pd.DataFrame]:
    """pandas group-by count and sum per key: no bounding, no noise, every key."""
    start = time.perf_counter()
    out = df.groupby(key)[value].agg(count="size", sum="sum")
    return time.perf_counter() - start, out


def run_polars_bounding(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
                        max_groups: int, max_rows: int, unit: str) -> tuple[float, pd.DataFrame]:
    """The bounding alone written in Polars (window functions over (user, key) and user),
    then its group-by; no noise, no selection: what a Polars backend would start from."""
    import polars as pl

    frame = pl.from_pandas(df[[unit, key, value]])
    start = time.perf_counter()
    out = (frame.lazy()
           .filter(pl.int_range(pl.len()).shuffle().over(unit, key) < max_rows)
           .filter(pl.col(key).hash(seed=int(time.time())).rank("dense").over(unit)
                   <= max_groups)
           .group_by(key).agg(pl.len().alias("count"),
                              pl.col(value).clip(*bounds).sum().alias("sum"))
           .collect())
    return time.perf_counter() - start, out.to_pandas().set_index(key)


def veil_query(key: str, value: str, bounds: tuple[float, float], max_groups: int,
               max_rows: int, unit: str) -> Query:
    return Query(unit, max_groups=max_groups, max_rows=max_rows).group_by(key).count() \
        .sum(value, bounds)


def run_veil(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
             max_groups: int, max_rows: int, unit: str,
             noise: str | None = None) -> tuple[float, pd.DataFrame]:
    q = veil_query(key, value, bounds, max_groups, max_rows, unit)
    start = time.perf_counter()
    res = q.run(df, epsilon=EPSILON, delta=DELTA, noise=noise)
    took = time.perf_counter() - start
    return took, res.table.rename(columns={f"sum({value})": "sum"})


def opendp_query(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
                 max_groups: int, max_rows: int, unit: str) -> tuple[Any, Any]:
    """OpenDP 0.16's formulation of the same query (module docstring), unreleased: the
    bounded table (a LazyFrameQuery) and the query."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    lf = pl.LazyFrame(pl.from_pandas(df[[unit, key, value]]))
    rows_are_units = bool(df[unit].is_unique)
    # one row per unit (Adult): OpenDP's row-level unit; else the identifier, bounded per key
    privacy_unit = dp.unit_of(contributions=1) if rows_are_units else dp.unit_of(
        contributions=[dp.polars.Bound(by=[key], per_group=max_rows, num_groups=max_groups)],
        identifier=unit)
    ctx = dp.Context.compositor(
        data=lf, privacy_unit=privacy_unit,
        privacy_loss=dp.loss_of(epsilon=EPSILON, delta=DELTA), split_evenly_over=1,
        # a float sum needs public upper bounds on a key's rows and on the number of keys
        # (the key domain has 1,000 values: declared, not read from the data)
        margins=[dp.polars.Margin(by=[key], max_length=len(df), max_groups=KEYS)])
    query = ctx.query()
    if not rows_are_units:
        # keep="sample" fails in OpenDP 0.16 with polars 1.36 (duplicate struct field);
        # keep="first" filters "dense rank < k" with ranks from 1, so k = max_groups + 1
        # keeps max_groups keys per user (checked in same_work); the accounting uses the
        # declared num_groups
        query = query.truncate_per_group(max_rows, by=[key]).truncate_num_groups(
            max_groups + 1, by=[key], keep="first")
    return query, query.group_by(key).agg(dp.len(), pl.col(value).fill_null(0).dp.sum(bounds))


def run_opendp(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
               max_groups: int, max_rows: int, unit: str) -> tuple[float, pd.DataFrame]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        start = time.perf_counter()
        query = opendp_query(df, key, value, bounds, max_groups, max_rows, unit)[1]
        out = query.release().collect().to_pandas()
    took = time.perf_counter() - start
    return took, out.rename(columns={"len": "count", value: "sum"}).set_index(key)


def same_work(df: pd.DataFrame, key: str, value: str, bounds: tuple[float, float],
              max_groups: int, max_rows: int, unit: str) -> None:
    """Assert that veil (noise="laplace") and OpenDP run the same query: the same bounds
    per key, kept as declared (OpenDP's truncation evaluated on this table), the same
    aggregates and the same share of epsilon for each (sum/count noise scale ratio = ratio
    of their per-key sensitivities on both sides)."""
    import polars as pl

    plan = veil_query(key, value, bounds, max_groups, max_rows, unit).plan(
        EPSILON, DELTA, noise="laplace")
    assert (plan.max_groups, plan.max_rows) == (max_groups, max_rows)
    assert [p.name for p in plan.parts] == ["count", f"sum({value})"]
    veil_count, veil_sum = plan.parts
    veil_ratio = (veil_sum.scale / veil_sum.unit_bound) / (veil_count.scale / veil_count.unit_bound)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        bounded, query = opendp_query(df, key, value, bounds, max_groups, max_rows, unit)
        summary = query.summarize()
        plan_text = object.__getattribute__(bounded, "polars_plan").explain()
    assert summary["aggregate"].to_list() == ["Frame Length", "Sum"]
    assert all("Laplace" in d for d in summary["distribution"].to_list())
    count_scale, sum_scale = summary["scale"].to_list()
    # OpenDP's per-key sum sensitivity: max_rows * max(|lo|, |hi|) against max_rows rows
    opendp_ratio = (sum_scale / max(abs(bounds[0]), abs(bounds[1]))) / count_scale
    assert abs(veil_ratio / opendp_ratio - 1) < 0.05, (veil_ratio, opendp_ratio)
    if not df[unit].is_unique:
        # OpenDP's truncation, as its plan shows it, evaluated on this table (the plan
        # itself holds no data until release)
        assert f"over([col(\"{unit}\"), col(\"{key}\")])) < ({max_rows})" in plan_text
        assert f"rank().over([col(\"{unit}\")])) < ({max_groups + 1})" in plan_text
        truncated = pl.from_pandas(df).filter(
            pl.int_range(pl.len()).shuffle().over(unit, key) < max_rows).filter(
            pl.struct(key).rank("dense").over(unit) < max_groups + 1)
        per_pair = truncated.group_by(unit, key).len()["len"]
        per_unit = truncated.group_by(unit).agg(pl.col(key).n_unique())[key]
        wanted = pl.from_pandas(df).group_by(unit).agg(pl.col(key).n_unique())[key]
        assert per_pair.max() == max_rows and per_unit.max() == max_groups
        assert int(per_unit.sum()) == int(wanted.clip(upper_bound=max_groups).sum())
    print(f"same work: bounds {max_rows} rows per key, {max_groups} keys per user; count and "
          f"sum({value}) in {list(bounds)}; epsilon {EPSILON:g}, delta {DELTA:g}; Laplace, "
          f"sum/count scale per unit of sensitivity: veil {veil_ratio:.3f}, "
          f"OpenDP {opendp_ratio:.3f}; count noise scale: veil {veil_count.scale:.1f}, "
          f"OpenDP {count_scale:.1f}; count threshold: veil {plan.threshold:.0f}, "
          f"OpenDP {summary['threshold'][0]}")


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


def compare(title: str, rows: int, runs: dict[str, Any], truth: pd.DataFrame,
            repeat: int = 1) -> None:
    """Run each entry ``repeat`` times (interleaved) and print its fastest run; times are
    also given as multiples of the first entry's. "cpu s": this process's CPU seconds over
    the call (all its threads; on a loaded machine the fairer measure; a Spark job's
    executors are other processes)."""
    print(f"\n== {title}: {rows:,} rows, epsilon {EPSILON:g}, delta {DELTA:g}")
    print(f"{'library':<28}{'seconds':>9}{'cpu s':>7}{'rows/s':>12}{'keys':>7}{'count MAE':>11}"
          f"{'count MRE':>11}{'sum MAE':>11}{'sum MRE':>10}")
    best: dict[str, tuple[float, float, pd.DataFrame]] = {}
    for _ in range(repeat):
        for name, run in runs.items():
            cpu = time.process_time()
            try:
                took, table = run()
            except ImportError as exc:
                best[name] = (math.nan, math.nan, str(exc))
                continue
            cpu = time.process_time() - cpu
            if name not in best or took < best[name][0]:
                best[name] = (took, cpu, table)
    first = None
    for name, (took, cpu, table) in best.items():
        if isinstance(table, str):
            print(f"{name:<28} skipped: {table}")
            continue
        u = utility(table, truth)
        first = first or (name, took)
        print(f"{name:<28}{took:9.2f}{cpu:7.2f}{rows / took:12,.0f}{u['keys']:7.0f}"
              f"{u['count_abs']:11.2f}{u['count_rel']:11.4f}{u['sum_abs']:11.1f}"
              f"{u['sum_rel']:10.4f}   x{took / first[1]:.2f} of {first[0]}'s time")


def main() -> None:
    logging.getLogger("veil").setLevel(logging.ERROR)  # bounding drops rows by design
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spark-rows", type=int, default=200_000)
    parser.add_argument("--pipeline-local-rows", type=int, default=200_000)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--no-adult", action="store_true")
    parser.add_argument("--no-peers", action="store_true",
                        help="veil beside the plain pandas group-by only (no OpenDP/PipelineDP)")
    parser.add_argument("--polars", action="store_true",
                        help="also the bounding alone written in Polars (no DP)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each one-machine entry (the fastest is shown)")
    args = parser.parse_args()
    bounds = BOUNDS
    df = workload(args.rows)
    truth = truth_of(df, "key", "value")
    common = ("key", "value", bounds, MAX_GROUPS, MAX_ROWS, "user")
    run_veil(df.head(10_000), *common)  # warm-up (imports, caches)
    run_plain(df.head(10_000), *common)
    local = {"veil (default)": lambda: run_veil(df, *common),
             "veil (laplace, as OpenDP)": lambda: run_veil(df, *common, noise="laplace"),
             "pandas group-by, no DP": lambda: run_plain(df, *common)}
    if args.polars:
        local["Polars bounding, no DP"] = lambda: run_polars_bounding(df, *common)
    if not args.no_peers:
        try:
            same_work(df.head(100_000), *common)
            local["OpenDP + Polars"] = lambda: run_opendp(df, *common)
        except ImportError as exc:
            print(f"OpenDP skipped: {exc}")
    compare("synthetic, one machine", args.rows, local, truth, args.repeat)
    shuffled = df.sample(frac=1.0, random_state=1)  # rows not ordered by user
    compare("synthetic, one machine, rows shuffled", args.rows, {
        "veil (default)": lambda: run_veil(shuffled, *common),
        "pandas group-by, no DP": lambda: run_plain(shuffled, *common)}, truth, args.repeat)
    if not args.no_peers:
        small = df.head(args.pipeline_local_rows)
        compare("synthetic, PipelineDP local backend", len(small), {
            "veil (default)": lambda: run_veil(small, *common),
            "PipelineDP local": lambda: run_pipeline(small, *common)},
            truth_of(small, "key", "value"))
    if not args.no_spark:
        from veil.dp.query.spark import session

        spark = session("local[2]", "bench_query", partitions=4)
        sdf = df.head(args.spark_rows)
        run_veil_spark(spark, sdf.head(10_000), *common)  # warm-up: Python workers
        runs = {"veil on Spark": lambda: run_veil_spark(spark, sdf, *common)}
        if not args.no_peers:
            runs["PipelineDP on Spark"] = lambda: run_pipeline(sdf, *common, spark=spark)
        compare("synthetic, Spark local[2]", len(sdf), runs, truth_of(sdf, "key", "value"))
        spark.stop()
    if not args.no_adult and not args.no_peers and os.path.exists(ADULT):
        adult = pd.read_csv(ADULT, sep=";").reset_index().rename(columns={"index": "person"})
        a_common = ("education", "age", (17, 90), 1, 1, "person")
        same_work(adult, *a_common)
        compare("Adult (education: count, sum of age)", len(adult), {
            "veil (default)": lambda: run_veil(adult, *a_common),
            "veil (laplace, as OpenDP)": lambda: run_veil(adult, *a_common, noise="laplace"),
            "OpenDP + Polars": lambda: run_opendp(adult, *a_common),
            "PipelineDP local": lambda: run_pipeline(adult, *a_common)},
            truth_of(adult, "education", "age"))
    print(f"\npython {sys.version.split()[0]}, {os.cpu_count()} cores (shared with other "
          f"jobs: timings vary with load); load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
