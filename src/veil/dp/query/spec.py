"""What a query asks for: aggregates, and the per-row measurements they are computed from.

An :class:`Aggregate` is what the user asks for (``count``, ``sum(x, lo, hi)``,
``mean(x, lo, hi)``, ``variance(x, lo, hi)``, ``quantile(x, q, lo, hi)``,
``histogram(x, edges or categories)``). Each is post-processing of a few
:class:`Measurement` s, the exact per-group integer totals that receive noise:

=========  ================================  =========================================
aggregate  measurements                      value
=========  ================================  =========================================
count      count                             ``max(0, round(n~))``
sum        sum of x                          ``s~``
mean       count, sum of ``x - m``           ``m + t~ / max(n~, 1)``, clipped to bounds
variance   count, sums of ``x - m``, its sq  ``u~/n~ - (t~/n~)^2``, clipped
histogram  counts per bin                    ``max(0, round(c~))`` per bin
quantile   counts per grid cell (no noise)   exponential mechanism per group
=========  ================================  =========================================

(``m`` the midpoint of the declared bounds, ``~`` a noisy value.) Sums are exact: each
value is clipped into its declared bounds and rounded to the power-of-two grid of
:func:`veil.dp.sensitivity.sum_grid`, and the integers are added, so a privacy unit's
contribution to one group is bounded *exactly* by ``max_rows * q * max(|k_lo|, |k_hi|)``
(Casacuberta, Shoemate, Vadhan & Wagaman 2022). Measurements shared by several aggregates
(the count of a mean and of a count) are measured once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from veil._validation import (
    check_bounds,
    check_categories,
    check_choice,
    check_int,
    check_probability,
)
from veil.dp.sensitivity import sum_grid
from veil.errors import ConfigError, DataError

__all__ = ["Aggregate", "Measurement", "make_aggregate", "parse_aggregate", "measurements_of",
           "sum_measurement", "KINDS"]

KINDS = ("count", "sum", "mean", "variance", "quantile", "histogram")
#: default number of grid cells of a grouped quantile (the exponential mechanism's range)
QUANTILE_RESOLUTION = 1024


@dataclass(frozen=True)
class Aggregate:
    """One requested aggregate per group. Build with the :class:`~veil.dp.query.Query`
    methods or :func:`parse_aggregate`; the fields are validated there."""

    kind: str
    column: str | None = None
    bounds: tuple[float, float] | None = None
    q: float | None = None
    edges: tuple[float, ...] | None = None
    categories: tuple[Any, ...] | None = None
    resolution: int = QUANTILE_RESOLUTION

    @property
    def name(self) -> str:
        """The column name of this aggregate in the released table."""
        if self.kind == "count":
            return "count"
        if self.kind == "quantile":
            return f"quantile({self.column}, {self.q:g})"
        return f"{self.kind}({self.column})"

    def output_columns(self) -> list[str]:
        """The released columns: one, or one per histogram bin."""
        if self.kind != "histogram":
            return [self.name]
        if self.categories is not None:
            return [f"{self.name}[{c}]" for c in self.categories]
        e = self.edges
        return [f"{self.name}[{e[i]:g},{e[i + 1]:g}{']' if i == len(e) - 2 else ')'}"
                for i in range(len(e) - 1)]


def make_aggregate(kind: str, column: str | None = None, *, bounds: Any = None,
                   q: Any = None, edges: Sequence[float] | None = None,
                   categories: Sequence[Any] | None = None,
                   resolution: int = QUANTILE_RESOLUTION) -> Aggregate:
    """A validated :class:`Aggregate` (ConfigError naming the bad field)."""
    check_choice(kind, "aggregate", KINDS)
    if kind == "count":
        return Aggregate("count")
    if not isinstance(column, str) or not column:
        raise ConfigError(f"column={column!r} is not allowed for {kind}: name a column")
    if kind == "histogram":
        if (edges is None) == (categories is None):
            raise ConfigError(f"histogram({column}) needs exactly one of edges (numeric bins) "
                              "or categories (declared categories)")
        if categories is not None:
            return Aggregate(kind, column, categories=check_categories(categories))
        e = np.asarray(edges, dtype=np.float64) if _numeric_list(edges) else np.array([])
        if e.size < 2 or not np.all(np.isfinite(e)) or not np.all(np.diff(e) > 0):
            raise ConfigError(f"edges={edges!r} is not allowed: need at least 2 finite, "
                              "strictly increasing numbers")
        return Aggregate(kind, column, edges=tuple(float(x) for x in e))
    bounds = check_bounds(bounds, f"{kind}({column}) bounds")
    if kind == "quantile":
        q = check_probability(q, f"quantile({column}) q")
        resolution = check_int(resolution, "resolution", low=1, high=2 ** 20)
        return Aggregate(kind, column, bounds, q=q, resolution=resolution)
    return Aggregate(kind, column, bounds)


def _numeric_list(values: Any) -> bool:
    try:
        [float(v) for v in values]
    except (TypeError, ValueError):
        return False
    return True


_CALL = re.compile(r"^\s*([A-Za-z_]+)\s*(?:\((.*)\))?\s*$", re.S)


def parse_aggregate(text: str) -> Aggregate:
    """An aggregate from its text form (the CLI's ``--agg``)::

        count | count()
        sum(COL, LO, HI) | mean(COL, LO, HI) | variance(COL, LO, HI)
        quantile(COL, Q, LO, HI) | median(COL, LO, HI)
        histogram(COL, E0, E1, ..., Ek)        numeric edges
        histogram(COL, A, B, C)                declared categories (any non-number)
    """
    match = _CALL.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f"--agg={text!r} is not allowed: expected e.g. 'count', "
                          "'mean(age, 0, 100)' or 'quantile(age, 0.5, 0, 100)'")
    kind = match.group(1).lower()
    args = [a.strip() for a in (match.group(2) or "").split(",") if a.strip()]
    if kind == "median":
        kind, args = "quantile", args[:1] + ["0.5"] + args[1:]
    check_choice(kind, "aggregate", (*KINDS, "median"))
    usage = {"count": 0, "sum": 3, "mean": 3, "variance": 3, "quantile": 4}
    if kind in usage and len(args) != usage[kind]:
        form = {"count": "count", "quantile": "quantile(COL, Q, LO, HI)"}.get(
            kind, f"{kind}(COL, LO, HI)")
        raise ConfigError(f"--agg={text!r} is not allowed: write {form}")
    if kind == "count":
        return make_aggregate("count")
    if kind == "histogram":
        if len(args) < 2:
            raise ConfigError(f"--agg={text!r} is not allowed: write histogram(COL, E0, E1, "
                              "...) with edges or histogram(COL, A, B, ...) with categories")
        rest = args[1:]
        if _numeric_list(rest):
            return make_aggregate(kind, args[0], edges=[float(x) for x in rest])
        return make_aggregate(kind, args[0], categories=rest)
    numbers = args[1:]
    if not _numeric_list(numbers):
        raise ConfigError(f"--agg={text!r} is not allowed: {', '.join(numbers)} must be numbers")
    values = [float(x) for x in numbers]
    if kind == "quantile":
        return make_aggregate(kind, args[0], q=values[0], bounds=tuple(values[1:]))
    return make_aggregate(kind, args[0], bounds=tuple(values))


@dataclass(frozen=True)
class Measurement:
    """An exact per-group total of a per-row integer (module docstring).

    ``kind``: "count" (1 per row), "sum" (grid integers of a transformed, clipped value:
    ``transform`` is "value", "centered" = ``x - m`` or "squared" = ``(x - m)^2``),
    "histogram" (a one-hot row over ``slots`` bins) or "cells" (a one-hot row over the
    ``slots`` grid cells of a quantile; never noised).
    """

    kind: str
    column: str | None = None
    transform: str = "value"
    bounds: tuple[float, float] | None = None  # of the transformed value
    edges: tuple[float, ...] | None = None
    categories: tuple[Any, ...] | None = None
    resolution: int = 0
    raw_bounds: tuple[float, float] | None = None  # of the column, before the transform

    @property
    def name(self) -> str:
        if self.kind == "count":
            return "count"
        if self.kind == "sum":
            inner = {"value": "{}", "centered": "{} - m", "squared": "({} - m)^2"}[
                self.transform].format(self.column)
            return f"sum({inner})"
        return f"{self.kind}({self.column})"

    @property
    def slots(self) -> int:
        """Entries per group: 1, the bins of a histogram, or the cells of a quantile."""
        if self.kind == "histogram":
            return len(self.categories) if self.categories is not None else len(self.edges) - 1
        if self.kind == "cells":
            return self.resolution + 1
        return 1

    @property
    def noised(self) -> bool:
        return self.kind != "cells"

    def grid(self) -> tuple[float, int, int]:
        """(q, k_lo, k_hi) of a sum: values are rounded to multiples of q in [k_lo q, k_hi q]."""
        return sum_grid(self.bounds)

    def unit_bound(self, max_rows: int) -> float:
        """The most one privacy unit moves this measurement in one group (L1 = L2 for a
        scalar; for a histogram both norms are at most ``max_rows``), exactly."""
        if self.kind == "sum":
            q, k_lo, k_hi = self.grid()
            return max_rows * q * max(abs(k_lo), abs(k_hi))  # exact: q is a power of two
        return float(max_rows)

    def row_values(self, column: np.ndarray) -> tuple[np.ndarray, int]:
        """Per-row integers (int64; -1 for a category outside the declared ones) and the
        number of values that were outside the bounds (clipped) or categories (left out)."""
        if self.kind == "histogram" and self.categories is not None:
            codes = pd.Index(self.categories).get_indexer(column)
            return codes.astype(np.int64), int(np.count_nonzero(codes < 0))
        x = _floats(column, self.column)
        if self.kind == "histogram":
            lo, hi = self.edges[0], self.edges[-1]
            outside = int(np.count_nonzero((x < lo) | (x > hi)))
            idx = np.searchsorted(np.asarray(self.edges), np.clip(x, lo, hi), side="right") - 1
            return np.minimum(idx, self.slots - 1).astype(np.int64), outside
        if self.kind == "cells":
            lo, hi = self.bounds
            outside = int(np.count_nonzero((x < lo) | (x > hi)))
            step = (hi - lo) / self.resolution
            cells = np.floor((np.clip(x, lo, hi) - lo) / step)
            return np.clip(cells, 0, self.resolution).astype(np.int64), outside
        lo, hi = self.raw_bounds
        outside = int(np.count_nonzero((x < lo) | (x > hi)))
        mid = (lo + hi) / 2.0
        y = np.clip(x, lo, hi)
        if self.transform != "value":
            y = np.clip(y - mid, *self.bounds) if self.transform == "centered" else \
                np.clip((y - mid) ** 2, *self.bounds)
        q, k_lo, k_hi = self.grid()
        return np.clip(np.rint(y / q), k_lo, k_hi).astype(np.int64), outside


def _floats(column: np.ndarray, name: str | None) -> np.ndarray:
    try:
        return np.asarray(column, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"column {name!r} is not numeric") from None


def sum_measurement(column: str, transform: str, bounds: tuple[float, float]) -> Measurement:
    """The sum of ``column`` (``transform``: value, centered or squared) over ``bounds``."""
    lo, hi = bounds
    half = (hi - lo) / 2.0
    t_bounds = {"value": (lo, hi), "centered": (-half, half),
                "squared": (0.0, half * half)}[transform]
    if t_bounds[0] == t_bounds[1]:
        raise ConfigError(f"bounds={bounds!r} of {column!r} are too narrow")
    return Measurement("sum", column, transform, t_bounds, raw_bounds=(lo, hi))


def measurements_of(aggregates: Sequence[Aggregate], *,
                    need_count: bool) -> list[Measurement]:
    """The distinct measurements behind ``aggregates`` (plus a count if ``need_count``:
    partition selection thresholds on it), in a stable order."""
    out: list[Measurement] = []

    def add(m: Measurement) -> None:
        if m not in out:
            out.append(m)

    if need_count:
        add(Measurement("count"))
    for a in aggregates:
        if a.kind == "count":
            add(Measurement("count"))
        elif a.kind == "sum":
            add(sum_measurement(a.column, "value", a.bounds))
        elif a.kind in ("mean", "variance"):
            add(Measurement("count"))
            add(sum_measurement(a.column, "centered", a.bounds))
            if a.kind == "variance":
                add(sum_measurement(a.column, "squared", a.bounds))
        elif a.kind == "histogram":
            add(Measurement("histogram", a.column, edges=a.edges, categories=a.categories))
        else:
            add(Measurement("cells", a.column, bounds=a.bounds, resolution=a.resolution))
    return out

