"""The local update rules of vertical models: each party applies one to its own weights.

* ``sgd``: ``w <- w - lr g``;
* ``rmsprop`` (Tieleman & Hinton 2012, as in PyTorch's RMSprop with alpha = 0.99,
  eps = 1e-8): ``v <- 0.99 v + 0.01 g^2``, ``w <- w - lr g / (sqrt(v) + eps)``.
"""

from __future__ import annotations

import numpy as np

from veil._validation import check_choice, check_positive

__all__ = ["OPTIMIZERS", "Optimizer"]

OPTIMIZERS = ("sgd", "rmsprop")
_RHO = 0.99
_EPS = 1e-8


class Optimizer:
    """One party's update rule for a weight vector of ``size`` entries."""

    def __init__(self, kind: str, learning_rate: float, size: int) -> None:
        self.kind = check_choice(kind, "optimizer", OPTIMIZERS)
        self.learning_rate = check_positive(learning_rate, "learning_rate")
        self._v = np.zeros(size)

    def step(self, w: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """The updated weights (a new array)."""
        if self.kind == "sgd":
            return w - self.learning_rate * grad
        self._v = _RHO * self._v + (1.0 - _RHO) * grad * grad
        return w - self.learning_rate * grad / (np.sqrt(self._v) + _EPS)
