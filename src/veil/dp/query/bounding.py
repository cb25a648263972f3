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

Candidates: when the group keys are not declared public, the groups a backend reports (the
candidates of partition selection) are those with at least one row kept *after* bounding.
A unit then creates at most ``max_groups`` candidates of its own, the number the
selection threshold is calibrated for (:mod:`~veil.dp.query.plan`); a group of the table
whose rows were all dropped is no candidate (issue 28: candidates from all rows let a
unit alone in many groups bring one candidate per group).

Implementation (no Python loop over units or groups): one ``np.sort`` of 64-bit words
``unit | group | row`` groups the rows by (unit, group) and carries each row's index
(``argsort`` of ``unit | group`` when the three do not fit 64 bits; a stable sort, which
runs in about one pass, when the table is already ordered by unit). Each over-full
(unit, group) run, and the run of groups of each unit with more than ``max_groups``, then
gets a uniformly random subset of its elements moved to its front by a partial
Fisher-Yates shuffle (Knuth, TAOCP vol. 2, Algorithm 3.4.2 P, stopped after k steps), one
vectorised step across all runs at a time: step j swaps element j of every run with a
uniform one of its elements j..m-1 (exact bounded integers by rejection, from ``rng``).
After k steps the first k elements of a run are a uniform k-subset of it, whatever its
order before. For a large bound (k > 64) a run is instead put in the order of distinct
random 64-bit keys (redrawn on a tie), a uniform permutation, with one sort. Totals are
``bincount`` s of the kept rows' group codes, weighted by the measurements' exact integers
(a float64 sum of integers is exact below 2^53, which the 2^30-row cap and the
|k| <= 2^23 grid ensure).
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


_SHUFFLE_STEPS = 64  # bounds up to this use the partial Fisher-Yates shuffle, larger a sort


def _bits(x: int) -> int:
    return max(int(x).bit_length(), 1)


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + sizes[i] - 1`` of every run, concatenated."""
    ends = np.cumsum(sizes)
    return np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(starts - ends + sizes, sizes)


def _below(bound: np.ndarray, rng: Generator) -> np.ndarray:
    """One uniform integer in ``[0, bound[i])`` per element, exactly: a masked 64-bit word,
    redrawn while it is ``>= bound[i]`` (each try succeeds with probability > 1/2)."""
    bound = bound.astype(np.uint64)
    mask = np.left_shift(np.uint64(1), np.frexp((bound - 1).astype(np.float64))[1]
                         .astype(np.uint64)) - np.uint64(1)
    out = rng.random_raw(bound.size) & mask
    bad = np.flatnonzero(out >= bound)
    while bad.size:
        out[bad] = rng.random_raw(bad.size) & mask[bad]
        bad = bad[out[bad] >= bound[bad]]
    return out.astype(np.int64)


def _sample_front(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray, k: int,
                  rng: Generator) -> None:
    """Move a uniformly random k-subset of each run ``values[s:s+m]`` (all ``m > k``) to
    the run's front, in place (module docstring)."""
    if not starts.size:
        return
    if k <= _SHUFFLE_STEPS:
        for j in range(k):
            a = starts + j
            b = a + _below(sizes - j, rng)
            values[a], values[b] = values[b], values[a]
        return
    positions = _ranges(starts, sizes)
    run = np.repeat(np.arange(starts.size), sizes)
    while True:
        keys = rng.random_raw(positions.size)
        order = np.lexsort((keys, run))
        ranked = keys[order]  # run[order] == run: the runs are in order
        if not np.any((ranked[1:] == ranked[:-1]) & (run[1:] == run[:-1])):
            values[positions] = values[positions[order]]
            return


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and sizes of the runs of equal values of a sorted array."""
    new = np.empty(sorted_keys.size, dtype=bool)
    new[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    sizes = np.empty_like(starts)
    np.subtract(starts[1:], starts[:-1], out=sizes[:-1])
    sizes[-1] = sorted_keys.size - starts[-1]
    return starts, sizes


def _ordered(units: np.ndarray) -> bool:
    """Whether the rows come (nearly) ordered by unit: fewer than one descent in 32 rows.
    Timsort (numpy's stable sort of 64-bit words) then merges the already sorted runs in
    about one pass, several times faster than the default introsort."""
    return int(np.count_nonzero(units[1:] < units[:-1])) * 32 < units.size


def _by_pair(units: np.ndarray, groups: np.ndarray,
             n_groups: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The row indices ordered by (unit, group), the pair key ``unit << b | group`` of each
    in that order, and b."""
    n = units.size
    group_bits = _bits(n_groups - 1)
    if _bits(units.max()) + group_bits > 63:  # sparse unit codes: make them 0..units-1
        units = np.unique(units, return_inverse=True)[1].astype(np.int64)
    pair = units.view(np.uint64) << np.uint64(group_bits)
    pair |= groups.view(np.uint64)
    row_bits = _bits(n - 1)
    if _bits(int(pair.max())) + row_bits <= 64:
        pair <<= np.uint64(row_bits)
        pair |= np.arange(n, dtype=np.uint64)
        pair.sort(kind="stable" if _ordered(units) else None)
        rows = (pair & np.uint64((1 << row_bits) - 1)).view(np.int64)
        return rows, pair >> np.uint64(row_bits), group_bits
    rows = np.argsort(pair, kind="stable")
    return rows, pair[rows], group_bits


def bound_rows(units: np.ndarray, groups: np.ndarray, n_groups: int, max_groups: int,
               max_rows: int, rng: Generator) -> tuple[np.ndarray, dict[str, int]]:
    """The indices (ascending) of the rows kept by contribution bounding (module
    docstring), and diagnostics. ``units``/``groups`` are non-negative int64 codes."""
    n = units.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), {"rows_over_max_rows": 0,
                                              "rows_over_max_groups": 0, "units_clipped": 0}
    rows, pair, group_bits = _by_pair(np.asarray(units, dtype=np.int64),
                                      np.asarray(groups, dtype=np.int64), n_groups)
    starts, sizes = _runs(pair)  # one run per (unit, group)
    full = np.flatnonzero(sizes > max_rows)
    _sample_front(rows, starts[full], sizes[full], max_rows, rng)
    unit_starts, unit_sizes = _runs(pair[starts] >> np.uint64(group_bits))
    crowded = np.flatnonzero(unit_sizes > max_groups)
    pair_ids = np.arange(starts.size)
    _sample_front(pair_ids, unit_starts[crowded], unit_sizes[crowded], max_groups, rng)
    dropped = pair_ids[_ranges(unit_starts[crowded] + max_groups,
                               unit_sizes[crowded] - max_groups)]
    # dropped positions: [start + max_rows, end) of full runs, [start, end) of dropped
    # pairs, marked +1/-1 at the ends of each range and summed (no per-row index arrays)
    marks = np.zeros(n + 1, dtype=np.int8)
    for first, last in ((starts[full] + max_rows, starts[full] + sizes[full]),
                        (starts[dropped], starts[dropped] + sizes[dropped])):
        marks[first] += 1
        marks[last] -= 1
    keep = np.cumsum(marks[:-1], dtype=np.int8) == 0

    clipped = np.zeros(unit_starts.size, dtype=bool)
    clipped[crowded] = True
    clipped[np.searchsorted(unit_starts, full, side="right") - 1] = True
    kept = np.zeros(n, dtype=bool)
    kept[rows[keep]] = True
    return np.flatnonzero(kept), {
        "rows_over_max_rows": int(np.sum(sizes[full] - max_rows)),
        "rows_over_max_groups": int(np.sum(np.minimum(sizes[dropped], max_rows))),
        "units_clipped": int(np.count_nonzero(clipped))}


def totals(units: np.ndarray, groups: np.ndarray, keys: pd.DataFrame,
           columns: dict[str, np.ndarray], measurements: Sequence[Measurement], *,
           public_keys: bool, max_groups: int, max_rows: int, rng: Generator) -> Totals:
    """Bound contributions, then total every measurement per group, exactly.

    ``groups`` holds codes of the rows of ``keys`` (-1 for rows outside the declared keys:
    dropped first); ``columns`` the value columns the measurements read. Every key is a
    group of the result when ``public_keys``; otherwise only the keys with a kept row (the
    candidates, module docstring).
    """
    if units.size > _MAX_ROWS:
        raise DataError(f"{units.size} rows are too many for one partition of exact sums "
                        f"(at most 2^30); split the data (e.g. the Spark backend)")
    outside_keys = int(np.count_nonzero(groups < 0))
    if outside_keys:
        inside = np.flatnonzero(groups >= 0)
        units, groups = units[inside], groups[inside]
        columns = {k: v[inside] for k, v in columns.items()}
    rows, diagnostics = bound_rows(units, groups, len(keys), max_groups, max_rows, rng)
    diagnostics["rows_outside_keys"] = outside_keys
    g = groups[rows]
    n_groups = len(keys)
    if not public_keys:
        present = np.zeros(n_groups, dtype=bool)
        present[g] = True
        g = (np.cumsum(present) - 1)[g]
        keys = keys.iloc[np.flatnonzero(present)].reset_index(drop=True)
        n_groups = len(keys)
    out = Totals(n_groups, keys=keys, diagnostics=diagnostics)
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
