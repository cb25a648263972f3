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

:func:`check_event` validates an event's parameters and :func:`describe` names it. The
walk every accountant makes over an event tree (and the coupling rewrite of a fixed-size
batch) is :mod:`veil.dp.accounting.traversal`; the (epsilon, delta) of one event, for basic
and advanced composition, :mod:`veil.dp.accounting.guarantees`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import attr
from dp_accounting import dp_event as de

from veil._validation import check_choice, check_int, check_positive, check_probability
from veil.dp.accounting.skellam import SkellamDpEvent
from veil.errors import ConfigError

__all__ = ["ParallelDpEvent", "check_event", "describe", "parallel", "subsampled_gaussian_event"]


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
