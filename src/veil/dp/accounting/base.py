"""The interface every accountant follows, and the composition bounds they all share.

An accountant holds the privacy cost of a sequence of events and answers "what epsilon at
this delta?" (``get_epsilon``) and "what delta at this epsilon?" (``get_delta``). It does
the math only; the :class:`~veil.dp.Ledger` does the bookkeeping (budget, persistence,
history), as in Opacus where ``IAccountant`` subclasses wrap ``analysis/`` functions.

Every accountant also keeps, whenever each event has a cheap (epsilon_i, delta_i)
guarantee (pure-DP events in closed form, Gaussians by their exact analytic epsilon), the
sums needed for two classic bounds; every accountant reports the minimum of its own bound
and basic composition (the minimum of upper bounds is an upper bound):

* basic composition (Dwork, McSherry, Nissim & Smith 2006; Dwork & Lei 2009):
  ``(sum eps_i, sum delta_i)``;
* advanced composition (Dwork, Rothblum & Vadhan 2010, Thm. III.3, for heterogeneous
  eps_i): for any ``delta' > 0``, the composition is ``(eps', delta' + sum delta_i)``-DP with
  ``eps' = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1)``. The same bound holds
  when the eps_i are chosen adaptively and the sequence stops at a budget (privacy filters:
  Whitehouse, Ramdas, Rogers & Wu 2023, whose filter term eps_i (e^eps_i - 1)/2 is smaller).

So a tight accountant (RDP, PLD) is never worse than basic composition, e.g. a pure-DP
budget split into equal parts always fits whatever the numerical discretisation.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

from dp_accounting import dp_event as de

from veil._validation import check_delta, check_int, check_positive
from veil.dp.accounting.events import check_event
from veil.dp.accounting.guarantees import event_guarantee
from veil.errors import ConfigError

__all__ = ["Accountant", "CompositionSums"]


class CompositionSums(NamedTuple):
    """Running sums of single-event (epsilon_i, delta_i) guarantees."""

    epsilon: float = 0.0
    delta: float = 0.0
    epsilon_sq: float = 0.0
    drift: float = 0.0  # sum eps_i (e^eps_i - 1)

    def add(self, eps: float, delta: float, count: int = 1) -> CompositionSums:
        """The sums after ``count`` more events with guarantee (eps, delta)."""
        drift = eps * math.expm1(eps) if eps < 700 else math.inf  # e^700 ~ float max
        return CompositionSums(self.epsilon + count * eps, self.delta + count * delta,
                               self.epsilon_sq + count * eps * eps, self.drift + count * drift)

    def basic(self, delta: float) -> float:
        """Basic composition: sum eps_i if sum delta_i <= delta (up to a relative 1e-9 of
        floating-point round-off, as for epsilon: ``delta/5`` five times), else infinity."""
        return self.epsilon if self.delta <= delta * (1.0 + 1e-9) else math.inf

    def advanced(self, delta: float) -> float:
        """Advanced composition with delta' = delta - sum delta_i (DRV 2010)."""
        slack = delta - self.delta
        if slack <= 0:
            return math.inf
        if self.epsilon_sq == 0:
            return 0.0
        return math.sqrt(2.0 * math.log(1.0 / slack) * self.epsilon_sq) + self.drift

    def basic_delta(self, epsilon: float) -> float:
        """Basic composition: sum delta_i if sum eps_i <= epsilon, else 1."""
        return self.delta if self.epsilon <= epsilon else 1.0

    def advanced_delta(self, epsilon: float) -> float:
        """Advanced composition solved for delta' at ``epsilon``:
        ``sum delta_i + exp(-(epsilon - drift)^2 / (2 sum eps_i^2))`` when epsilon > drift.
        """
        if self.epsilon_sq == 0:
            return self.delta
        if epsilon <= self.drift:
            return 1.0
        return self.delta + math.exp(-((epsilon - self.drift) ** 2) / (2.0 * self.epsilon_sq))


class Accountant(ABC):
    """Composes events; reports the epsilon it can certify at a delta.

    Subclasses implement :meth:`_compose` (update their own state with an event) and
    :meth:`_epsilon` / :meth:`_delta` (their bound); the base class validates events and
    takes the minimum with basic composition.
    """

    #: the name used by ``Ledger(accountant=...)`` and ``calibrate_noise``
    name: ClassVar[str]
    #: False for approximations (e.g. the GDP central limit theorem): never for budgets
    certified: ClassVar[bool] = True
    #: whether every event must have a single-event guarantee (basic/advanced)
    _needs_guarantees: ClassVar[bool] = False

    def __init__(self) -> None:
        self._sums: CompositionSums | None = CompositionSums()

    def copy(self) -> Accountant:
        """An independent copy (states are immutable values, so a shallow copy is enough)."""
        return copy.copy(self)

    def compose(self, event: de.DpEvent, *, delta: float | None = None,
                count: int = 1) -> None:
        """Add ``count`` runs of ``event`` to the composition.

        ``delta`` is the delta of the (epsilon, delta) guarantee of one run (a mechanism's
        ``.delta``); basic and advanced composition need it for non-pure events.
        """
        check_event(event)
        count = check_int(count, "count", low=1)
        if delta is not None:
            delta = check_delta(delta, "delta")
        guarantee = self.guarantee(event, delta)
        if guarantee is None and self._needs_guarantees:
            raise ConfigError(
                f"delta={delta!r} is not allowed for this event with the {self.name!r} "
                "accountant: it is not pure DP, so give the delta of its own (epsilon, "
                "delta) guarantee (> 0), or use accountant='pld' or 'rdp'")
        # may raise ConfigError; nothing is changed before this
        self._compose(event if count == 1 else de.SelfComposedDpEvent(event, count))
        if self._sums is not None:
            self._sums = None if guarantee is None else self._sums.add(*guarantee, count)

    def guarantee(self, event: de.DpEvent, delta: float | None) -> tuple[float, float] | None:
        """The (epsilon, delta) guarantee of one run of ``event`` for the composition sums
        (:func:`~veil.dp.accounting.guarantees.event_guarantee`), or None."""
        return event_guarantee(event, delta)

    def get_epsilon(self, delta: float) -> float:
        """The smallest epsilon this accountant certifies at ``delta`` (may be inf)."""
        delta = check_delta(delta, "delta")
        own = self._epsilon(delta)
        if self._sums is not None:
            own = min(own, self._sums.basic(delta))
        return max(0.0, float(own))

    def get_delta(self, epsilon: float) -> float:
        """The smallest delta this accountant certifies at ``epsilon`` (at most 1)."""
        epsilon = check_positive(epsilon, "epsilon", allow_zero=True)
        own = self._delta(epsilon)
        if self._sums is not None:
            own = min(own, self._sums.basic_delta(epsilon))
        return min(1.0, max(0.0, float(own)))

    @abstractmethod
    def _compose(self, event: de.DpEvent) -> None:
        """Update the state with ``event`` (raise ConfigError if it is not supported)."""

    @abstractmethod
    def _epsilon(self, delta: float) -> float:
        """This accountant's own epsilon bound at ``delta``."""

    @abstractmethod
    def _delta(self, epsilon: float) -> float:
        """This accountant's own delta bound at ``epsilon``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
