"""What a SecAgg+ round asks of the strategy that plans it: :class:`RoundPlanner`.

The round's stage machines (:mod:`veil.fl.secagg.protocol`) take their planner as a
parameter and use only this interface, so they know nothing of the strategy that
satisfies it (:class:`veil.fl.strategies.SecAgg`, above them: ``fl``'s inside order, core
< sans-I/O protocols < strategies < runtime, ``tests/test_layers.py``). Each party --
server and every client -- holds its own planner, built from its own configuration, and
recomputes the round's :class:`~veil.fl.secagg.ring.Plan` with it rather than trusting the
one it is sent (threat model: :mod:`veil.fl.secagg.protocol`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from veil.fl.protocol import Aggregate, ClientUpdate
from veil.fl.secagg.ring import Plan
from veil.fl.trainer import LocalTrainer
from veil.random import Generator

__all__ = ["RoundPlanner", "RoundPrivacy"]


class RoundPrivacy(Protocol):
    """What a SecAgg+ round reads of its strategy's privacy
    (:class:`veil.fl.strategies.base.Privacy`)."""

    #: every round costs the same (its ledgers charge one planned block)
    fixed_event: bool


class RoundPlanner(Protocol):
    """The planner of SecAgg+ rounds (structural: any object with these members)."""

    #: True: the malicious-server variant (signed keys, the consistency check)
    consistency: bool
    #: the identity table: client id -> its Ed25519 public key (empty without consistency)
    identities: Mapping[int, bytes]

    @property
    def privacy(self) -> RoundPrivacy:
        """What the strategy protects (the round reads ``fixed_event``)."""

    def population(self) -> int | None:
        """N, the size of the identity table (None: the semi-honest variant)."""

    def min_cohort_of(self, population: int | None) -> int:
        """The fewest clients a round may have in a federation of ``population``."""

    def plan(self, server_round: int, params: np.ndarray, sampled: Sequence[int], *,
             clip_range: float | None = None, population: int | None = None) -> Plan:
        """The round's encoding and thresholds, deterministic in its inputs."""

    def run_digest(self, plan: Plan, table: Mapping[int, bytes]) -> bytes:
        """The digest every signature of the round binds (the plan and identity table)."""

    def client_config(self, server_round: int) -> dict[str, Any]:
        """What the clients are told for ``server_round``."""

    def client_update(self, trainer: LocalTrainer, params: np.ndarray,
                      config: Mapping[str, Any], rng: Generator) -> ClientUpdate:
        """A client's update from ``params`` (its local training)."""

    def aggregate(self, server_round: int, params: np.ndarray, total: Aggregate,
                  rng: Generator) -> np.ndarray:
        """The next global parameters from the round's decoded sums."""
