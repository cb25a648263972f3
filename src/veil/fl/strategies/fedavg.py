"""Federated averaging (McMahan, Moore, Ramage, Hampson & Aguera y Arcas, AISTATS 2017).

In round t the server samples ``m = max(min_clients, round(fraction * N))`` of the N
clients uniformly without replacement and sends them the global parameters ``w_t``. Client
k runs ``local_epochs`` epochs of SGD on its ``n_k`` examples from ``w_t`` and returns
``delta_k = w_k - w_t``. The server averages the deltas of the clients that answered with
weights ``n_k / n`` (``n`` the sum of their ``n_k``) and steps

    w_{t+1} = w_t + eta_s * sum_k (n_k / n) delta_k        (eta_s = server_learning_rate).

With one full-batch local step of rate eta and eta_s = 1 this is exactly centralized
gradient descent on the union of the clients' data: ``sum_k (n_k/n) grad F_k = grad F``.

``weighted=False`` gives every client weight 1. ``max_weight`` caps the weights at a
public bound and rescales them into [0, 1] (``w_k = min(n_k, max_weight) / max_weight``),
which secure aggregation needs: it sums the weights as bounded fixed-point numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from veil._validation import check_int, check_positive, check_probability
from veil.errors import ProtocolError
from veil.fl.protocol import Aggregate, ClientUpdate
from veil.fl.strategies.base import UpdateStrategy, config_value
from veil.fl.trainer import LocalTrainer
from veil.random import Generator

__all__ = ["FedAvg"]


class FedAvg(UpdateStrategy):
    """Federated averaging with client sampling (see the module docstring).

    Parameters
    ----------
    fraction: share of the clients sampled each round (at least ``min_clients``).
    min_clients: fewest updates a round needs to complete.
    local_epochs, learning_rate, batch_size: local SGD (batch_size None: full batch).
    server_learning_rate: eta_s.
    weighted, max_weight: aggregation weights (see the module docstring).
    """

    def __init__(self, *, fraction: float = 1.0, min_clients: int = 1, local_epochs: int = 1,
                 learning_rate: float = 0.1, batch_size: int | None = None,
                 server_learning_rate: float = 1.0, weighted: bool = True,
                 max_weight: float | None = None) -> None:
        self.fraction = check_probability(fraction, "fraction", low_open=True)
        self.min_clients = check_int(min_clients, "min_clients", low=1)
        self.local_epochs = check_int(local_epochs, "local_epochs", low=0)
        self.learning_rate = check_positive(learning_rate, "learning_rate")
        self.batch_size = None if batch_size is None else check_int(batch_size, "batch_size",
                                                                    low=1)
        self.server_learning_rate = check_positive(server_learning_rate,
                                                   "server_learning_rate")
        self.weighted = bool(weighted)
        self.max_weight = None if max_weight is None else check_positive(max_weight,
                                                                         "max_weight")

    # -- server side ---------------------------------------------------------------------
    def sample(self, server_round: int, clients: Sequence[int], rng: Generator) -> list[int]:
        pool = np.asarray(sorted(clients), dtype=np.int64)
        m = min(pool.size, max(self.min_clients, round_half_up(self.fraction * pool.size)))
        if m == pool.size:
            return pool.tolist()
        return sorted(rng.choice(pool, size=m, replace=False).tolist())

    def client_config(self, server_round: int) -> dict[str, Any]:
        return {"epochs": self.local_epochs, "learning_rate": self.learning_rate,
                "batch_size": self.batch_size or 0}

    def aggregate(self, server_round: int, params: np.ndarray, total: Aggregate,
                  rng: Generator) -> np.ndarray:
        if not total.weight > 0:
            raise ProtocolError(f"round {server_round}: the aggregated weights sum to "
                                f"{total.weight}; nothing to average")
        return params + self.server_learning_rate * total.total / total.weight

    def weight_bound(self) -> float:
        if not self.weighted:
            return 1.0
        return math.inf if self.max_weight is None else 1.0

    # -- client side ---------------------------------------------------------------------
    def client_update(self, trainer: LocalTrainer, params: np.ndarray,
                      config: Mapping[str, Any], rng: Generator) -> ClientUpdate:
        new = trainer.train(params, penalty=self._penalty(params, config), rng=rng,
                            **self._local_sgd(config))
        return ClientUpdate(new - params, self._weight(trainer.n_examples))

    def _local_sgd(self, config: Mapping[str, Any]) -> dict[str, Any]:
        batch = config_value(config, "batch_size", int, low=0)
        return {"epochs": config_value(config, "epochs", int, low=0),
                "learning_rate": config_value(config, "learning_rate", (int, float),
                                              low=0.0),
                "batch_size": batch or None}

    def _penalty(self, params: np.ndarray, config: Mapping[str, Any]):
        return None

    def _weight(self, n: int) -> float:
        if not self.weighted:
            return 1.0
        if self.max_weight is None:
            return float(n)
        return min(n, self.max_weight) / self.max_weight


def round_half_up(x: float) -> int:
    """Nearest integer, halves rounded up (Python's round() rounds halves to even)."""
    return int(math.floor(x + 0.5))
