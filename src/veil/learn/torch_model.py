"""An adapter that gives a torch ``nn.Module`` the interface of veil's linear models.

``TorchModel(module)`` wraps a module mapping a float batch of shape (n, d) to logits of
shape (n, k) (k >= 2 classes, two outputs for a binary task) and trains it with the
cross-entropy loss ``l = logsumexp(s) - s_y``. Parameters travel as one flat float64 vector
(all ``module.parameters()`` in order, as ``torch.nn.utils.parameters_to_vector``), and
per-example gradients are computed with ``torch.func`` (``vmap`` of ``grad`` over the
batch), so federated learning and differentially private training treat a network exactly
like a linear model. The L2 penalty ``(alpha/2) ||w||^2`` covers every parameter.

PyTorch is an optional dependency (``pip install 'veil[torch]'``); it is imported only when
a TorchModel is used.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from veil._optional import require
from veil._validation import check_array, check_int
from veil.errors import ConfigError, DataError
from veil.learn.base import GradientClassifier, sgd
from veil.random import RngLike

__all__ = ["TorchModel"]


def _torch() -> Any:
    return require("torch", "torch", "TorchModel")


class TorchModel(GradientClassifier):
    """A torch classifier with scikit-learn's API and veil's flat-parameter interface.

    ``module`` is copied at :meth:`initialize` (the fitted network is ``module_``); the one
    passed in is never modified. ``fit`` runs ``max_iter`` epochs of mini-batch SGD.
    """

    def __init__(self, module: Any, *, alpha: float = 0.0, learning_rate: float = 0.1,
                 max_iter: int = 10, batch_size: int | None = 64, warm_start: bool = False,
                 rng: RngLike = None) -> None:
        self.module = module
        self.alpha = alpha
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.rng = rng

    # -- parameters -----------------------------------------------------------------
    def _init_params(self, n_features: int, n_classes: int) -> None:
        torch = _torch()
        if not isinstance(self.module, torch.nn.Module):
            raise ConfigError(f"module={type(self.module).__name__} is not allowed: "
                              "expected a torch.nn.Module")
        module = copy.deepcopy(self.module)
        params = list(module.parameters())
        if not params:
            raise ConfigError("module has no parameters to train")
        self._dtype = params[0].dtype
        with torch.no_grad():
            out = module(torch.zeros(1, n_features, dtype=self._dtype))
        if out.ndim != 2 or out.shape[1] != n_classes:
            raise ConfigError(f"module maps {n_features} features to outputs of shape "
                              f"{tuple(out.shape)}; expected (batch, {n_classes}) logits, "
                              "one per class")
        self.module_ = module

    def get_params_vector(self) -> np.ndarray:
        self._check_initialized()
        torch = _torch()
        vec = torch.nn.utils.parameters_to_vector(self.module_.parameters())
        return vec.detach().to(torch.float64).numpy().copy()

    def set_params_vector(self, vector: Any) -> TorchModel:
        self._check_initialized()
        torch = _torch()
        v = check_array(vector, "vector", ndim=1)
        n = sum(p.numel() for p in self.module_.parameters())
        if v.size != n:
            raise DataError(f"vector has {v.size} entries; this module has {n} parameters")
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.from_numpy(v).to(self._dtype),
                                                self.module_.parameters())
        return self

    def _regularized(self) -> np.ndarray:
        return np.ones(self.n_params_, dtype=bool)

    # -- scores, losses, gradients ----------------------------------------------------
    def _tensor(self, X: np.ndarray) -> Any:
        return _torch().from_numpy(np.ascontiguousarray(X)).to(self._dtype)

    def _logits(self, X: np.ndarray) -> Any:
        torch = _torch()
        with torch.no_grad():
            return self.module_(self._tensor(X))

    def decision_function(self, X: Any) -> np.ndarray:
        return self._logits(self._check_X(X)).to(_torch().float64).numpy()

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (softmax of the logits), shape (n, k)."""
        torch = _torch()
        return torch.softmax(self._logits(self._check_X(X)).to(torch.float64), 1).numpy()

    def _losses(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        torch = _torch()
        target = torch.from_numpy(codes.astype(np.int64))
        losses = torch.nn.functional.cross_entropy(self._logits(X), target, reduction="none")
        return losses.to(torch.float64).numpy()

    def _mean_gradient(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        torch = _torch()
        params = list(self.module_.parameters())
        loss = torch.nn.functional.cross_entropy(self.module_(self._tensor(X)),
                                                 torch.from_numpy(codes.astype(np.int64)))
        grads = torch.autograd.grad(loss, params)
        return torch.cat([g.reshape(-1) for g in grads]).to(torch.float64).numpy()

    def per_example_gradients(self, X: Any, y: Any) -> np.ndarray:
        X, codes = self._xy(X, y)
        torch = _torch()
        from torch.func import functional_call, grad, vmap

        names = [name for name, _ in self.module_.named_parameters()]
        values = tuple(p.detach() for _, p in self.module_.named_parameters())

        def example_loss(params: tuple, x: Any, t: Any) -> Any:
            logits = functional_call(self.module_, dict(zip(names, params)), (x[None],))
            return torch.nn.functional.cross_entropy(logits, t[None])

        per_example = vmap(grad(example_loss), in_dims=(None, 0, 0))(
            values, self._tensor(X), torch.from_numpy(codes.astype(np.int64)))
        flat = [g.reshape(X.shape[0], -1) for g in per_example]
        return torch.cat(flat, dim=1).to(torch.float64).numpy()

    # -- fitting ----------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> TorchModel:
        """``max_iter`` epochs of mini-batch SGD on the cross-entropy (+ L2) objective."""
        X, codes = self._prepare_fit(X, y)
        return sgd(self, X, self.classes_[codes],
                   epochs=check_int(self.max_iter, "max_iter", low=1),
                   learning_rate=self.learning_rate, batch_size=self.batch_size, rng=self.rng)
