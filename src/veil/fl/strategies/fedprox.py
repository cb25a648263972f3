"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar & Smith, MLSys 2020).

FedAvg whose clients minimise a proximal objective that keeps them near the global model,

    h_k(w) = F_k(w) + (mu / 2) ||w - w_t||^2,     grad h_k(w) = grad F_k(w) + mu (w - w_t),

which stabilises training when the clients' data are heterogeneous (non-IID) or their
amounts of local work differ. Aggregation and sampling are FedAvg's; ``mu = 0`` is FedAvg.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from veil._validation import check_positive
from veil.fl.strategies.base import config_value
from veil.fl.strategies.fedavg import FedAvg

__all__ = ["FedProx"]


class FedProx(FedAvg):
    """FedAvg with the proximal term ``(mu/2) ||w - w_t||^2`` in every local objective.

    Takes FedAvg's parameters and ``mu`` (>= 0).
    """

    def __init__(self, *, mu: float = 0.01, **fedavg: Any) -> None:
        super().__init__(**fedavg)
        self.mu = check_positive(mu, "mu", allow_zero=True)

    def client_config(self, server_round: int) -> dict[str, Any]:
        return {**super().client_config(server_round), "mu": self.mu}

    def _penalty(self, params: np.ndarray, config: Mapping[str, Any]):
        mu = float(config_value(config, "mu", (int, float), low=0.0))
        anchor = params.copy()
        return (lambda w: mu * (w - anchor)) if mu > 0 else None
