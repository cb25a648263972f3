"""What the two secure federated transfer learning variants share (Liu, Kang, Xing, Chen &
Yang, "A Secure Federated Transfer Learning Framework", IEEE Intelligent Systems 2020,
arXiv:1812.03337): the checks of a party's inputs, its representation network, and the
plaintext twin of the gradients both protocols compute under protection.

The representation network of a party is a tanh MLP (``layers``: hidden widths, ``()`` for
the one-layer network of the paper's experiments)::

    h_0 = x,   h_l = tanh([h_{l-1}, 1] W_l)   (l = 1..L),   u = h_L  (``dim`` outputs)

and its backward pass (a vector-Jacobian product, linear in the incoming G = dL/du)::

    delta_L = G * (1 - u^2),   dL/dW_l = [h_{l-1}, 1]^T delta_l,
    delta_{l-1} = (delta_l W_l[:-1]^T) * (1 - h_{l-1}^2).

The Taylor loss and its gradients with respect to the representations are in
:mod:`veil.fl.vertical.secure_ftl` (eq. 7-10 of the paper); :func:`plain_gradients`
evaluates them in floating point, the twin the tests hold both protocols to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_array, check_int, check_positive
from veil.errors import ConfigError, DataError
from veil.random import check_rng

__all__ = ["FTLParty", "Network", "check_overlap", "signed_labels", "taylor_gradients",
           "plain_gradients", "FTLStats"]


def check_overlap(overlap: Any, rows: int, name: str) -> np.ndarray:
    """Party ``name``'s overlap rows: distinct indices in ``[0, rows)``, at least one."""
    overlap = check_array(overlap, f"overlap of {name!r}", ndim=1).astype(np.int64)
    if overlap.size == 0 or overlap.min() < 0 or overlap.max() >= rows or \
            np.unique(overlap).size != overlap.size:
        raise DataError(f"overlap of {name!r}: distinct row indices in [0, {rows}) are "
                        "needed, at least one")
    return overlap


def signed_labels(y: Any, rows: int) -> np.ndarray:
    """Labels in {0, 1} or {-1, +1} (one per row) as -1.0 / +1.0."""
    y = check_array(y, "y", ndim=1)
    if y.size != rows or not np.all(np.isin(y, (-1, 0, 1))):
        raise DataError(f"y: {rows} labels in {{0, 1}} or {{-1, 1}} needed, got {y.size} "
                        f"values in {sorted(np.unique(y).tolist())[:5]}")
    return np.where(y > 0, 1.0, -1.0)


def _augment(h: np.ndarray) -> np.ndarray:
    return np.hstack([h, np.ones((h.shape[0], 1))])


class Network:
    """A party's tanh MLP (module docstring): ``d_in`` inputs, hidden widths ``layers``,
    ``dim`` outputs; weights ``W_l`` of shape (in + 1, out), the last row the bias, drawn
    N(0, 1 / (in + 1)) with ``rng`` (simulation)."""

    def __init__(self, d_in: int, layers: Sequence[int] = (), dim: int = 8,
                 rng: Any = None) -> None:
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence):
            raise ConfigError(f"layers={layers!r} is not allowed: a list of hidden widths "
                              "(>= 1 each; [] for one layer)")
        widths = [check_int(d_in, "d_in", low=1),
                  *(check_int(w, "layers[]", low=1) for w in layers),
                  check_int(dim, "dim", low=1)]
        rng = check_rng(rng)
        self.weights = [rng.normal(0.0, 1.0 / np.sqrt(a + 1), (a + 1, b))
                        for a, b in zip(widths[:-1], widths[1:])]

    def forward(self, X: np.ndarray) -> list[np.ndarray]:
        """The activations ``[h_0 = X, h_1, ..., h_L = u]``."""
        acts = [X]
        for W in self.weights:
            acts.append(np.tanh(_augment(acts[-1]) @ W))
        return acts

    def backward(self, acts: Sequence[np.ndarray], G: np.ndarray) -> list[np.ndarray]:
        """dL/dW_l for every layer from ``G`` = dL/du on the rows of ``acts``."""
        grads: list[np.ndarray] = [np.empty(0)] * len(self.weights)
        delta = G * (1.0 - acts[-1] ** 2)
        for layer in reversed(range(len(self.weights))):
            grads[layer] = _augment(acts[layer]).T @ delta
            if layer:
                delta = (delta @ self.weights[layer][:-1].T) * (1.0 - acts[layer] ** 2)
        return grads

    def step(self, grads: Sequence[np.ndarray], learning_rate: float, lam: float) -> None:
        """``W <- W - lr (dL/dW + lam W)`` for every layer."""
        for W, g in zip(self.weights, grads):
            W -= learning_rate * (g + lam * W)


class FTLParty:
    """What a party of either variant holds: its features ``X``, its overlap rows (its row
    of each overlapping person, in the aligned order), its network (``layers``, ``dim``,
    weights drawn with ``rng``) and its training settings (``learning_rate``, ``gamma``:
    the alignment weight, ``lam``: L2)."""

    name = "party"

    def __init__(self, X: Any, overlap: Any, *, layers: Sequence[int] = (), dim: int = 8,
                 learning_rate: float = 0.1, gamma: float = 0.1, lam: float = 0.0,
                 rng: Any = None) -> None:
        self._X = check_array(X, f"X of {self.name!r}", ndim=2)
        self.overlap = check_overlap(overlap, self._X.shape[0], self.name)
        self.dim = check_int(dim, "dim", low=1)
        self.learning_rate = check_positive(learning_rate, "learning_rate")
        self.gamma = check_positive(gamma, "gamma", allow_zero=True)
        self.lam = check_positive(lam, "lam", allow_zero=True)
        self.net = Network(self._X.shape[1], layers, self.dim, rng)

    def represent(self, X: Any = None) -> np.ndarray:
        """u = the network's output for ``X`` (this party's rows when None)."""
        X = self._X if X is None else check_array(X, f"X of {self.name!r}", ndim=2)
        if X.shape[1] != self._X.shape[1]:
            raise DataError(f"X of {self.name!r} has {X.shape[1]} columns; the network "
                            f"takes {self._X.shape[1]}")
        return self.net.forward(X)[-1]


def taylor_gradients(y: np.ndarray, uA: np.ndarray, rows: np.ndarray, uB: np.ndarray,
                     gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``|S|`` times dL/du_B,i (i in S), dL/dPhi and the batch term of dL/du_A,i, in
    floating point (:mod:`veil.fl.vertical.secure_ftl`'s formulas): ``y`` A's signed
    labels, ``uA`` all of A's representations, ``rows`` A's rows of the batch, ``uB`` B's
    representations of the same people."""
    phi = (y[:, None] * uA).mean(axis=0)
    gB = -0.5 * y[rows, None] * phi + uB @ np.outer(phi, phi) / 4 + 2 * gamma * (uB - uA[rows])
    dphi = -0.5 * y[rows] @ uB + (uB.T @ uB / 4) @ phi
    return gB, dphi, 2 * gamma * (uA[rows] - uB)


def plain_gradients(source_net: Network, XA: np.ndarray, y: np.ndarray, rows_a: np.ndarray,
                    target_net: Network, XB_batch: np.ndarray, gamma: float
                    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The twin: dL/dW for A's and B's layers on a batch (A's rows ``rows_a``, B's feature
    rows of the same people ``XB_batch``), in floating point."""
    actsA, actsB = source_net.forward(XA), target_net.forward(XB_batch)
    gB, dphi, gA_batch = taylor_gradients(y, actsA[-1], rows_a, actsB[-1], gamma)
    gA = (y / y.size)[:, None] * dphi
    gA[rows_a] += gA_batch
    size = rows_a.size
    return ([g / size for g in source_net.backward(actsA, gA)],
            [g / size for g in target_net.backward(actsB, gB)])


@dataclass
class FTLStats:
    """Per iteration: wall seconds and bytes sent by each party."""

    seconds: list[float] = field(default_factory=list)
    bytes: list[dict[str, int]] = field(default_factory=list)
