"""Canary clients: clients whose update an auditor crafts, to audit a real federated run.

A :class:`CanaryClient` wraps the client the strategy itself builds around a
:class:`CanaryTrainer` that sends ``(-1)^t * update`` in round t (the zero update for an
excluded canary), so it is sampled, clipped, noised, masked and charged exactly like any
client. Drawing the canaries, adding them to a federation and the one-run audit that
follows (Steinke, Nasr & Jagielski 2023) belong to the application layer:
:mod:`veil.experiments.canary_audit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from veil._validation import check_array, check_int
from veil.errors import DataError
from veil.fl.messages import Message
from veil.fl.protocol import ClientProtocol
from veil.random import Generator, RngLike

__all__ = ["CanaryClient", "CanaryTrainer", "sign"]


def sign(server_round: int) -> float:
    """(-1)^round: the sign of a canary's push in ``server_round``."""
    return -1.0 if server_round % 2 else 1.0


class CanaryTrainer:
    """The local "training" of a canary client: no data; from the global parameters of
    round t it returns them moved by ``(-1)^t * update`` (``update`` is zero for an
    excluded canary).

    It has what the strategies read of a :class:`~veil.fl.trainer.LocalTrainer`: ``model``,
    ``n_params`` (the parameter count), ``n_examples`` (its FedAvg weight) and :meth:`train`;
    :class:`CanaryClient` sets ``server_round`` before each request is handled.
    """

    def __init__(self, model: Any, update: np.ndarray, n_examples: int) -> None:
        self.model = model
        self.update = check_array(update, "update", ndim=1)
        if self.update.size != model.n_params_:
            raise DataError(f"update has {self.update.size} entries; the model has "
                            f"{model.n_params_} parameters")
        self.n_params = int(model.n_params_)
        self.n_examples = check_int(n_examples, "n_examples", low=1)
        self.round = 0

    def train(self, params: np.ndarray, *, epochs: int, learning_rate: float,
              batch_size: int | None, rng: RngLike,
              penalty: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """``params + (-1)^round * update``, whatever the training settings."""
        return params + sign(self.round) * self.update


class CanaryClient(ClientProtocol):
    """A canary client: the strategy's own client protocol around a :class:`CanaryTrainer`
    (so clipping, local noise and masking apply as to any client), told the round of each
    request it handles."""

    def __init__(self, client_id: int, strategy: Any, trainer: CanaryTrainer) -> None:
        super().__init__(client_id)
        self.trainer = trainer
        self.inner = strategy.client(client_id, trainer)
        self.protocol = self.inner.protocol  # type: ignore[misc]
        self.stages = self.inner.stages  # type: ignore[misc]

    def handle(self, msg: Message, rng: Generator) -> list[Message]:
        self.trainer.round = msg.round  # a stale request is refused before any training
        return self.inner.handle(msg, rng)
