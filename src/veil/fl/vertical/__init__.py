"""Vertical federated learning: private sample alignment, vertical linear and logistic
regression (Paillier, FATE-style, or secret sharing), split learning, transfer learning.

* :mod:`veil.fl.vertical.align` — ECDH-PSI alignment of id columns (two or more parties);
* :mod:`veil.fl.vertical.paillier_lr` — the sans-I/O guest, hosts and arbiter of the
  Paillier protocol (Hardy et al. 2017);
* :mod:`veil.fl.vertical.linear` — ``VerticalLogisticRegression`` /
  ``VerticalLinearRegression`` (``protocol="paillier"`` or ``"ss"``) and local runners.
"""

from veil.fl.vertical.align import AlignGuest, AlignHost, Alignment, align, read_ids
from veil.fl.vertical.linear import (
    VerticalLinearRegression,
    VerticalLogisticRegression,
    train_paillier,
)
from veil.fl.vertical.paillier_lr import Arbiter, PaillierGuest, PaillierHost, Plan

__all__ = ["Alignment", "AlignGuest", "AlignHost", "align", "read_ids", "Arbiter",
           "PaillierGuest", "PaillierHost", "Plan", "VerticalLinearRegression",
           "VerticalLogisticRegression", "train_paillier"]
