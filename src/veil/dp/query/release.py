"""The release step, on the driver: noise, partition selection and the released table.

:class:`QueryMechanism` is the whole query as one :class:`~veil.dp.mechanism.Mechanism`:
its ``event`` is the plan's composed event, :meth:`~QueryMechanism.check` refuses bad
totals (missing values) before anything is charged, and ``_randomize`` (called by the
:class:`~veil.dp.Ledger` after the charge) draws every noise value with the exact samplers
of :mod:`veil.dp.samplers`, keeps the groups whose noisy count reaches the threshold, runs
the quantiles' exponential mechanisms, and post-processes the noisy measurements into the
aggregates (see :mod:`~veil.dp.query.spec`). Only released groups get further noise: the
others are never output, so drawing it would change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from veil.dp._numeric import check_grid_value
from veil.dp.mechanism import Mechanism
from veil.dp.query.bounding import Totals
from veil.dp.query.plan import Part, Plan
from veil.dp.query.spec import Aggregate, Measurement, sum_measurement
from veil.dp.samplers import gaussian_grid, laplace_grid
from veil.dp.stats import quantile_candidates, quantile_point
from veil.errors import DataError
from veil.random import Generator

__all__ = ["QueryMechanism"]


def _scaled(m: Measurement, dense: np.ndarray) -> np.ndarray:
    """A measurement's exact totals in value units (exact: q is a power of two)."""
    x = dense.astype(np.float64)
    return x * m.grid()[0] if m.kind == "sum" else x


def _noisy(x: np.ndarray, part: Part, rng: Generator) -> np.ndarray:
    """``x`` plus the part's noise, released on its grid (as veil's Laplace and Gaussian
    mechanisms release)."""
    grid = part.grid
    sampler = laplace_grid if part.noise == "laplace" else gaussian_grid
    flat = sampler(np.ascontiguousarray(x, dtype=np.float64).ravel(), part.scale / grid,
                   grid, rng)
    return (flat * grid).reshape(x.shape)


class QueryMechanism(Mechanism):
    """A planned query over exact per-group totals (module docstring)."""

    def __init__(self, plan: Plan, measurements: Sequence[Measurement],
                 aggregates: Sequence[Aggregate]) -> None:
        self.plan = plan
        self.epsilon = plan.epsilon
        self.delta = plan.delta
        self.measurements = list(measurements)
        self.aggregates = list(aggregates)

    @property
    def event(self) -> Any:
        return self.plan.event

    def check(self, value: Any) -> Totals:
        """Totals without missing values, each total releasable on its noise grid."""
        if not isinstance(value, Totals) or value.keys is None:
            raise DataError("a query releases the per-group Totals of a backend")
        missing = sorted(k.split(":", 1)[1] for k, v in value.diagnostics.items()
                         if k.startswith("missing:") and v)
        if missing:
            raise DataError(f"column(s) {', '.join(map(repr, missing))} hold missing values "
                            "(None/NaN); clean or impute them first (nothing was charged)")
        for part in self.plan.parts:
            if part.noise != "exponential":
                check_grid_value(_scaled(self.measurements[part.index],
                                         value.dense[part.index]), part.grid)
        return value

    def _randomize(self, value: Totals, rng: Generator) -> pd.DataFrame:
        totals = self.check(value)
        noised = {p.index: p for p in self.plan.parts if p.noise != "exponential"}
        count = self.measurements.index(Measurement("count")) \
            if Measurement("count") in self.measurements else None
        noisy: dict[int, np.ndarray] = {}
        keep = np.arange(totals.groups)
        if self.plan.threshold is not None:
            noisy[count] = _noisy(_scaled(self.measurements[count], totals.dense[count]),
                                  noised[count], rng)
            keep = np.flatnonzero(noisy[count][:, 0] >= self.plan.threshold)
            noisy[count] = noisy[count][keep]
        for index, part in noised.items():
            if index not in noisy:
                x = _scaled(self.measurements[index], totals.dense[index][keep])
                noisy[index] = _noisy(x, part, rng)
        quantiles = {p.aggregate: self._quantiles(p, totals, keep, rng)
                     for p in self.plan.parts if p.noise == "exponential"}
        return self._table(totals, keep, noisy, quantiles)

    def _quantiles(self, part: Part, totals: Totals, keep: np.ndarray,
                   rng: Generator) -> np.ndarray:
        """The exponential mechanism per released group (Smith 2011, on the cell grid)."""
        agg = part.aggregate
        group, cell, count = totals.cells.get(part.index, (np.zeros(0, np.int64),) * 3)
        order = np.lexsort((cell, group))  # by group, cells ascending inside each
        group, cell, count = group[order], cell[order], count[order]
        bounds = np.searchsorted(group, np.stack([keep, keep + 1]))
        mechanism = part.mechanism()
        out = np.empty(keep.size)
        for j, (a, b) in enumerate(bounds.T):
            starts, sizes, utilities = quantile_candidates(cell[a:b], count[a:b],
                                                           agg.resolution, agg.q)
            chosen = mechanism._randomize((utilities, sizes.astype(np.float64)), rng)
            out[j] = quantile_point(starts, sizes, chosen, agg.bounds, agg.resolution, rng)
        return out

    def _table(self, totals: Totals, keep: np.ndarray, noisy: dict[int, np.ndarray],
               quantiles: dict[Aggregate, np.ndarray]) -> pd.DataFrame:
        index = pd.MultiIndex.from_frame(totals.keys.iloc[keep]) \
            if totals.keys.shape[1] > 1 else pd.Index(totals.keys.iloc[keep, 0])
        columns: dict[str, Any] = {}

        def of(m: Measurement) -> np.ndarray:
            return noisy[self.measurements.index(m)]

        count = Measurement("count")
        for a in self.aggregates:
            if a.kind == "count":
                columns[a.name] = np.maximum(0, np.rint(of(count)[:, 0])).astype(np.int64)
            elif a.kind == "sum":
                columns[a.name] = of(sum_measurement(a.column, "value", a.bounds))[:, 0]
            elif a.kind in ("mean", "variance"):
                lo, hi = a.bounds
                n = np.maximum(of(count)[:, 0], 1.0)
                t = of(sum_measurement(a.column, "centered", a.bounds))[:, 0] / n
                if a.kind == "mean":
                    columns[a.name] = np.clip((lo + hi) / 2.0 + t, lo, hi)
                else:
                    u = of(sum_measurement(a.column, "squared", a.bounds))[:, 0] / n
                    columns[a.name] = np.clip(u - t * t, 0.0, (hi - lo) ** 2 / 4.0)
            elif a.kind == "histogram":
                m = Measurement("histogram", a.column, edges=a.edges, categories=a.categories)
                bins = np.maximum(0, np.rint(of(m))).astype(np.int64)
                for j, name in enumerate(a.output_columns()):
                    columns[name] = bins[:, j]
            else:
                columns[a.name] = quantiles[a]
        if self.plan.threshold is not None and "count" not in columns:
            columns["count"] = np.maximum(0, np.rint(of(count)[:, 0])).astype(np.int64)
        return pd.DataFrame(columns, index=index).sort_index()
