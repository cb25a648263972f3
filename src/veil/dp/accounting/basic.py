"""Basic (sequential) composition: epsilons and deltas add up.

k events with guarantees (eps_i, delta_i) compose to ``(sum eps_i, sum delta_i)``-DP
(Dwork, McSherry, Nissim & Smith 2006; Dwork & Lei 2009, and for adaptively chosen
parameters with a stopping budget, Rogers, Roth, Ullman & Vadhan 2016). Each event's
guarantee is its pure-DP epsilon, or, for a non-pure event, the epsilon certified at the
delta of its own guarantee (the releasing mechanism's ``.delta``).
"""

from __future__ import annotations

import math

from dp_accounting import dp_event as de

from veil.dp.accounting.base import Accountant
from veil.dp.accounting.events import describe
from veil.dp.accounting.guarantees import event_guarantee
from veil.dp.accounting.pld import PLDAccountant
from veil.dp.accounting.rdp import RDPAccountant
from veil.dp.accounting.traversal import without_replacement_bound
from veil.errors import ConfigError

__all__ = ["BasicAccountant"]


class BasicAccountant(Accountant):
    """Sum of per-event (epsilon, delta): simple, and loose for many events."""

    name = "basic"
    _needs_guarantees = True

    def guarantee(self, event: de.DpEvent, delta: float | None) -> tuple[float, float] | None:
        """A closed form when there is one; else (delta > 0) the smaller of the RDP and the
        (pessimistic) PLD epsilon of that event alone at ``delta``."""
        found = event_guarantee(event, delta)
        if found is not None or delta is None or delta <= 0:
            return found
        if isinstance(event, de.SampledWithoutReplacementDpEvent):
            event = without_replacement_bound(event)
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

    def _compose(self, event: de.DpEvent) -> None:
        pass  # the base class keeps the sums

    def _epsilon(self, delta: float) -> float:
        return math.inf  # the base class reports the basic bound

    def _delta(self, epsilon: float) -> float:
        return 1.0
