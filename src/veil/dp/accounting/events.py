"""Privacy events: what a release costs, in dp_accounting's vocabulary, and how veil reads it.

A ``dp_accounting.DpEvent`` describes a mechanism by the parameters an accountant needs
(a Gaussian's noise multiplier, a sampling rate, a repetition count). veil adds one event,
:class:`ParallelDpEvent`, and fixes one meaning for all of them:

**Neighbouring datasets differ by adding or removing one record** (dp_accounting's
``ADD_OR_REMOVE_ONE``). A noise multiplier is the noise scale divided by the sensitivity
under that relation, i.e. the bound ``C`` on one record's contribution (clip norm in
DP-SGD). Two kinds of event need care under this relation:

* ``SampledWithoutReplacementDpEvent(n, b, E)`` (a fixed-size batch of ``b`` of ``n``
  records). dp_accounting accounts it only under replace-one neighbours (RDP bound of
  Wang, Balle & Kasiviswanathan 2019, Thm. 27) and its PLD refuses it. Under add/remove,
  veil uses a coupling bound. If ``D' = D + {x}`` (or ``D = D' + {x}``), a uniform b-subset
  of the larger set contains ``x`` with probability ``q = b/|larger| <= b/n``, and then it is
  a uniform b-subset of the smaller set with one record ``y`` *replaced* by ``x``::

      M(larger) = (1 - q) M(smaller) + q E_{S,y}[ E(S - y + x) ],  M(smaller) = E_{S,y}[E(S)].

  By joint convexity of the hockey-stick and Renyi divergences (Balle, Barthe & Gaboardi
  2018, Thm. 2; Zhu, Dong & Wang 2022, dominating pairs), both directions are bounded by
  the Poisson-subsampled mechanism with rate ``b/n`` whose inner mechanism sees a shift of
  up to ``2C`` (a replaced record moves a sum by at most twice one contribution). veil thus
  accounts the event as ``PoissonSampledDpEvent(b/n, E with twice the sensitivity)``:
  Gaussian ``sigma -> sigma/2``, Laplace ``b -> b/2``, discrete Laplace sensitivity
  ``s -> 2s``. The bound is attained (so it cannot be improved in general) when the other
  records sit at the opposite end of the clipping ball from ``x``; a fixed-size batch is
  never accounted as a Poisson batch of the same noise, the common under-count (Lebeda,
  Regehr, Kamath & Steinke 2024). Build such events with :func:`subsampled_gaussian_event`.
* ``RandomizedResponseDpEvent``: the value it randomizes may change arbitrarily between
  neighbouring datasets, so it is accounted with its replace-one privacy loss (the only
  relation dp_accounting defines it for), which bounds any change of its input.

:class:`ParallelDpEvent` is parallel composition (McSherry 2009): mechanisms run on
disjoint partitions of the records, where a record's partition depends on that record
only. Neighbouring datasets then differ in one partition, so the cost is that of the worst
single partition (a per-order maximum in RDP, the maximum epsilon in pure DP).

:func:`fold` walks an event tree for every accountant (one traversal, many algebras);
:func:`check_event` validates parameters; :func:`pure_epsilon` and :func:`event_guarantee`
give the (epsilon, delta) of one event for basic and advanced composition.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import attr
import dp_accounting
from dp_accounting import dp_event as de
from scipy import special

from veil.dp.accounting.skellam import SkellamDpEvent
from veil.errors import ConfigError

__all__ = ["ParallelDpEvent", "parallel", "subsampled_gaussian_event", "check_event",
           "fold", "pure_epsilon", "pure_stand_in", "gaussian_noise_multiplier",
           "event_guarantee", "describe"]

T = TypeVar("T")
_CACHE_SIZE = 64


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ParallelDpEvent(de.DpEvent):
    """Mechanisms run on disjoint partitions of the records (parallel composition).

    A record's partition must depend on that record alone (e.g. a histogram bin, a
    federated client); then neighbouring datasets differ in one partition and the cost is
    that of the worst partition (McSherry 2009, Thm. 4).
    """

    events: list[de.DpEvent]


def parallel(*events: de.DpEvent) -> ParallelDpEvent:
    """The event of ``events`` run on disjoint partitions of the data."""
    if not events:
        raise ConfigError("parallel() needs at least one event")
    for e in events:
        check_event(e)
    return ParallelDpEvent(list(events))


def subsampled_gaussian_event(noise_multiplier: float, sample_rate: float = 1.0,
                              steps: int = 1, *, sampling: str = "poisson",
                              dataset_size: int | None = None) -> de.DpEvent:
    """The event of ``steps`` Gaussian steps on subsampled batches (DP-SGD, FL rounds).

    ``sampling="poisson"``: each record joins a batch independently with probability
    ``sample_rate`` (Abadi et al. 2016). ``sampling="without_replacement"``: batches of
    exactly ``round(sample_rate * dataset_size)`` distinct records (a shuffled loader); veil
    accounts these with the coupling bound of this module's docstring.
    ``noise_multiplier`` is the noise standard deviation over the clip norm.
    """
    from veil._validation import check_choice, check_int, check_positive, check_probability

    sigma = check_positive(noise_multiplier, "noise_multiplier")
    q = check_probability(sample_rate, "sample_rate")
    steps = check_int(steps, "steps", low=1)
    check_choice(sampling, "sampling", ("poisson", "without_replacement"))
    step: de.DpEvent = de.GaussianDpEvent(sigma)
    if sampling == "poisson":
        if q < 1.0:
            step = de.PoissonSampledDpEvent(q, step)
    else:
        if dataset_size is None:
            raise ConfigError("dataset_size=None is not allowed with "
                              "sampling='without_replacement': give the number of records")
        n = check_int(dataset_size, "dataset_size", low=1)
        batch = round(q * n)
        if batch < 1 or abs(batch - q * n) > 1e-6 * n:
            raise ConfigError(f"sample_rate={sample_rate!r} is not allowed with "
                              f"dataset_size={n}: sample_rate * dataset_size must be a "
                              "whole batch size >= 1")
        step = de.SampledWithoutReplacementDpEvent(n, batch, step)
    return step if steps == 1 else de.SelfComposedDpEvent(step, steps)


# -- validation ---------------------------------------------------------------------

def _real(value: Any, where: str, *, low: float = 0.0, high: float = math.inf,
          low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{where}={value!r} is not allowed: expected a real number")
    v = float(value)
    ok = (v > low if low_open else v >= low) and v <= high and math.isfinite(v)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ConfigError(f"{where}={value!r} is not allowed: must be finite and in {interval}")
    return v


def _count(value: Any, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigError(f"{where}={value!r} is not allowed: expected an integer >= {low}")
    return int(value)


def check_event(event: Any, where: str = "event") -> de.DpEvent:
    """Validate an event tree's type and parameters (ConfigError naming the field)."""
    if not isinstance(event, de.DpEvent):
        raise ConfigError(f"{where}={event!r} is not allowed: expected a dp_accounting.DpEvent "
                          "(a mechanism's .event)")
    name = type(event).__name__
    if isinstance(event, (de.GaussianDpEvent, de.LaplaceDpEvent)):
        _real(event.noise_multiplier, f"{where}.noise_multiplier")
    elif isinstance(event, de.DiscreteLaplaceDpEvent):
        _real(event.noise_parameter, f"{where}.noise_parameter")
        _count(event.sensitivity, f"{where}.sensitivity")
    elif isinstance(event, de.RandomizedResponseDpEvent):
        _real(event.noise_parameter, f"{where}.noise_parameter", high=1.0)
        _count(event.num_buckets, f"{where}.num_buckets", low=1)
    elif isinstance(event, de.SelfComposedDpEvent):
        _count(event.count, f"{where}.count")
        check_event(event.event, f"{where}.event")
    elif isinstance(event, (de.ComposedDpEvent, ParallelDpEvent)):
        if not isinstance(event.events, list):
            raise ConfigError(f"{where}.events is not allowed: expected a list of events")
        if isinstance(event, ParallelDpEvent) and not event.events:
            raise ConfigError(f"{where}.events=[] is not allowed: a {name} needs an event")
        for i, e in enumerate(event.events):
            check_event(e, f"{where}.events[{i}]")
    elif isinstance(event, de.PoissonSampledDpEvent):
        _real(event.sampling_probability, f"{where}.sampling_probability", high=1.0)
        check_event(event.event, f"{where}.event")
    elif isinstance(event, (de.SampledWithoutReplacementDpEvent,
                            de.SampledWithReplacementDpEvent)):
        n = _count(event.source_dataset_size, f"{where}.source_dataset_size", low=1)
        b = _count(event.sample_size, f"{where}.sample_size")
        if isinstance(event, de.SampledWithoutReplacementDpEvent) and b > n:
            raise ConfigError(f"{where}.sample_size={b} is not allowed: at most "
                              f"source_dataset_size={n} without replacement")
        check_event(event.event, f"{where}.event")
    elif isinstance(event, de.ZCDpEvent):
        _real(event.rho, f"{where}.rho")
        _real(event.xi, f"{where}.xi")
    elif isinstance(event, SkellamDpEvent):
        for name in ("variance", "l1_sensitivity", "l2_sensitivity"):
            _real(getattr(event, name), f"{where}.{name}")
    return event


# -- one traversal for every accountant ------------------------------------------------

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
        return fold(_without_replacement_bound(event), algebra)
    return algebra.leaf(event)


def _doubled_sensitivity(event: de.DpEvent) -> de.DpEvent | None:
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
        inner = _doubled_sensitivity(event.event)
        return None if inner is None else de.SelfComposedDpEvent(inner, event.count)
    if isinstance(event, de.ComposedDpEvent):
        inner_events = [_doubled_sensitivity(e) for e in event.events]
        return None if any(e is None for e in inner_events) else de.ComposedDpEvent(inner_events)
    return None


def _without_replacement_bound(event: de.SampledWithoutReplacementDpEvent) -> de.DpEvent:
    """Add/remove coupling bound for a fixed-size batch (module docstring)."""
    if event.sample_size == 0:
        return de.NoOpDpEvent()
    inner = _doubled_sensitivity(event.event)
    if inner is None:
        raise ConfigError(
            f"{describe(event)} is not supported: a fixed-size batch can be accounted for "
            "Gaussian, Laplace or discrete Laplace mechanisms (and compositions of them)")
    rate = event.sample_size / event.source_dataset_size
    return inner if rate >= 1.0 else de.PoissonSampledDpEvent(rate, inner)


# -- single-event guarantees (basic and advanced composition) -------------------------

class _PureEpsilon:
    """Pure-DP epsilon of an event tree, or None when the event is not pure DP."""

    def zero(self) -> float | None:
        return 0.0

    def non_private(self) -> float | None:
        return math.inf

    def leaf(self, event: de.DpEvent) -> float | None:
        if isinstance(event, de.LaplaceDpEvent):
            # Laplace with scale b over sensitivity 1: loss |x|/b - |x-1|/b <= 1/b.
            return math.inf if event.noise_multiplier == 0 else 1.0 / event.noise_multiplier
        if isinstance(event, de.DiscreteLaplaceDpEvent):
            # P(x)/P(x-s) = exp(-a|x| + a|x-s|) <= exp(a s).
            return event.noise_parameter * event.sensitivity
        if isinstance(event, de.RandomizedResponseDpEvent):
            # keep w.p. 1-p, else uniform over k: worst ratio (1 - p + p/k) / (p/k).
            p, k = event.noise_parameter, event.num_buckets
            if k == 1 or p == 1.0:
                return 0.0
            return math.inf if p == 0 else math.log1p(k * (1.0 - p) / p)
        if isinstance(event, de.PoissonSampledDpEvent):
            # Amplification by Poisson subsampling: log(1 + q (e^eps - 1)) (Li, Qardaji &
            # Su 2012; Balle, Barthe & Gaboardi 2018, Thm. 8).
            inner = fold(event.event, self)
            if inner is None:
                return None
            q = event.sampling_probability
            if math.isinf(inner):
                return 0.0 if q == 0 else math.inf
            return math.log1p(q * math.expm1(inner))
        return None

    def repeat(self, cost: float | None, count: int) -> float | None:
        return None if cost is None else cost * count

    def combine(self, a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a + b

    def parallel(self, costs: list[float | None]) -> float | None:
        return None if any(c is None for c in costs) else max(costs)


def pure_epsilon(event: de.DpEvent) -> float | None:
    """The epsilon of a pure-DP event tree (delta = 0), or None if it is not pure DP."""
    return fold(event, _PureEpsilon())


def pure_stand_in(event: de.DpEvent) -> de.RandomizedResponseDpEvent | None:
    """Binary randomized response with odds e^eps for a pure eps-DP event, else None.

    Every eps-DP mechanism is a post-processing of this randomized response on any
    neighbouring pair (Kairouz, Oh & Viswanath 2015), so an accountant may price an event
    it has no formula for by this stand-in (noise parameter ``2 / (1 + e^eps)``).
    """
    eps = pure_epsilon(event)
    if eps is None or not math.isfinite(eps):
        return None
    return de.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(eps)), 2)


def gaussian_noise_multiplier(event: de.DpEvent) -> float | None:
    """The single Gaussian equivalent to a tree of Gaussians, else None.

    Gaussians with multipliers s_i composed on the same data equal one Gaussian with
    ``s = (sum_i s_i^-2)^(-1/2)`` (their privacy losses are independent normals whose
    means and variances add).
    """
    if isinstance(event, de.GaussianDpEvent):
        s = event.noise_multiplier
        return s if s > 0 else None
    if isinstance(event, de.SelfComposedDpEvent):
        s = gaussian_noise_multiplier(event.event)
        return None if s is None or event.count == 0 else s / math.sqrt(event.count)
    if isinstance(event, de.ComposedDpEvent) and event.events:
        parts = [gaussian_noise_multiplier(e) for e in event.events]
        if any(s is None for s in parts):
            return None
        return sum(s ** -2.0 for s in parts) ** -0.5
    return None


def _gaussian_log_delta(sigma: float, eps: float) -> float:
    """log delta(eps) of the Gaussian mechanism with multiplier sigma (Balle & Wang 2018)."""
    a = float(special.log_ndtr(0.5 / sigma - eps * sigma))
    b = eps + float(special.log_ndtr(-0.5 / sigma - eps * sigma))
    return a + math.log1p(-math.exp(b - a)) if b < a else -math.inf


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of the Gaussian mechanism at ``delta`` (Balle & Wang 2018, Thm. 8).

    ``delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s)`` is inverted by
    dp_accounting's root finder; the result is then checked against the formula and
    nudged up until ``delta(eps) <= delta``, so it is never below the true epsilon.
    """
    eps = float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta, tol=1e-12))
    if not math.isfinite(eps):
        return math.inf
    log_delta, step = math.log(delta), 1e-12 * max(1.0, eps)
    while _gaussian_log_delta(noise_multiplier, eps) > log_delta:
        eps, step = eps + step, 2 * step
    return eps


def event_guarantee(event: de.DpEvent, delta: float | None, *,
                    exhaustive: bool = False) -> tuple[float, float] | None:
    """An (epsilon_i, delta_i) guarantee for one event, or None if none is cheap to state.

    * pure events: ``(eps, 0)`` in closed form;
    * a tree of Gaussians: its exact analytic epsilon at ``delta``;
    * a Poisson-subsampled tree of Gaussians (rate q > delta): amplification of the
      Gaussian's ``(eps_G, delta/q)`` to ``(log(1 + q (e^eps_G - 1)), delta)`` (Balle,
      Barthe & Gaboardi 2018, Thm. 8); a fixed-size batch after the coupling rewrite;
    * with ``exhaustive=True``, any other event: the smaller of the RDP and the
      (pessimistic) PLD epsilon of that event alone at ``delta``.
    """
    eps = pure_epsilon(event)
    if eps is not None:
        return eps, 0.0
    if delta is None or delta <= 0:
        return None
    if isinstance(event, de.SampledWithoutReplacementDpEvent):
        return event_guarantee(_without_replacement_bound(event), delta, exhaustive=exhaustive)
    sigma = gaussian_noise_multiplier(event)
    if sigma is not None:
        return gaussian_epsilon(sigma, delta), delta
    if isinstance(event, de.PoissonSampledDpEvent):
        q, sigma = event.sampling_probability, gaussian_noise_multiplier(event.event)
        if sigma is not None and delta < q:
            return math.log1p(q * math.expm1(gaussian_epsilon(sigma, delta / q))), delta
    if not exhaustive:
        return None
    from veil.dp.accounting.pld import PLDAccountant
    from veil.dp.accounting.rdp import RDPAccountant

    bounds = []
    for single in (PLDAccountant(), RDPAccountant()):
        try:
            single.compose(event)
        except ConfigError:
            continue
        bounds.append(single.get_epsilon(delta))
    if not bounds:
        raise ConfigError(f"{describe(event)} is not supported by any accountant")
    return min(bounds), delta


def describe(event: de.DpEvent) -> str:
    """A short human-readable form of an event (for tables and error messages)."""
    if isinstance(event, de.SelfComposedDpEvent):
        return f"{event.count} x {describe(event.event)}"
    if isinstance(event, (de.ComposedDpEvent, ParallelDpEvent)):
        word = "compose" if isinstance(event, de.ComposedDpEvent) else "parallel"
        inner = ", ".join(describe(e) for e in event.events[:3])
        more = f", ... ({len(event.events)} events)" if len(event.events) > 3 else ""
        return f"{word}({inner}{more})"
    if isinstance(event, de.PoissonSampledDpEvent):
        return f"poisson(q={event.sampling_probability:.6g}, {describe(event.event)})"
    if isinstance(event, de.SampledWithoutReplacementDpEvent):
        return (f"fixed-batch({event.sample_size}/{event.source_dataset_size}, "
                f"{describe(event.event)})")
    fields = ", ".join(f"{a.name}={getattr(event, a.name)!r}" for a in attr.fields(type(event)))
    name = type(event).__name__.removesuffix("DpEvent") or type(event).__name__
    return f"{name}({fields})"
