"""The query builder: what to compute per group, for whom, and how each unit is bounded."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from veil._validation import check_int
from veil.dp.accounting import DEFAULT_ACCOUNTANT
from veil.dp.ledger import Ledger
from veil.dp.query import local
from veil.dp.query.plan import Plan, make_plan
from veil.dp.query.release import QueryMechanism
from veil.dp.query.spec import (
    QUANTILE_RESOLUTION,
    Aggregate,
    Measurement,
    make_aggregate,
    measurements_of,
    parse_aggregate,
)
from veil.errors import ConfigError, DataError
from veil.random import check_rng

__all__ = ["Query", "QueryResult"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryResult:
    """A released query.

    ``table``: one row per released group (the keys as index), one column per aggregate
    (differentially private). ``plan``: the noise and cost (:class:`~veil.dp.query.plan.Plan`).
    ``ledger``: the ledger charged (a one-off ledger when none was given).
    ``diagnostics``: exact counts of rows dropped by contribution bounding, values clipped
    into bounds, rows outside declared keys -- for the data curator, *not* private, not
    for publication.
    """

    table: pd.DataFrame
    plan: Plan
    ledger: Ledger
    diagnostics: dict[str, int]

    @property
    def epsilon(self) -> float:
        return self.plan.epsilon

    @property
    def delta(self) -> float:
        return self.plan.delta


def _is_spark(data: Any) -> bool:
    return type(data).__module__.startswith("pyspark.")


#: the largest ``max_groups`` / ``max_rows``: a unit's contribution bound scales the noise,
#: so a larger one releases nothing useful (and overflows the noise's integer grid)
MAX_CONTRIBUTION = 10**9


@dataclass(frozen=True)
class Query:
    """A differentially private group-by query over a table with a privacy-unit column.

    Build it step by step (each call returns a new query)::

        q = (Query("patient_id", max_groups=3, max_rows=2)
             .group_by("ward")
             .count().mean("age", (0, 100)).quantile("age", 0.5, (0, 100)))
        q.plan(epsilon=1, delta=1e-6).summary()      # the cost and noise: a dry run
        q.run(visits, epsilon=1, delta=1e-6, ledger=ledger).table

    ``max_groups``: the most groups a unit contributes to; ``max_rows``: the most rows
    per group per unit (extra rows and groups are dropped at random and counted). Value
    bounds are declared per aggregate, never read from the data. ``group_by(...,
    keys=[...])`` declares the group keys public (every declared key is released; rows
    with other keys are dropped); otherwise the released groups are chosen by DP
    partition selection (needs ``delta > 0``). See :mod:`veil.dp.query.plan` for the noise
    and the accounting.
    """

    privacy_unit: str
    max_groups: int = 1
    max_rows: int = 1
    by: tuple[str, ...] = ()
    keys: pd.DataFrame | None = field(default=None, compare=False)
    aggregates: tuple[Aggregate, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.privacy_unit, str) or not self.privacy_unit:
            raise ConfigError(f"privacy_unit={self.privacy_unit!r} is not allowed: name the "
                              "column that identifies a person (privacy unit)")
        check_int(self.max_groups, "max_groups", low=1, high=MAX_CONTRIBUTION)
        check_int(self.max_rows, "max_rows", low=1, high=MAX_CONTRIBUTION)

    # -- building ----------------------------------------------------------------------
    def group_by(self, *columns: str, keys: Sequence[Any] | None = None) -> Query:
        """Group by ``columns``; ``keys`` declares the public keys (values, or tuples for
        several columns)."""
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise ConfigError(f"group_by{columns!r} is not allowed: name one or more columns")
        if self.privacy_unit in columns:
            raise ConfigError(f"group_by({self.privacy_unit!r}) is not allowed: it is the "
                              "privacy unit")
        declared = None
        if keys is not None:
            rows = [k if isinstance(k, tuple) else (k,) for k in keys]
            if not rows or any(len(r) != len(columns) for r in rows):
                raise ConfigError(f"keys={keys!r} is not allowed: need a non-empty list of "
                                  f"values (tuples of {len(columns)} for {len(columns)} "
                                  "columns)")
            declared = pd.DataFrame(rows, columns=list(columns)).drop_duplicates()
            if declared.isna().any().any():
                raise ConfigError(f"keys={keys!r} is not allowed: keys cannot be missing")
        return dataclasses.replace(self, by=tuple(columns), keys=declared)

    def _add(self, aggregate: Aggregate) -> Query:
        if aggregate in self.aggregates:
            raise ConfigError(f"{aggregate.name} is asked for twice")
        return dataclasses.replace(self, aggregates=(*self.aggregates, aggregate))

    def count(self) -> Query:
        """Rows per group (each unit contributes at most ``max_rows``)."""
        return self._add(make_aggregate("count"))

    def sum(self, column: str, bounds: Any) -> Query:
        """The sum of ``column`` clipped into ``bounds = (lo, hi)``."""
        return self._add(make_aggregate("sum", column, bounds=bounds))

    def mean(self, column: str, bounds: Any) -> Query:
        """The mean of ``column`` clipped into ``bounds``."""
        return self._add(make_aggregate("mean", column, bounds=bounds))

    def variance(self, column: str, bounds: Any) -> Query:
        """The (population) variance of ``column`` clipped into ``bounds``."""
        return self._add(make_aggregate("variance", column, bounds=bounds))

    def quantile(self, column: str, q: float, bounds: Any, *,
                 resolution: int = QUANTILE_RESOLUTION) -> Query:
        """The q-quantile of ``column`` on a grid of ``resolution`` cells of ``bounds``."""
        return self._add(make_aggregate("quantile", column, bounds=bounds, q=q,
                                        resolution=resolution))

    def histogram(self, column: str, edges: Sequence[float] | None = None, *,
                  categories: Sequence[Any] | None = None) -> Query:
        """Counts per bin (numeric ``edges``; values outside go to the end bins) or per
        declared category (other values are left out)."""
        return self._add(make_aggregate("histogram", column, edges=edges,
                                        categories=categories))

    def agg(self, *texts: str) -> Query:
        """Aggregates from their text form, e.g. ``agg("count", "mean(age, 0, 100)")``
        (:func:`~veil.dp.query.spec.parse_aggregate`)."""
        query = self
        for text in texts:
            query = query._add(parse_aggregate(text))
        return query

    # -- planning and running ------------------------------------------------------------
    def measurements(self) -> list[Measurement]:
        """The measurements the aggregates need (a count too when keys are not public)."""
        return measurements_of(self.aggregates, need_count=self._selects())

    def _selects(self) -> bool:
        return bool(self.by) and self.keys is None

    def plan(self, epsilon: float, delta: float = 0.0, *, noise: str | None = None,
             accountant: str = DEFAULT_ACCOUNTANT) -> Plan:
        """The noise and the certified cost of this query: a dry run, no data read.

        ``noise``: "laplace" or "gaussian" (default: Laplace when ``delta == 0``, else the
        one with less noise for this query).
        """
        if not self.aggregates:
            raise ConfigError("the query has no aggregate: add count(), sum(...), mean(...), "
                              "variance(...), quantile(...) or histogram(...)")
        quantiles = [a for a in self.aggregates if a.kind == "quantile"]
        return make_plan(self.measurements(), quantiles, epsilon=epsilon, delta=delta,
                         noise=noise, max_groups=self.max_groups, max_rows=self.max_rows,
                         public_keys=not self._selects(), accountant=accountant)

    def run(self, data: Any, *, epsilon: float, delta: float = 0.0, ledger: Ledger | None = None,
            noise: str | None = None, label: str | None = None, rng: Any = None) -> QueryResult:
        """Bound, total, charge ``ledger`` for the whole query, then add noise.

        ``data``: a pandas DataFrame (one-machine backend) or a pyspark DataFrame (Spark
        backend: bounding and totals run as Spark jobs; the small table of totals comes
        to the driver, where the ledger is charged and noise is drawn). ``ledger=None``
        charges a one-off ledger holding exactly this query's budget (returned on the
        result). ``rng``: a seeded generator for tests; the default is the CSPRNG, for the
        bounding samples and the noise alike. Bad input raises before anything is charged;
        an exhausted ledger raises BudgetExceededError before any noise is drawn.
        """
        if ledger is not None and not isinstance(ledger, Ledger):
            raise ConfigError(f"ledger={ledger!r} is not allowed: expected a veil.dp.Ledger "
                              "or None")
        plan = self.plan(epsilon, delta, noise=noise,
                         accountant=ledger.accountant if ledger is not None else DEFAULT_ACCOUNTANT)
        # one stream for bounding, one for noise: both backends draw the same noise
        bounding_rng, noise_rng = check_rng(rng).spawn(2)
        measurements = self.measurements()
        options = {"max_groups": self.max_groups, "max_rows": self.max_rows}
        if _is_spark(data):
            from veil.dp.query import spark

            totals = spark.table_totals(data, self.privacy_unit, self.by, self.keys,
                                        measurements, rng=bounding_rng, **options)
        elif isinstance(data, pd.DataFrame):
            totals = local.table_totals(data, self.privacy_unit, self.by, self.keys,
                                        measurements, rng=bounding_rng, **options)
        else:
            raise DataError(f"data of type {type(data).__name__} is not allowed: pass a "
                            "pandas or a pyspark DataFrame")
        mechanism = QueryMechanism(plan, measurements, self.aggregates)
        mechanism.check(totals)  # missing values: refused before any ledger exists
        if ledger is None:
            ledger = Ledger(plan.epsilon, plan.delta)
        table = ledger.release(mechanism, totals, label=label or self._label(),
                               rng=noise_rng)
        if any(v for k, v in totals.diagnostics.items() if not k.startswith("missing:")):
            logger.warning("contribution bounding dropped or clipped some rows (exact counts "
                           "in the result's diagnostics, for the curator only)")
        return QueryResult(table, plan, ledger, dict(totals.diagnostics))

    def _label(self) -> str:
        by = f" by {', '.join(self.by)}" if self.by else ""
        return f"query {', '.join(a.name for a in self.aggregates)}{by}"
