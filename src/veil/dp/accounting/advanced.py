"""Advanced composition (Dwork, Rothblum & Vadhan 2010).

For events with guarantees (eps_i, delta_i) and any ``delta' > 0`` the composition is
``(sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1), delta' + sum delta_i)``-DP
(DRV 2010, Thm. III.3, in its heterogeneous form; valid as a privacy filter for adaptively
chosen parameters, Whitehouse, Ramdas, Rogers & Wu 2023). The accountant spends all the
delta left after ``sum delta_i`` on ``delta'`` and reports the smaller of this bound and
basic composition (advanced composition only wins for many small epsilons).
"""

from __future__ import annotations

from veil.dp.accounting.basic import BasicAccountant

__all__ = ["AdvancedAccountant"]


class AdvancedAccountant(BasicAccountant):
    """min(advanced, basic) composition of per-event (epsilon, delta) guarantees."""

    name = "advanced"

    def _epsilon(self, delta: float) -> float:
        return self._sums.advanced(delta) if self._sums is not None else float("inf")

    def _delta(self, epsilon: float) -> float:
        return self._sums.advanced_delta(epsilon) if self._sums is not None else 1.0
