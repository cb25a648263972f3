"""Anonymization on UCI Adult (ARX's 30,162 records): veil against ARX and anonypy.

1. Optimal full-domain generalization, ARX's benchmark task: quasi-identifiers sex, age,
   race, marital-status, education, native-country, workclass, salary-class; 5-anonymity;
   0% suppression; non-uniform entropy. ARX's optimum (levels [1,1,1,1,3,2,2,1], NUE
   324620.5269918692) is found by its Flash algorithm in 27.4 ms (Java); Java cannot run
   in this process, so that figure is quoted as the reference, and veil's result is checked
   against ARX's optimum exactly.
2. Mondrian (relaxed) against anonypy's Mondrian on the first ``--rows`` records, same
   quasi-identifiers (age numeric, the others categorical), k-anonymity and k + distinct
   l-diversity: time, and the loss (NCP) of both released tables measured by the same
   function.

Every released table is verified with pycanon (k, and l where the task asks for it).

    python benchmarks/bench_anon.py                 # Mondrian on 5,000 rows (about a minute)
    python benchmarks/bench_anon.py --rows 30162    # the full table (anonypy needs minutes)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd
from anonypy import mondrian as anonypy_mondrian
from pycanon import anonymity as pycanon

from veil.anon import Hierarchy, KAnonymity, LDiversity, anonymize
from veil.anon.encoding import EncodedTable, SensitiveDomain
from veil.anon.lattice import LatticeSearch
from veil.anon.metrics import OBJECTIVES, generalization_loss
from veil.datasets import load_adult, load_adult_hierarchies

QIS = ["sex", "age", "race", "marital-status", "education", "native-country", "workclass",
       "salary-class"]
SENSITIVE = "occupation"
ARX_FLASH_MS = 27.4
ARX_LEVELS = [1, 1, 1, 1, 3, 2, 2, 1]
ARX_NUE = 324620.5269918692


def timed(fn, repeat: int):
    """Median wall and CPU time (ms) of ``repeat`` runs, and the last result.

    CPU time (this process) is given because the machine is shared: under load the wall
    time also counts the time other jobs hold the cores.
    """
    wall, cpu, result = [], [], None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return (statistics.median(wall), statistics.median(cpu)), result


def verify(table: pd.DataFrame, k: int, l: int | None = None) -> str:
    """pycanon's k (and l) of a released table, asserted against the target."""
    got_k = pycanon.k_anonymity(table, QIS)
    assert got_k >= k, f"pycanon k={got_k} < {k}"
    if l is None:
        return f"k={got_k}"
    got_l = pycanon.l_diversity(table, QIS, [SENSITIVE])
    assert got_l >= l, f"pycanon l={got_l} < {l}"
    return f"k={got_k}, l={got_l}"


def optimal(df: pd.DataFrame, hierarchies: dict[str, Hierarchy], repeat: int) -> list[tuple]:
    domain = SensitiveDomain(SENSITIVE, df[SENSITIVE])
    encode_ms, enc = timed(lambda: EncodedTable(df, hierarchies, domain, histograms=False),
                           repeat)
    search_ms, found = timed(lambda: LatticeSearch(enc, [KAnonymity(5)], 0,
                                                   OBJECTIVES["entropy"](enc)).run(), repeat)
    assert found.evaluation.levels.tolist() == ARX_LEVELS
    assert found.loss == ARX_NUE
    ms, result = timed(lambda: anonymize(df, hierarchies, SENSITIVE, [KAnonymity(5)]), repeat)
    assert list(result.levels.values()) == ARX_LEVELS, result.levels
    assert result.metrics["entropy"] == ARX_NUE, result.metrics["entropy"]
    arx = (ARX_FLASH_MS, None)
    rows = [
        ("optimal k=5, NUE: lattice search", search_ms, arx,
         f"{found.checked}/{found.nodes} nodes checked; levels and NUE = ARX's optimum"),
        ("optimal k=5, NUE: encode table", encode_ms, None, "once per table"),
        ("optimal k=5, NUE: anonymize()", ms, arx,
         "validation, encoding, search, released table, all metrics; pycanon "
         + verify(result.table, 5)),
    ]
    models = [KAnonymity(5), LDiversity(3)]
    ms, result = timed(lambda: anonymize(df, hierarchies, SENSITIVE, models), repeat)
    rows.append(("optimal k=5 + l=3, NUE: anonymize()", ms, None,
                 f"levels {list(result.levels.values())}; pycanon "
                 + verify(result.table, 5, 3)))
    return rows


def _anonypy_table(df: pd.DataFrame, partitions) -> pd.DataFrame:
    """anonypy's partitions released like veil's: numeric [min, max], categories {a,b}."""
    released = df.copy()
    for column in QIS:
        labels = np.empty(len(df), dtype=object)
        for part in partitions:
            values = df.loc[part, column]
            if column == "age":
                lo, hi = int(values.min()), int(values.max())
                label = str(lo) if lo == hi else f"[{lo}, {hi}]"
            else:
                cats = sorted(set(values.astype(str)))
                label = cats[0] if len(cats) == 1 else "{" + ",".join(cats) + "}"
            labels[df.index.get_indexer(part)] = label
        released[column] = labels
    return released


def mondrian(df: pd.DataFrame, hierarchies: dict[str, Hierarchy], rows: int, k: int,
             l: int | None) -> tuple:
    data = df.iloc[:rows].reset_index(drop=True)
    models = [KAnonymity(k)] + ([LDiversity(l)] if l else [])
    ours_ms, ours = timed(lambda: anonymize(data, hierarchies, SENSITIVE, models,
                                            algorithm="mondrian"), 1)
    peer = data.copy()
    peer["age"] = peer["age"].astype(int)
    for column in QIS[:1] + QIS[2:]:
        peer[column] = peer[column].astype("category")
    peer_ms, partitions = timed(
        lambda: anonypy_mondrian.Mondrian(peer, QIS, SENSITIVE).partition(k, l or 0), 1)
    peer_table = _anonypy_table(data, partitions)
    ours_ncp = generalization_loss(data, ours.table, QIS)
    peer_ncp = generalization_loss(data, peer_table, QIS)
    name = f"Mondrian k={k}{f', l={l}' if l else ''}, {rows} rows"
    note = (f"NCP veil {ours_ncp:.4f} vs anonypy {peer_ncp:.4f}; pycanon: veil "
            f"{verify(ours.table, k, l)}, anonypy {verify(peer_table, k, l)}")
    return name, ours_ms, peer_ms, note, ours_ncp <= peer_ncp


def _num(value: float | None, width: int) -> str:
    return f"{value:{width}.1f}" if value is not None else f"{'-':>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5000, help="rows for the Mondrian race")
    parser.add_argument("--repeat", type=int, default=7, help="runs of the optimal search")
    args = parser.parse_args()
    df = load_adult("arx")
    frames = load_adult_hierarchies()
    hierarchies = {c: Hierarchy(frames[c], name=c) for c in QIS}
    anonymize(df, hierarchies, SENSITIVE, [KAnonymity(5)])          # warm-up (imports)
    table = optimal(df, hierarchies, args.repeat)
    for l in (None, 3):
        name, ours, peer, note, better = mondrian(df, hierarchies, args.rows, 5, l)
        table.append((name, ours, peer, note + ("" if better else "  (NCP worse!)")))
    print(f"{'task':36} {'veil wall':>9} {'cpu':>7} {'peer wall':>10} {'cpu':>8} "
          f"{'peer/veil':>9}  notes (ms)")
    for name, ours, peer, note in table:
        peer = peer or (None, None)
        base = ours[1] if ours[1] is not None and peer[1] is not None else ours[0]
        ratio = f"{(peer[1] or peer[0]) / base:9.1f}" if peer[0] else f"{'-':>9}"
        print(f"{name:36} {ours[0]:9.1f} {_num(ours[1], 7)} {_num(peer[0], 10)} "
              f"{_num(peer[1], 8)} {ratio}  {note}")
    print("peer: ARX Flash (Java, quoted: cannot run in-process) for the optimal search; "
          "anonypy 0.2.1 for Mondrian. peer/veil compares CPU times where both exist.")


if __name__ == "__main__":
    main()
