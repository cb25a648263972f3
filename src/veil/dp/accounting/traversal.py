"""One walk over an event tree for every accountant: :func:`fold` with an :class:`Algebra`.

An accountant states how it represents a cost (an RDP curve, a privacy loss distribution,
a pure epsilon) and how costs combine: sequentially (``combine``, ``repeat``) or in
parallel (``parallel``, the worst partition; McSherry 2009). :func:`fold` walks the
structure and calls ``leaf`` for each mechanism. A fixed-size batch is rewritten first by
the add/remove coupling bound of :mod:`veil.dp.accounting.events`
(:func:`without_replacement_bound`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from dp_accounting import dp_event as de

from veil.dp.accounting.events import ParallelDpEvent, describe
from veil.errors import ConfigError

__all__ = ["Algebra", "cached_leaf", "doubled_sensitivity", "fold", "without_replacement_bound"]

T = TypeVar("T")
_CACHE_SIZE = 64


class Algebra(Protocol[T]):
    """How an accountant represents and combines costs (see :func:`fold`)."""

    def zero(self) -> T: ...
    def non_private(self) -> T: ...
    def leaf(self, event: de.DpEvent) -> T: ...
    def repeat(self, cost: T, count: int) -> T: ...
    def combine(self, a: T, b: T) -> T: ...
    def parallel(self, costs: list[T]) -> T: ...


def cached_leaf(leaf: Callable[[Any, de.DpEvent], T]) -> Callable[[Any, de.DpEvent], T]:
    """Memoise an algebra's ``leaf`` per (hashable) event: a ledger charging the same
    step again prices it once. Costs are never mutated, so sharing them is safe."""
    @functools.wraps(leaf)
    def priced(algebra: Any, event: de.DpEvent) -> T:
        cache = algebra.__dict__.setdefault("_leaf_cache", {})
        try:
            return cache[event]
        except KeyError:
            pass
        except TypeError:  # events holding lists are not hashable
            return leaf(algebra, event)
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[event] = cost = leaf(algebra, event)
        return cost
    return priced


def fold(event: de.DpEvent, algebra: Algebra[T]) -> T:
    """The cost of ``event`` in ``algebra``: structure is walked here, leaves priced there.

    NoOp -> zero, NonPrivate -> non_private, SelfComposed -> repeat, Composed -> combine,
    Parallel -> parallel; a fixed-size batch is rewritten by the coupling bound first.
    """
    if isinstance(event, de.NoOpDpEvent):
        return algebra.zero()
    if isinstance(event, de.NonPrivateDpEvent):
        return algebra.non_private()
    if isinstance(event, de.SelfComposedDpEvent):
        if event.count == 0:
            return algebra.zero()
        return algebra.repeat(fold(event.event, algebra), event.count)
    if isinstance(event, de.ComposedDpEvent):
        total = algebra.zero()
        for e in event.events:
            total = algebra.combine(total, fold(e, algebra))
        return total
    if isinstance(event, ParallelDpEvent):
        distinct: list[de.DpEvent] = []
        for e in event.events:  # identical partitions cost the same: price each once
            if all(e != d for d in distinct):
                distinct.append(e)
        return algebra.parallel([fold(e, algebra) for e in distinct])
    if isinstance(event, de.SampledWithoutReplacementDpEvent):
        return fold(without_replacement_bound(event), algebra)
    return algebra.leaf(event)


def doubled_sensitivity(event: de.DpEvent) -> de.DpEvent | None:
    """The same mechanism when one record may shift its input by twice its contribution."""
    if isinstance(event, de.GaussianDpEvent):
        return de.GaussianDpEvent(event.noise_multiplier / 2.0)
    if isinstance(event, de.LaplaceDpEvent):
        return de.LaplaceDpEvent(event.noise_multiplier / 2.0)
    if isinstance(event, de.DiscreteLaplaceDpEvent):
        return de.DiscreteLaplaceDpEvent(event.noise_parameter, 2 * event.sensitivity)
    if isinstance(event, (de.NoOpDpEvent, de.NonPrivateDpEvent)):
        return event
    if isinstance(event, de.SelfComposedDpEvent):
        inner = doubled_sensitivity(event.event)
        return None if inner is None else de.SelfComposedDpEvent(inner, event.count)
    if isinstance(event, de.ComposedDpEvent):
        inner_events = [doubled_sensitivity(e) for e in event.events]
        return None if any(e is None for e in inner_events) else de.ComposedDpEvent(inner_events)
    return None


def without_replacement_bound(event: de.SampledWithoutReplacementDpEvent) -> de.DpEvent:
    """Add/remove coupling bound for a fixed-size batch (module docstring)."""
    if event.sample_size == 0:
        return de.NoOpDpEvent()
    inner = doubled_sensitivity(event.event)
    if inner is None:
        raise ConfigError(
            f"{describe(event)} is not supported: a fixed-size batch can be accounted for "
            "Gaussian, Laplace or discrete Laplace mechanisms (and compositions of them)")
    rate = event.sample_size / event.source_dataset_size
    return inner if rate >= 1.0 else de.PoissonSampledDpEvent(rate, inner)
