"""veil.dp.query on Spark over a parquet table the driver never loads, beside PipelineDP on Spark.

The table of ``bench_query.py`` (10 rows per user, 1,000 Zipf keys, value in [0, 100]) is
written to parquet in chunks of 1M rows (each chunk its own users), then queried through
Spark (``local[2]``): count and sum per key, 5 keys and 2 rows per key per user, epsilon 1,
delta 1e-6, keys chosen by DP partition selection. veil reads the parquet as a Spark
DataFrame (``Query.run`` on it: bounding and totals in the executors, only the per-key
totals reach the driver); PipelineDP 0.3.1 runs the same bounds on an RDD of the same
parquet rows (its Spark RDD backend), on the first ``--pipeline-rows`` rows (it is far
slower; its rate is per row, stated as measured). Peak memory: the Python driver's
``ru_maxrss`` and the Spark JVM's ``VmHWM`` (in local mode the JVM also runs the executors;
the Python workers are its children, not counted).

    python benchmarks/bench_spark_query.py --rows 10000000 --pipeline-rows 1000000
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, os.path.dirname(__file__))
from bench_query import (  # noqa: E402  (the benchmarks folder is not a package)
    BOUNDS,
    DELTA,
    EPSILON,
    MAX_GROUPS,
    MAX_ROWS,
    _pipeline_params,
    veil_query,
    workload,
)

CHUNK = 1_000_000


def write_table(folder: Path, rows: int) -> None:
    """``rows`` rows of the workload as parquet files of CHUNK rows, unless already there."""
    marker = folder / f"_rows_{rows}"
    if marker.exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    for i, start in enumerate(range(0, rows, CHUNK)):
        part = workload(min(CHUNK, rows - start), seed=i)
        part["user"] += start // 10  # each chunk its own users
        part.to_parquet(folder / f"part-{i:05d}.parquet", index=False)
    marker.touch()


def jvm_peak_mib(spark: Any) -> float:
    """The Spark JVM's peak resident memory (VmHWM), MiB; nan if it cannot be read."""
    try:
        pid = spark.sparkContext._gateway.proc.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (AttributeError, OSError, ValueError):
        pass
    return float("nan")


def run_veil(spark: Any, folder: Path) -> tuple[float, pd.DataFrame]:
    q = veil_query("key", "value", BOUNDS, MAX_GROUPS, MAX_ROWS, "user")
    start = time.perf_counter()
    res = q.run(spark.read.parquet(str(folder)), epsilon=EPSILON, delta=DELTA)
    return time.perf_counter() - start, res.table


def run_pipeline(spark: Any, folder: Path, rows: int) -> tuple[float, int]:
    import pipeline_dp

    start = time.perf_counter()
    data = spark.read.parquet(str(folder)).limit(rows).rdd.map(
        lambda r: (r["user"], r["key"], r["value"]))
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.SparkRDDBackend(spark.sparkContext))
    extractors = pipeline_dp.DataExtractors(partition_extractor=lambda r: r[1],
                                            privacy_id_extractor=lambda r: r[0],
                                            value_extractor=lambda r: r[2])
    result = engine.aggregate(data, _pipeline_params(MAX_GROUPS, MAX_ROWS, BOUNDS), extractors)
    accountant.compute_budgets()
    keys = len(result.collect())
    return time.perf_counter() - start, keys


def main() -> None:
    logging.getLogger("veil").setLevel(logging.ERROR)  # bounding drops rows by design
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--pipeline-rows", type=int, default=1_000_000)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/veil_bench_spark"))
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--no-pipeline", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    write_table(args.folder, args.rows)
    size = sum(f.stat().st_size for f in args.folder.glob("*.parquet"))
    print(f"table: {args.rows:,} rows, {size / 2 ** 20:.0f} MiB of parquet in {args.folder} "
          f"({time.perf_counter() - start:.0f} s to write or find)")
    from veil.dp.query.spark import session

    spark = session("local[2]", "bench_spark_query", partitions=args.partitions)
    spark.read.parquet(str(args.folder)).limit(10_000).count()  # warm-up: JVM, readers
    load = os.getloadavg()[0]
    took, table = run_veil(spark, args.folder)
    print(f"veil on Spark:       {took:8.1f} s  {args.rows / took:12,.0f} rows/s  "
          f"{len(table)} keys released; driver peak: Python "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
          f"JVM {jvm_peak_mib(spark):.0f} MiB")
    if not args.no_pipeline:
        rows = min(args.pipeline_rows, args.rows)
        took_p, keys = run_pipeline(spark, args.folder, rows)
        print(f"PipelineDP on Spark: {took_p:8.1f} s  {rows / took_p:12,.0f} rows/s  "
              f"{keys} keys released ({rows:,} rows); JVM peak so far "
              f"{jvm_peak_mib(spark):.0f} MiB")
        print(f"veil / PipelineDP rows per second: {(args.rows / took) / (rows / took_p):.1f}x")
    spark.stop()
    print(f"load average {load:.1f} before veil's run, {os.getloadavg()[0]:.1f} at the end; "
          f"{os.cpu_count()} cores shared with other jobs")


if __name__ == "__main__":
    main()
