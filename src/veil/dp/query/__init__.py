"""Differentially private group-by queries over tables, per privacy unit, on pandas or Spark.

A :class:`Query` names the privacy-unit column (a person owning many rows), how each unit
is bounded (``max_groups`` groups, ``max_rows`` rows per group), the group keys (declared
public, or chosen by DP partition selection) and the aggregates (count, sum, mean,
variance, quantile, histogram, with declared bounds). :meth:`Query.plan` calibrates the
noise of all parts jointly and gives the certified cost before anything runs (the dry
run); :meth:`Query.run` bounds and totals the table (:mod:`~veil.dp.query.local` for
pandas, :mod:`~veil.dp.query.spark` for Spark), charges the whole query to a
:class:`~veil.dp.Ledger` and only then draws the noise (:mod:`~veil.dp.query.release`).

Modules: :mod:`~veil.dp.query.spec` (aggregates and measurements),
:mod:`~veil.dp.query.bounding` (contribution bounding, exact totals),
:mod:`~veil.dp.query.plan` (noise, partition selection, accounting).
"""

from veil.dp.query.plan import Plan
from veil.dp.query.query import Query, QueryResult
from veil.dp.query.spec import Aggregate, parse_aggregate

__all__ = ["Query", "QueryResult", "Plan", "Aggregate", "parse_aggregate"]
