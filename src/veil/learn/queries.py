"""Learners expressed as aggregate queries.

The hybrid approach (Truex et al., AISec 2019) trains a model ``f_M`` through a sequence of
aggregate queries ``Q_1 .. Q_k``: the learner asks for a vector, every party computes its
answer ``Q_s(D_i)`` from its own records, the answers are summed (under encryption, with
noise), and the learner updates the model from the noisy sum. Here, what a learner is:

* :class:`Query` -- what the learner asks: a ``spec`` the parties compute from (numbers,
  text, arrays: it travels in a message) and a :class:`QueryShape`: the answer's length,
  its L1/L2 sensitivity (the most one record, added or removed, changes the *sum*), the
  bound every party's answer coordinate must respect, and how it is put on an integer grid.
* :class:`QueryLearner` -- ``plan()`` (the shapes of the queries it will ask, so the noise
  can be calibrated for the whole run), ``next_query()``, ``answer(query, X, y)`` (run by
  each party on its own data) and ``update(query, aggregate)``. Learners: the ID3 tree of
  :mod:`veil.learn.tree` (count queries) and
  :class:`veil.learn.private.GradientQueries` (noisy sums of clipped gradients).

How a query is answered across parties (the integer grid, the methods ``none`` .. ``hybrid``,
the simulated and the encrypted aggregators, :func:`~veil.fl.hybrid.fit_queries`) is the
federated layer's: :mod:`veil.fl.hybrid`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_array, check_int, check_positive
from veil.errors import ConfigError, DataError

__all__ = ["QueryShape", "Query", "QueryAnswer", "QueryLearner", "checked_values"]


@dataclass(frozen=True)
class QueryShape:
    """What is known about a query before the data is seen.

    ``size``: length of the answer (may be 0 in a :meth:`QueryLearner.plan` when unknown
    and ``integer`` is True: integer answers do not need it). ``l1``/``l2``: sensitivity of
    the sum over all parties' answers when one record is added or removed. ``bound``: the
    largest ``|coordinate|`` of one party's answer (larger ones are clipped and counted).
    ``integer``: answers are exact integers (counts). ``frac_bits``: fractional bits of the
    integer grid for real answers (0 for integer answers).
    """

    size: int
    l1: float
    l2: float
    bound: float
    integer: bool = False
    frac_bits: int = 0

    def __post_init__(self) -> None:
        check_int(self.size, "size", low=0)
        check_positive(self.l1, "l1")
        check_positive(self.l2, "l2")
        check_positive(self.bound, "bound")
        check_int(self.frac_bits, "frac_bits", low=0, high=40)
        if self.integer and self.frac_bits:
            raise ConfigError(f"frac_bits={self.frac_bits} is not allowed for integer answers")

    def grid_sensitivity(self, bits: int) -> tuple[float, float]:
        """(L1, L2) sensitivity of the sum of answers on the grid of ``bits`` fractional bits
        (module docstring)."""
        scale = 2.0 ** bits
        if self.integer:
            return scale * self.l1, scale * self.l2
        if self.size == 0:
            raise ConfigError("a real-valued query needs its size to bound its rounding")
        l2 = scale * self.l2 + math.sqrt(self.size)
        return min(scale * self.l1 + self.size, l2 * l2), l2


@dataclass(frozen=True)
class Query:
    """One aggregate query: its name (for the ledger), shape and the parties' ``spec``."""

    name: str
    shape: QueryShape
    spec: Mapping[str, Any] = field(default_factory=dict)


def checked_values(query: Query, aggregate: QueryAnswer) -> np.ndarray:
    values = check_array(aggregate.values, "aggregate.values", ndim=1, allow_empty=True)
    if values.size != query.shape.size:
        raise DataError(f"the aggregate has {values.size} values; query {query.name!r} "
                        f"expects {query.shape.size}")
    return values


@dataclass(frozen=True)
class QueryAnswer:
    """The answer to a query: the noisy sum (decoded), the standard deviation of its noise
    per coordinate, how many values were clipped, who contributed, and transport metrics."""

    values: np.ndarray
    noise_std: float = 0.0
    clipped: int = 0
    parties: tuple[int, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)


class QueryLearner(ABC):
    """A learning algorithm as a sequence of aggregate queries (module docstring)."""

    @abstractmethod
    def plan(self) -> list[QueryShape]:
        """The shapes of the queries the learner may ask, in order (for calibration)."""

    @abstractmethod
    def next_query(self) -> Query | None:
        """The next query, or None when the model is complete."""

    @abstractmethod
    def answer(self, query: Query, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
        """Run by a party: its exact answer to ``query`` and how many records were clipped."""

    @abstractmethod
    def update(self, query: Query, aggregate: QueryAnswer) -> None:
        """Update the model from the (noisy) aggregate answer."""

    @property
    @abstractmethod
    def model(self) -> Any:
        """The model learned so far (a scikit-learn style estimator)."""

