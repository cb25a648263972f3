"""Budget allocation: splitting an (epsilon, delta) budget over rounds, queries and levels.

Three ways to split, all usable by federated rounds and by query-based learners (a
strategy asks ``allocation.share(s)`` for the (epsilon_s, delta_s) of its query s):

* **fixed** -- :class:`FixedAllocation`: ``(epsilon/T, delta/T)`` for each of T steps.
* **adaptive** -- :class:`ScheduledAllocation` spends according to progress with weights
  ``w_s`` (``epsilon_s = epsilon w_s / sum w``; a growth rate > 1 gives later rounds, whose
  updates are smaller, more budget: the "noise decay" of Yu, Liu, Pu, Gursoy & Truex 2019);
  :class:`BudgetAwareAllocation` reads a :class:`~veil.dp.Ledger` at each step and gives
  ``what is left / steps left``, so budget that earlier steps did not use is not lost; and
  :func:`noise_decay` calibrates a decaying Gaussian noise schedule
  ``sigma_t = sigma_0 d^t`` (or ``sigma_0 / (1 + d t)``) whose composition under a tight
  accountant meets the budget exactly (for DP-SGD / DP-FedAvg rounds).
* **hierarchical** -- :func:`hierarchical`: child ledgers per level (e.g. per sensitivity
  level of the attributes) with fractions of the parent's budget; a child draws from its
  parent and can never spend more than the parent allows (:meth:`veil.dp.Ledger.child`).

Shares are sized for basic composition (they sum to the budget). A Ledger never reports
more than basic composition of the guarantees it was given, so releasing step s with a
mechanism whose guarantee is ``share(s)`` always fits; a tight accountant (PLD, RDP) may
leave budget over, which :class:`BudgetAwareAllocation` then hands to later steps.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dp_accounting import dp_event as de

from veil._validation import (
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
)
from veil.dp.accounting.calibration import calibrate
from veil.dp.accounting.events import subsampled_gaussian_event
from veil.dp.accounting.registry import DEFAULT_ACCOUNTANT
from veil.dp.ledger import Ledger, check_ledger
from veil.errors import ConfigError

__all__ = ["Allocation", "FixedAllocation", "ScheduledAllocation", "BudgetAwareAllocation",
           "noise_decay", "hierarchical"]


class Allocation(ABC):
    """A split of a budget over ``rounds`` steps: ``share(s)`` is step s's (epsilon, delta)."""

    def __init__(self, epsilon: float, delta: float, rounds: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.rounds = check_int(rounds, "rounds", low=1)

    def _check_step(self, step: int) -> int:
        return check_int(step, "step", low=0, high=self.rounds - 1)

    @abstractmethod
    def share(self, step: int) -> tuple[float, float]:
        """(epsilon_s, delta_s) for step ``step`` (0-based)."""

    def __len__(self) -> int:
        return self.rounds

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return (self.share(s) for s in range(self.rounds))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon:g}, delta={self.delta:g}, "
                f"rounds={self.rounds})")


class FixedAllocation(Allocation):
    """Equal shares: ``(epsilon / rounds, delta / rounds)`` for every step."""

    def share(self, step: int) -> tuple[float, float]:
        self._check_step(step)
        return self.epsilon / self.rounds, self.delta / self.rounds


class ScheduledAllocation(Allocation):
    """Shares proportional to weights: ``epsilon_s = epsilon w_s / sum(w)`` (same for delta).

    Give ``weights`` (one positive number per step), or a geometric ``growth``:
    ``w_s = growth^s`` (growth > 1 spends more in later rounds, < 1 front-loads).
    """

    def __init__(self, epsilon: float, delta: float, rounds: int, *, growth: float = 1.05,
                 weights: Sequence[float] | None = None) -> None:
        super().__init__(epsilon, delta, rounds)
        if weights is None:
            growth = check_positive(growth, "growth")
            w = [growth ** s for s in range(self.rounds)]
        else:
            w = [check_positive(x, f"weights[{i}]") for i, x in enumerate(weights)]
            if len(w) != self.rounds:
                raise ConfigError(f"weights has {len(w)} entries; expected rounds="
                                  f"{self.rounds}")
        total = math.fsum(w)
        if not math.isfinite(total):
            raise ConfigError(f"growth={growth!r} is not allowed: the weights overflow")
        self.weights = tuple(x / total for x in w)

    def share(self, step: int) -> tuple[float, float]:
        w = self.weights[self._check_step(step)]
        return self.epsilon * w, self.delta * w


class BudgetAwareAllocation(Allocation):
    """What the ledger has left, split evenly over the steps left.

    ``share(s) = (epsilon left / (rounds - s), delta / rounds)`` where epsilon left is
    :meth:`Ledger.remaining` now: steps that spent less than their share (skipped
    clients, a tight accountant) leave more to later steps.
    """

    def __init__(self, ledger: Ledger, rounds: int) -> None:
        check_ledger(ledger)
        super().__init__(ledger.epsilon, ledger.delta, rounds)
        self.ledger = ledger

    def share(self, step: int) -> tuple[float, float]:
        left = self.rounds - self._check_step(step)
        return self.ledger.remaining()[0] / left, self.delta / self.rounds


def noise_decay(epsilon: float, delta: float, rounds: int, *, decay: float = 0.99,
                schedule: str = "exponential", sample_rate: float = 1.0,
                steps_per_round: int = 1, accountant: str = DEFAULT_ACCOUNTANT,
                sampling: str = "poisson", dataset_size: int | None = None,
                **options: Any) -> list[float]:
    """Noise multipliers ``sigma_t`` (t = 0..rounds-1) that decay and exactly meet the budget.

    ``schedule="exponential"``: ``sigma_t = sigma_0 decay^t``; ``"time"``:
    ``sigma_t = sigma_0 / (1 + decay t)`` (Yu et al. 2019). Round t runs
    ``steps_per_round`` Gaussian steps on batches sampled at ``sample_rate``; sigma_0 is
    the smallest value (to 0.1%) for which the composition of all rounds is
    (epsilon, delta)-DP under ``accountant`` -- verified by that accountant, built with
    ``options``. Each evaluation prices every round, so long schedules take seconds; RDP
    on integer orders only (``orders=range(2, 257)``, a subset of the default grid, hence
    a schedule that also fits a default RDP ledger) is several times faster. The schedule
    is fixed in advance: charge it as one plan, ``ledger.plan([round events], delta=delta)``
    (:meth:`veil.dp.Ledger.plan`), which the default ledger prices exactly as calibrated.
    """
    rounds = check_int(rounds, "rounds", low=1)
    check_choice(schedule, "schedule", ("exponential", "time"))
    if schedule == "exponential":
        decay = check_probability(decay, "decay", low_open=True)
        factors = [decay ** t for t in range(rounds)]
    else:
        decay = check_positive(decay, "decay", allow_zero=True)
        factors = [1.0 / (1.0 + decay * t) for t in range(rounds)]
    q = check_probability(sample_rate, "sample_rate", low_open=True)
    steps = check_int(steps_per_round, "steps_per_round", low=1)
    if check_delta(delta) == 0:
        raise ConfigError("delta=0 is not allowed for a Gaussian noise schedule: use delta > 0")

    def schedule_event(sigma0: float) -> de.DpEvent:
        return de.ComposedDpEvent([
            subsampled_gaussian_event(sigma0 * f, q, steps, sampling=sampling,
                                      dataset_size=dataset_size) for f in factors])

    sigma0 = calibrate(schedule_event, epsilon, delta, accountant, **options)
    return [sigma0 * f for f in factors]


def hierarchical(ledger: Ledger, levels: Mapping[str, float]) -> dict[str, Ledger]:
    """Child ledgers of ``ledger``, one per level, with fractions of its budget.

    ``levels`` maps a level name to its fraction (> 0, summing to at most 1), e.g.
    ``{"public": 0.1, "quasi": 0.3, "sensitive": 0.6}``: level l may spend
    ``(fraction_l epsilon, fraction_l delta)`` and, since every charge is also checked
    against the parent, all levels together never spend more than the parent's budget.
    """
    check_ledger(ledger)
    if not isinstance(levels, Mapping) or not levels:
        raise ConfigError(f"levels={levels!r} is not allowed: expected a non-empty mapping "
                          "of level name -> fraction")
    fractions = {name: check_probability(f, f"levels[{name!r}]", low_open=True)
                 for name, f in levels.items()}
    total = math.fsum(fractions.values())
    if total > 1.0 + 1e-12:
        raise ConfigError(f"levels={dict(levels)!r} is not allowed: the fractions sum to "
                          f"{total:g} > 1")
    return {name: ledger.child(name, ledger.epsilon * f, ledger.delta * f)
            for name, f in fractions.items()}
