"""The contract every differentially private mechanism in veil follows.

A mechanism is constructed with its privacy parameters and knows what one release costs
*before* it runs (OpenDP's "privacy map"): :attr:`Mechanism.event` is the
``dp_accounting.DpEvent`` a :class:`~veil.dp.Ledger` composes, and
:attr:`Mechanism.epsilon` / :attr:`Mechanism.delta` the (epsilon, delta) guarantee of a
single release. Noise is drawn only by :meth:`Mechanism._randomize`, which the ledger calls
after it has charged the event (DESIGN.md principle 1: no noisy value leaves without a
charge), and :meth:`Mechanism.check` validates a value before anything is charged, so bad
data costs no budget. Mechanisms are immutable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import dp_accounting

from veil.random import Generator


class Mechanism(ABC):
    """Base class: ``event``, ``epsilon``, ``delta``, ``check(value)`` and
    ``_randomize(value, rng)``."""

    #: the (epsilon, delta)-DP guarantee of one release
    epsilon: float
    delta: float

    @property
    @abstractmethod
    def event(self) -> dp_accounting.DpEvent:
        """The privacy cost of one release, for composition by an accountant."""

    def check(self, value: Any) -> Any:
        """Validate ``value`` (DataError for bad data); the Ledger calls it before charging."""
        return value

    @abstractmethod
    def _randomize(self, value: Any, rng: Generator) -> Any:
        """Draw the noise and return the randomized value (called by the Ledger only)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g}, delta={self.delta:g})"
