"""The one place ``veil.learn.dpsgd`` imports PyTorch (the ``torch`` extra).

Importing any torch-backed module of this package without PyTorch installed raises
:class:`~veil.errors.MissingDependencyError` with the install command, not a bare
``ModuleNotFoundError``.
"""

from __future__ import annotations

from veil._optional import require

torch = require("torch", "torch", "veil.learn.dpsgd")
nn = torch.nn
F = torch.nn.functional

__all__ = ["torch", "nn", "F"]
