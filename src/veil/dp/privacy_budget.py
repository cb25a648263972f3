"""One privacy budget, given once, to what calibrates and to what charges.

``PrivacyBudget(epsilon, delta, accountant)`` is the (epsilon, delta) a whole run may
spend and the accounting that certifies it (a policy of :data:`veil.dp.accounting.POLICIES`).
The same object goes to what calibrates the noise (:meth:`veil.fl.strategies.DPFedAvg.from_budget`,
:class:`veil.fl.strategies.Hybrid`, :func:`veil.learn.dpsgd.make_private`) and to the ledger
that caps the spend (:meth:`veil.dp.Ledger.for_budget`), so the two cannot disagree: a
sigma calibrated for ``budget`` composes, under ``budget.accountant``, to at most
``budget.epsilon`` at ``budget.delta``, which is exactly what the ledger admits. Where a
calibrated object meets a ledger (``Federation(ledger=...)``, ``make_private(ledger=...)``)
a ledger holding another budget is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veil._validation import check_delta, check_epsilon
from veil.dp.accounting.defaults import DEFAULT_ACCOUNTANT
from veil.errors import ConfigError

__all__ = ["PrivacyBudget", "check_budget", "same_budget"]


@dataclass(frozen=True)
class PrivacyBudget:
    """An (epsilon, delta) budget and the accountant (ledger policy) that certifies it.

    Validated once, here: epsilon > 0, delta in [0, 1), accountant one of
    :data:`veil.dp.accounting.POLICIES` ("pld", default; "rdp", "basic", "advanced",
    "pld-nonadaptive").
    """

    epsilon: float
    delta: float = 0.0
    accountant: str = DEFAULT_ACCOUNTANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", check_delta(self.delta))
        from veil.dp.accounting.registry import make_policy  # lazy: dp_accounting, scipy

        make_policy(self.accountant, self.delta)  # ConfigError naming the policies

    def __str__(self) -> str:
        return f"epsilon={self.epsilon:g}, delta={self.delta:g}, accountant={self.accountant!r}"


def check_budget(budget: Any, name: str = "budget") -> PrivacyBudget:
    """``budget`` if it is a :class:`PrivacyBudget`, else ConfigError naming it."""
    if not isinstance(budget, PrivacyBudget):
        raise ConfigError(f"{name}={budget!r} is not allowed: expected a "
                          "veil.dp.PrivacyBudget(epsilon, delta, accountant)")
    return budget


def same_budget(ledger: Any, budget: PrivacyBudget | None, what: str) -> None:
    """ConfigError unless ``ledger`` caps exactly the ``budget`` that ``what`` was calibrated
    for (nothing to check when either is None): calibration and cap come from one object."""
    if ledger is None or budget is None:
        return
    if ledger.budget != budget:
        raise ConfigError(f"ledger with {ledger.budget} is not allowed: {what} was calibrated "
                          f"for {budget}; build both from one PrivacyBudget "
                          "(Ledger.for_budget(budget, path=...))")
