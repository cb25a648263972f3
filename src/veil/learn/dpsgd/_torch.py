"""The one place ``veil.learn.dpsgd`` imports PyTorch (the ``torch`` extra).

Importing any torch-backed module of this package without PyTorch installed raises
:class:`~veil.errors.MissingDependencyError` with the install command, not a bare
``ModuleNotFoundError``.
"""

from __future__ import annotations

from veil.errors import MissingDependencyError

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only where torch is absent
    raise MissingDependencyError(
        "veil.learn.dpsgd needs PyTorch, which is not installed: "
        "pip install 'veil[torch]'") from exc

__all__ = ["torch", "nn", "F"]
