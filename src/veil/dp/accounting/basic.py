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
from veil.dp.accounting.guarantees import (
    event_guarantee,
    gaussian_noise_multiplier,
)
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
        """Without a delta > 0, or for a tree of Gaussians, the exact closed form (pure
        epsilon; the Gaussian's exact epsilon). Otherwise the smallest of the closed form
        (``(eps, 0)`` for pure DP, amplification by sampling), the (pessimistic) PLD and the
        RDP epsilon of that event alone at ``delta``: each is a valid guarantee of the event,
        so the one with the smallest epsilon is too (a tie keeps the smaller delta)."""
        found = event_guarantee(event, delta)
        if delta is None or delta <= 0 or gaussian_noise_multiplier(event) is not None:
            return found
        if isinstance(event, de.SampledWithoutReplacementDpEvent):
            event = without_replacement_bound(event)
        bounds = [] if found is None else [found]
        for single in (PLDAccountant(), RDPAccountant()):
            try:
                single.compose(event)
            except ConfigError:
                continue
            bounds.append((single.get_epsilon(delta), delta))
        if not bounds:
            raise ConfigError(f"{describe(event)} is not supported by any accountant")
        return min(bounds)

    def _compose(self, event: de.DpEvent) -> None:
        pass  # the base class keeps the sums

    def _epsilon(self, delta: float) -> float:
        return math.inf  # the base class reports the basic bound

    def _delta(self, epsilon: float) -> float:
        return 1.0
