"""A party's own privacy budget over the rounds of a run.

Where the clients add the noise (distributed noise under SecAgg, the hybrid approach), the
guarantee is meant to hold against the server, so no party may rely on the server's ledger:
each keeps its own :class:`veil.dp.Ledger` and charges its release there, on its own
machine, before the noisy value leaves it.

:class:`RoundLedger` charges the rounds of one run the way
:class:`veil.fl.federation.Federation` charges the server's ledger, so a party that takes part
in every round ends with the server's spend: when the round's event is fixed by the
configuration, the first charge reserves the remaining rounds of the party's own plan as one
block (:meth:`veil.dp.Ledger.longest_plan`, priced by the ledger's policy as one schedule) and
each round is a step of it; otherwise (or past the block) a round is charged on its own, at an
equal share of the ledger's delta over the remaining rounds. Each round is charged at most
once, however often a stage is asked again. A charge the budget cannot pay raises
:class:`~veil.errors.BudgetExceededError` before anything is recorded: the party drops out of
the round.

A party shipped to another process (worker processes, a Flower node that pickles its party
between messages) takes its budget along (:func:`ledger_state`): a persisted ledger as its
file name, reopened there (the file stays the one record), an unspent in-memory ledger as its
budget; a spent in-memory ledger cannot move (it would be spent twice).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from veil._validation import check_int
from veil.errors import BudgetExceededError, ConfigError

if TYPE_CHECKING:   # veil.dp.ledger (dp_accounting, scipy) loads when a ledger is used
    import dp_accounting

    from veil.dp.ledger import Block, Ledger

__all__ = ["RoundLedger", "ledger_from_state", "ledger_state"]

log = logging.getLogger(__name__)


def ledger_state(ledger: Ledger | None, block: Block | None | bool, who: str) -> Any:
    """What of ``ledger`` and its planned ``block`` travels to another process (module
    docstring): the ledger's file name or budget, and the block's index."""
    if ledger is None:
        return None, block
    if ledger.path is not None:
        budget = ledger.path
    elif ledger.history():
        raise ConfigError(f"{who}: a spent in-memory ledger cannot move to another process "
                          "(persist it: Ledger(path=...))")
    else:
        budget = ledger.epsilon, ledger.delta, ledger.accountant
    return budget, block.index if block else block


def ledger_from_state(state: Any) -> tuple[Ledger | None, Block | None | bool]:
    """The ledger and block :func:`ledger_state` sent (the ledger reopened from its file,
    or rebuilt; the block found in it)."""
    budget, block = state
    if budget is None:
        return None, block
    from veil.dp.ledger import Ledger

    ledger = Ledger.open(budget) if isinstance(budget, str) else \
        Ledger(budget[0], budget[1], accountant=budget[2])
    if isinstance(block, int) and not isinstance(block, bool):
        block = ledger.block(block)
    return ledger, block


class RoundLedger:
    """The rounds ``0..rounds-1`` of one run charged to ``ledger`` (module docstring): a
    party's own, or the server's (:class:`veil.fl.federation.Federation` uses it too).
    ``fixed``: the round's event is the same every round (its plan says so), so the rounds
    are reserved as one block; ``who`` names the party in labels (none for the server);
    ``suffix`` ends every label (a simulation says so)."""

    def __init__(self, ledger: Ledger, rounds: int, *, fixed: bool, who: str | None = None,
                 suffix: str = "") -> None:
        from veil.dp.ledger import check_ledger

        self.ledger = check_ledger(ledger)
        self.rounds = check_int(rounds, "rounds", low=1)
        self.fixed = bool(fixed)
        self.who = who
        self.suffix = suffix
        self._block: Block | None | bool = None   # False: rounds are charged alone
        self.round_delta: float | None = None     # a round charged alone: its delta_b
        self._last = -1                           # the last round charged by charge()

    def label(self, text: str) -> str:
        return (f"{self.who}: " if self.who else "") + text + self.suffix

    @property
    def block_index(self) -> int | None:
        """The charge number of the run's planned block (None before or without one)."""
        return self._block.index if self._block else None

    def attach(self, index: int) -> None:
        """Go on charging the planned block recorded as charge ``index`` (a resumed run)."""
        self._block = self.ledger.block(index)

    def planned(self, event: dp_accounting.DpEvent) -> bool:
        """Whether ``event`` is the planned block's next step."""
        return bool(self._block) and self._block.fits(event)

    def check(self, t: int, event: dp_accounting.DpEvent) -> None:
        """Before round ``t`` runs: open the plan of the remaining rounds at the first
        round when the event is fixed; BudgetExceededError (nothing charged) when the round
        fits neither the plan nor the ledger on its own."""
        if self._block is None and self.fixed:
            block = self.ledger.longest_plan(event, steps=self.rounds - t,
                                             label=self.label(f"fl rounds from {t}"))
            if not block or len(block.steps) < self.rounds - t:
                log.warning("%sthe budget holds %d of the %d remaining rounds",
                            f"{self.who}: " if self.who else "",
                            len(block.steps) if block else 0, self.rounds - t)
            self._block = block or False
        if self.planned(event):
            return
        if self.round_delta is None:   # rounds alone share the ledger's delta equally
            self.round_delta = self.ledger.delta / (self.rounds - t)
        if not self.ledger.fits(event, delta=self.round_delta):
            raise BudgetExceededError(
                f"{self.label(f'fl round {t}')} would bring the ledger to epsilon="
                f"{self.ledger.would_spend(event, delta=self.round_delta):.6g}, over its "
                f"budget epsilon={self.ledger.epsilon:g}; the round was not run and nothing "
                "was charged")

    def pay(self, event: dp_accounting.DpEvent, label: str) -> None:
        """Charge one round: a step of the plan when it is the plan's next, else alone."""
        if self.planned(event):
            self._block.charge(event, label=label)
        else:
            self.ledger.charge(event, label=label, delta=self.round_delta)

    def charge(self, server_round: int, event: dp_accounting.DpEvent) -> None:
        """Check and charge round ``server_round`` (once; nothing if already charged)."""
        t = server_round
        if t <= self._last:
            return
        if t >= self.rounds:
            raise ConfigError(f"{self.who}: round {t} is outside its own plan of {self.rounds} "
                              "rounds: refused, nothing charged")
        self.check(t, event)
        self.pay(event, self.label(f"fl round {t}"))
        self._last = t

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["ledger"] = ledger_state(self.ledger, self._block, self.who)
        del state["_block"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ledger, self._block = ledger_from_state(state["ledger"])
