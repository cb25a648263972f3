"""DP synthetic data on UCI Adult: veil's AIM, MST and independent baseline beside
smartnoise-synth's AIM and MST, at the same epsilon in the same run.

Tables (all columns categorical, as AIM's paper and issue 33 measure them):

* ``adult9``: the 9 columns of ``../shared/datasets/adult/adult.csv`` (30,162 rows), age in
  10-year bins;
* ``adult15``: the 15 columns of UCI ``adult.data`` (complete rows, 30,162), the six numeric
  columns in declared bins (:data:`BINS`).

For each table, epsilon and method: the fit time (wall, and CPU of the process), the
workload error (mean L1 over all 3-way marginals of normalised counts, the synthetic table
of as many rows as the real one; :func:`veil.synth.evaluation.workload_error`, the same
function for every method), and ML efficacy (logistic regression for salary-class trained
on the synthetic table, tested on the complete rows of UCI ``adult.test``, beside the same
model trained on the real table). delta = 1e-9 (AIM's paper).

smartnoise-synth runs in a subprocess with ``--peer-path`` first on its path (it pins
pandas < 3 and opendp < 0.15, which veil's environment does not hold): install it with
``pip install --target DIR --no-deps smartnoise-synth mbi ...`` (RESULTS.md has the list).
Its output is read back and scored by the same code.

    python benchmarks/bench_synth.py --peer-path /tmp/snlib      # adult9, epsilon 0.5, 1, 4
    python benchmarks/bench_synth.py --table adult9 --epsilon 1 --peer-path DIR
    python benchmarks/bench_synth.py --table adult15             # veil alone (no peer path)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

TARGET = "salary-class"
UCI = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
       "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
       "hours-per-week", "native-country", TARGET]
NINE = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
        "occupation", TARGET]
#: declared bin edges of adult15's numeric columns (public: chosen from the UCI description)
BINS = {"age": [0, 20, 30, 40, 50, 60, 70, 100],
        "fnlwgt": [0, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000, 400_000, 2_000_000],
        "education-num": list(np.arange(0.5, 17.5, 1.0)),
        "capital-gain": [0, 1, 5_000, 10_000, 100_000],
        "capital-loss": [0, 1, 1_500, 2_000, 5_000],
        "hours-per-week": [0, 20, 35, 40, 41, 50, 60, 100]}


def _file(name: str) -> Path:
    from veil.datasets.files import locate
    found = locate(f"adult/{name}")
    if found is None:
        sys.exit(f"adult/{name} not found: set VEIL_DATA to the shared datasets folder")
    return found


def _uci(name: str) -> pd.DataFrame:
    df = pd.read_csv(_file(name), header=None, names=UCI, skipinitialspace=True,
                     comment="|", dtype=str)
    df = df[~(df == "?").any(axis=1)].dropna().reset_index(drop=True)
    df[TARGET] = df[TARGET].str.rstrip(".")
    return df


def _binned(column: pd.Series, edges: list[float]) -> pd.Series:
    idx = np.clip(np.searchsorted(edges, column.astype(float), side="right") - 1, 0,
                  len(edges) - 2)
    return pd.Series([f"[{edges[i]:g},{edges[i + 1]:g})" for i in idx], index=column.index)


def load(table: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table to synthesize, the held-out test rows), every column a string."""
    test = _uci("adult.test")
    if table == "adult9":
        real = pd.read_csv(_file("adult.csv"), sep=";", dtype=str)
        test = test[NINE].copy()
        for df in (real, test):
            df["age"] = (df["age"].astype(int) // 10 * 10).astype(str)
        return real, test.reset_index(drop=True)
    real = _uci("adult.data")
    for df in (real, test):
        for col, edges in BINS.items():
            df[col] = _binned(df[col], edges)
    return real, test


def schema_for(real: pd.DataFrame, test: pd.DataFrame):
    """Every column categorical; the categories are the UCI documentation's values (here
    read from the public train and test files, as the bins are declared)."""
    from veil.synth import Schema
    return Schema.from_dict({c: {"type": "categorical", "categories": sorted(
        set(real[c]) | set(test[c]))} for c in real.columns})


def score(schema, real, synthetic, test) -> dict:
    from veil.synth.evaluation import ml_efficacy, workload_error
    codes = [schema.encode(t) for t in (real, synthetic, test)]
    sets = list(itertools.combinations(range(len(schema.names)), 3))
    out = {"workload_error": workload_error(codes[0], codes[1], schema.sizes, sets)}
    ml = ml_efficacy({"synthetic": codes[1], "real": codes[0]}, codes[2], schema.sizes,
             schema.names.index(TARGET))
    out.update({k: ml.get(k) for k in ("synthetic_accuracy", "synthetic_auc", "real_auc")})
    return out


def veil_fit(method: str, real: pd.DataFrame, schema, epsilon: float) -> tuple[pd.DataFrame,
                                                                               float, float]:
    from veil.synth import METHODS
    cpu0, t0 = time.process_time(), time.perf_counter()
    synth = METHODS[method](schema, epsilon=epsilon, delta=1e-9).fit(real)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return synth.sample(len(real)), wall, cpu


def peer_worker(method: str, data: str, epsilon: float, out: str) -> None:
    """In the subprocess: smartnoise-synth's ``method`` on ``data``; writes the sample."""
    from snsynth import Synthesizer
    real = pd.read_csv(data, dtype=str)
    t0 = time.perf_counter()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    synth = Synthesizer.create(method, epsilon=epsilon, delta=1e-9)
    synth.fit(real, categorical_columns=list(real.columns), preprocessor_eps=0.0)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    synth.sample(len(real)).astype(str).to_csv(out, index=False)
    print(json.dumps({"wall": wall, "cpu": cpu}))


def peer_fit(method: str, real: pd.DataFrame, epsilon: float, path: str,
             timeout: float) -> tuple[pd.DataFrame | None, float, float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        data, out = os.path.join(tmp, "real.csv"), os.path.join(tmp, "syn.csv")
        real.to_csv(data, index=False)
        env = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            run = subprocess.run([sys.executable, __file__, "--peer-worker", method, data,
                                  str(epsilon), out], env=env, capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:   # killed and reaped: its CPU so far is counted
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            return None, timeout, cpu, f"over the {timeout:g} s limit ({cpu:.0f} CPU-s)"
        if run.returncode != 0:
            return None, float("nan"), float("nan"), run.stderr.strip().splitlines()[-1]
        times = json.loads(run.stdout.strip().splitlines()[-1])
        return pd.read_csv(out, dtype=str), times["wall"], times["cpu"], ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", nargs="+", default=["adult9"], choices=["adult9", "adult15"])
    parser.add_argument("--epsilon", nargs="+", type=float, default=[0.5, 1.0, 4.0])
    parser.add_argument("--methods", nargs="*", default=["aim", "mst", "independent"])
    parser.add_argument("--peer", nargs="*", default=["aim", "mst"])
    parser.add_argument("--peer-path", default=None, help="smartnoise-synth's install dir")
    parser.add_argument("--peer-timeout", type=float, default=1800.0)
    parser.add_argument("--peer-worker", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_worker:
        method, data, epsilon, out = args.peer_worker
        peer_worker(method, data, float(epsilon), out)
        return
    print(f"load (1, 5, 15 min): {os.getloadavg()}", flush=True)
    print("table    eps   tool        method        fit s   CPU s   workload L1   "
          "ML acc (AUC) synth / real AUC", flush=True)
    for table in args.table:
        real, test = load(table)
        schema = schema_for(real, test)
        for epsilon in args.epsilon:
            runs = [("veil", m) for m in args.methods]
            runs += [("smartnoise", m) for m in (args.peer if args.peer_path else [])]
            for tool, method in runs:
                if tool == "veil":
                    synthetic, wall, cpu = veil_fit(method, real, schema, epsilon)
                    why = ""
                else:
                    synthetic, wall, cpu, why = peer_fit(method, real, epsilon, args.peer_path,
                                                         args.peer_timeout)
                if synthetic is None:
                    print(f"{table:8} {epsilon:<5g} {tool:11} {method:12} failed: {why}",
                          flush=True)
                    continue
                s = score(schema, real, synthetic, test)
                print(f"{table:8} {epsilon:<5g} {tool:11} {method:12} {wall:7.1f} {cpu:7.1f}"
                      f"   {s['workload_error']:.3f}         {s['synthetic_accuracy']:.3f} "
                      f"({s['synthetic_auc']:.3f}) / {s['real_auc']:.3f}", flush=True)
    print(f"load (1, 5, 15 min): {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
