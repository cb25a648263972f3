"""The default ledger policy: a privacy filter over blocks, each priced tightly by PLD.

**Why a filter.** A ledger admits a charge only if the budget still holds with it, and the
next charge may be chosen from what earlier releases returned (its mechanism *and* its
privacy parameters). Composition theorems for fixed parameters (PLD, f-DP: the tight
bound of a sequence fixed in advance) do not cover that: with ``Ledger(1, 1e-3)`` a first
release chosen to steer the second realised delta 1.46e-3 at epsilon 1 under plain PLD
accounting. A *privacy filter* is a stopping rule that keeps the budget under fully
adaptive choice (Rogers, Roth, Ullman & Vadhan 2016).

**The policy.** Every charge is a *block* with a guarantee ``(eps_b, delta_b)`` that holds
for it whatever came before, and blocks compose by basic composition: the ledger admits
block ``k`` only if ``sum_b eps_b <= epsilon`` and ``sum_b delta_b <= delta``. Basic
composition is a valid filter when each ``(eps_b, delta_b)`` is chosen adaptively
(Rogers et al. 2016, Thm. 3.6 and its discussion), and it is exact for pure-DP releases.
Inside a block the privacy parameters are fixed before it starts, so its cost may be
priced by the tightest bound for a fixed sequence: ``eps_b`` is the smallest of the PLD
epsilon (Koskela et al.; dp_accounting's ``PLDAccountant``, pessimistic discretisation),
the RDP epsilon and any closed form (pure-DP epsilon; the exact Gaussian epsilon, Balle &
Wang 2018) at ``delta_b``, each a valid bound for the block, so the smallest is one too.

A block is either one release / ``Ledger.charge`` of an event (an adaptively chosen
release) or a *planned schedule* (``Ledger.plan``: a DP-SGD run, the rounds of a
federation): the whole schedule is one block whose steps are fixed before its first step,
so a planned DP-SGD run costs what PLD says for the run, not the sum of its steps.

**delta_b, one convention.** A block's ``delta_b`` is the delta its noise was calibrated
for: ``delta=`` of ``Ledger.charge`` / ``Ledger.plan``, a mechanism's own ``.delta`` for
``Ledger.release``; a pure-DP block has ``delta_b = 0``. A non-pure block given no delta
takes all the delta the ledger (and each ancestor) has left, so the first uncalibrated
Gaussian charge uses the whole remaining delta; pass ``delta=`` to leave room for more.
(Choosing ``delta_b`` from the history is allowed: the filter's parameters may be adaptive.)
"""

from __future__ import annotations

import math

from dp_accounting import dp_event as de

from veil.dp.accounting.basic import BasicAccountant
from veil.dp.accounting.guarantees import pure_epsilon

__all__ = ["PLDFilter"]


class PLDFilter(BasicAccountant):
    """Basic composition of blocks, each priced by PLD / RDP / closed forms at its delta_b
    (the module docstring); a non-pure block without a delta > 0 cannot be (eps, 0)-DP and
    costs infinity."""

    name = "pld"
    _needs_guarantees = False

    def guarantee(self, event: de.DpEvent, delta: float | None) -> tuple[float, float] | None:
        if pure_epsilon(event) is None and not delta:
            return math.inf, 0.0
        return super().guarantee(event, delta)

    def reserved_delta(self) -> float:
        """The sum of the blocks' delta_b so far."""
        return self._sums.delta if self._sums is not None else 0.0
