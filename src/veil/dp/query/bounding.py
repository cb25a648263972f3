"""Contribution bounding and exact per-group totals, on numpy arrays (every backend's core).

A privacy unit (a person, a patient: every row carrying the same ``privacy_unit`` value)
may own many rows. Neighbouring tables differ by *all* the rows of one unit. Before any
total is taken, each unit's rows are cut down, independently of every other unit:

1. in each group it keeps at most ``max_rows`` rows, chosen uniformly at random;
2. it keeps at most ``max_groups`` of its groups, chosen uniformly at random.

Each choice depends on the unit's own rows and on fresh randomness only, so adding or
removing a unit changes no other unit's kept rows, and the unit itself then moves at most
``max_groups`` groups, each measurement of a group by at most its per-group bound
(:meth:`~veil.dp.query.spec.Measurement.unit_bound`). Randomness comes from ``rng`` (the
CSPRNG :mod:`veil.random` by default). Dropped rows are counted in the diagnostics
(exact counts for the curator, never published, never raised as an error).

Implementation: one sort of a 64-bit key (unit, group, random bits) puts each unit's rows
group by group in random order; a row is kept when its rank inside its (unit, group) run
is below ``max_rows``. Units with more than ``max_groups`` runs keep the runs with the
smallest of fresh random priorities (a second, smaller sort). Totals are ``bincount`` s of
the kept rows' group codes, weighted by the measurements' exact integers (a float64 sum of
integers is exact below 2^53, which the 2^30-row cap and the |k| <= 2^23 grid ensure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from veil.dp.query.spec import Measurement
from veil.errors import DataError
from veil.random import Generator

__all__ = ["Totals", "bound_rows", "totals"]

_MAX_ROWS = 2 ** 30  # exact float64 sums of |k| <= 2^23 integers


@dataclass
class Totals:
    """Exact per-group totals (what leaves a backend for the noise step).

    ``dense[i]``: an int64 array (groups, slots) for noised measurement i; ``cells[i]``:
    the (group, cell, count) triples of quantile measurement i (nonzero counts only);
    ``diagnostics``: exact counts of dropped/clipped/missing rows (not private).
    """

    groups: int
    keys: pd.DataFrame | None = None  # the key values of groups 0, 1, ...
    dense: dict[int, np.ndarray] = field(default_factory=dict)
    cells: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    diagnostics: dict[str, int] = field(default_factory=dict)


def _rank_in_runs(new_run: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a boolean array marking run starts: the run id and the rank inside the run."""
    run = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    return run, np.arange(new_run.size) - starts[run]


def _sort_key(hi: np.ndarray, lo: np.ndarray, lo_size: int, rand: np.ndarray) -> np.ndarray:
    """An argsort by (hi, lo, random): one uint64 key when the codes leave >= 16 random
    bits, else a lexsort."""
    hi_bits = max(int(hi.max(initial=0)).bit_length(), 1)
    lo_bits = max(int(lo_size - 1).bit_length(), 1)
    free = 64 - hi_bits - lo_bits
    if free >= 16:
        key = hi.astype(np.uint64) << np.uint64(64 - hi_bits)
        key |= lo.astype(np.uint64) << np.uint64(free)
        key |= rand >> np.uint64(64 - free)
        return np.argsort(key)
    return np.lexsort((rand, lo, hi))


def bound_rows(units: np.ndarray, groups: np.ndarray, n_groups: int, max_groups: int,
               max_rows: int, rng: Generator) -> tuple[np.ndarray, dict[str, int]]:
    """The indices of the rows kept by contribution bounding (module docstring), and
    diagnostics. ``units``/``groups`` are non-negative int64 codes."""
    n = units.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), {"rows_over_max_rows": 0,
                                              "rows_over_max_groups": 0, "units_clipped": 0}
    order = _sort_key(units, groups, n_groups, rng.random_raw(n))
    u, g = units[order], groups[order]
    new_pair = np.empty(n, dtype=bool)
    new_pair[0] = True
    np.not_equal(u[1:], u[:-1], out=new_pair[1:])
    new_pair[1:] |= g[1:] != g[:-1]
    pair, rank = _rank_in_runs(new_pair)
    keep = rank < max_rows
    over_rows = n - int(np.count_nonzero(keep))

    pair_unit = u[new_pair]
    new_unit = np.empty(pair_unit.size, dtype=bool)
    new_unit[0] = True
    np.not_equal(pair_unit[1:], pair_unit[:-1], out=new_unit[1:])
    unit_of_pair, _ = _rank_in_runs(new_unit)
    pairs_per_unit = np.bincount(unit_of_pair)
    crowded = pairs_per_unit[unit_of_pair] > max_groups  # pairs of units over max_groups
    over_groups = 0
    if crowded.any():
        idx = np.flatnonzero(crowded)
        prio = rng.random_raw(idx.size)
        sub = _sort_key(unit_of_pair[idx], np.zeros(idx.size, dtype=np.int64), 1, prio)
        ranked = idx[sub]
        first = np.empty(ranked.size, dtype=bool)
        first[0] = True
        np.not_equal(unit_of_pair[ranked[1:]], unit_of_pair[ranked[:-1]], out=first[1:])
        _, prio_rank = _rank_in_runs(first)
        keep_pair = np.ones(pair_unit.size, dtype=bool)
        keep_pair[ranked[prio_rank >= max_groups]] = False
        row_pair_kept = keep_pair[pair]
        over_groups = int(np.count_nonzero(keep & ~row_pair_kept))
        keep &= row_pair_kept
    dropped = u[~keep]  # sorted: distinct units are where the value changes
    clipped_units = int(np.count_nonzero(np.diff(dropped))) + 1 if dropped.size else 0
    return order[keep], {"rows_over_max_rows": over_rows,
                         "rows_over_max_groups": over_groups,
                         "units_clipped": clipped_units}


def totals(units: np.ndarray, groups: np.ndarray, n_groups: int,
           columns: dict[str, np.ndarray], measurements: Sequence[Measurement], *,
           max_groups: int, max_rows: int, rng: Generator) -> Totals:
    """Bound contributions, then total every measurement per group, exactly.

    ``groups`` holds -1 for rows outside the declared keys (dropped first);
    ``columns`` the value columns the measurements read.
    """
    if units.size > _MAX_ROWS:
        raise DataError(f"{units.size} rows are too many for one partition of exact sums "
                        f"(at most 2^30); split the data (e.g. the Spark backend)")
    outside_keys = int(np.count_nonzero(groups < 0))
    if outside_keys:
        inside = np.flatnonzero(groups >= 0)
        units, groups = units[inside], groups[inside]
        columns = {k: v[inside] for k, v in columns.items()}
    rows, diagnostics = bound_rows(units, groups, n_groups, max_groups, max_rows, rng)
    diagnostics["rows_outside_keys"] = outside_keys
    g = groups[rows]
    out = Totals(n_groups, diagnostics=diagnostics)
    for i, m in enumerate(measurements):
        if m.kind == "count":
            out.dense[i] = np.bincount(g, minlength=n_groups).astype(np.int64)[:, None]
            continue
        values, outside = m.row_values(columns[m.column][rows])
        diagnostics[f"outside:{m.name}"] = outside
        if m.kind == "sum":
            s = np.bincount(g, weights=values.astype(np.float64), minlength=n_groups)
            out.dense[i] = np.rint(s).astype(np.int64)[:, None]
        elif m.kind == "histogram":
            ok = values >= 0  # a category outside the declared ones counts nowhere
            flat = np.bincount(g[ok] * m.slots + values[ok], minlength=n_groups * m.slots)
            out.dense[i] = flat.astype(np.int64).reshape(n_groups, m.slots)
        else:
            code, count = np.unique(g * m.slots + values, return_counts=True)
            out.cells[i] = (code // m.slots, code % m.slots, count.astype(np.int64))
    return out
