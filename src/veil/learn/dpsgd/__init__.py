"""DP-SGD for PyTorch models (the ``torch`` extra).

Differentially private stochastic gradient descent (Abadi, Chu, Goodfellow, McMahan,
Mironov, Talwar & Zhang, CCS 2016): each step samples a batch with probability ``q`` per
example (Poisson sampling), clips every example's gradient to L2 norm ``C``, sums, adds
Gaussian noise ``N(0, sigma^2 C^2 I)`` and divides by the expected batch size ``qN``. The
privacy of the whole schedule is that of ``steps`` compositions of the Poisson-subsampled
Gaussian mechanism, which the :class:`~veil.dp.Ledger` accounts (RDP or PLD).

Entry point::

    from veil.dp import PrivacyBudget
    from veil.learn.dpsgd import make_private
    model, optimizer, loader = make_private(model, optimizer, (X, y),
                                            budget=PrivacyBudget(3.0, 1e-5),
                                            max_grad_norm=1.0, epochs=10, batch_size=256)

Also: :func:`clipped_grad_sum` (the clipped per-example gradient sum without noise) and
:class:`PerExampleGradients` (per-example norms). Importing this package does not import
torch; using one of its names without torch installed raises
:class:`~veil.errors.MissingDependencyError`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "make_private": "veil.learn.dpsgd.privacy",
    "EstimatedSize": "veil.learn.dpsgd.size",
    "PrivacyPlan": "veil.learn.dpsgd.privacy",
    "PrivateModel": "veil.learn.dpsgd.privacy",
    "PrivateOptimizer": "veil.learn.dpsgd.optimizer",
    "PrivateLoader": "veil.learn.dpsgd.loader",
    "PerExampleGradients": "veil.learn.dpsgd.engine",
    "ClippedGradSum": "veil.learn.dpsgd.engine",
    "clipped_grad_sum": "veil.learn.dpsgd.engine",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'veil.learn.dpsgd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
