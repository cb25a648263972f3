"""Vertical federated learning: private sample alignment, vertical linear and logistic
regression (Paillier, FATE-style, or secret sharing), split learning, transfer learning.

* :mod:`veil.fl.vertical.align` — ECDH-PSI alignment of id columns (two or more parties);
* :mod:`veil.fl.vertical.paillier_lr` — the sans-I/O guest, hosts and arbiter of the
  Paillier protocol (Hardy et al. 2017), with an arbiter or threshold decryption;
* :mod:`veil.fl.vertical.linear` — ``VerticalLogisticRegression`` /
  ``VerticalLinearRegression`` (``protocol="paillier"`` or ``"ss"``) and local runners;
* :mod:`veil.fl.vertical.gradient_noise` — DP for the secret-shared logistic regression
  (noisy gradients, every party's ledger charged);
* :mod:`veil.fl.vertical.secure_ftl` — secure federated transfer learning (Liu et al.
  2018, Paillier); :mod:`veil.fl.vertical.secure_ftl_ss` — the same on secret shares
  (Beaver triples from a dealer or from Paillier), with MLP representations;
* :mod:`veil.fl.vertical.split` — split learning (PyTorch) with label DP and embedding
  noise (:mod:`veil.fl.vertical.label_dp`);
* :mod:`veil.fl.vertical.transfer` — federated transfer learning by distillation (PATE-style
  noisy soft labels optional) and federated fine-tuning;
* :mod:`veil.fl.vertical.parties` — :class:`VerticalSettings` (what the parties agree on)
  and :class:`VerticalParty`, one organisation's side when each holds its own node
  (the Flower runtime: :mod:`veil.fl.runtime.flower_vertical`);
* :mod:`veil.fl.vertical.data` — FATE's tables, Adult split by attributes, the checks of a
  set of party tables.

A whole run from a configuration file (``veil fl run CONFIG.toml`` with a ``[vertical]`` or
``[transfer]`` section) is :mod:`veil.experiments.vertical_run`.

The PyTorch parts are imported lazily (``from veil.fl.vertical.split import SplitNN``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:   # exported lazily (veil._lazy): a vertical node's process imports what it uses
    from veil.fl.vertical.align import AlignGuest, AlignHost, Alignment, align, read_ids
    from veil.fl.vertical.linear import (
        VerticalLinearRegression,
        VerticalLogisticRegression,
        train_paillier,
    )
    from veil.fl.vertical.paillier_lr import (
        Arbiter,
        PaillierGuest,
        PaillierHost,
        Plan,
        ShareHolder,
        ThresholdDecryption,
    )

__all__ = ["Alignment", "AlignGuest", "AlignHost", "align", "read_ids", "Arbiter",
           "PaillierGuest", "PaillierHost", "Plan", "ShareHolder", "ThresholdDecryption",
           "VerticalLinearRegression",
           "VerticalLogisticRegression", "train_paillier"]
__getattr__, __dir__ = lazy_exports(__name__, __all__)
