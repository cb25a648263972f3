"""Linear and logistic regression trained and used on secret-shared data.

The data are shared by their owners — rows split between parties (horizontal partition,
:func:`share_rows`) or columns split between parties (vertical partition,
:func:`share_columns`) — and the models are trained by full-batch gradient descent on the
shares; the weights stay shared (``coef_``, ``intercept_`` are SharedTensors), predictions
are shared, and only what the caller reveals is opened::

    w <- w - (learning_rate / n) (X^T (h(X w + b) - y) + alpha n w),   b alike without alpha

with ``h`` the identity (:class:`LinearRegression`, squared loss) or the piecewise-linear
sigmoid of :mod:`veil.mpc.protocols` (:class:`LogisticRegression`, log loss; its gradient
with the approximate sigmoid is that of SecureML, Mohassel & Zhang 2017). Every iteration
costs two matrix products (2 rounds + truncations) and, for the logistic model, one sigmoid
(10 rounds). The same schedule in floating point with
:func:`~veil.mpc.protocols.sigmoid_reference` gives the same weights up to fixed-point
error (checked in the tests to 1e-3 on breast_cancer).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from veil._validation import check_int, check_positive
from veil.errors import DataError
from veil.learn.model_format import register_model_class
from veil.mpc.tensor import SharedTensor, concatenate

__all__ = ["LinearRegression", "LogisticRegression", "RevealedModel", "share_rows",
           "share_columns"]


def _share_parts(session: Any, parts: Sequence[Any], owners: Sequence[int] | None,
                 axis: int) -> SharedTensor:
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    owners = list(range(len(parts))) if owners is None else list(owners)
    if not parts or len(owners) != len(parts):
        raise DataError(f"got {len(parts)} parts and {len(owners)} owners; need one owner "
                        "per (non-empty list of) parts")
    return concatenate([session.share(p, owner=o) for p, o in zip(parts, owners)], axis=axis)


def share_rows(session: Any, parts: Sequence[Any], owners: Sequence[int] | None = None
               ) -> SharedTensor:
    """Horizontally partitioned data: ``parts[k]`` (rows) belongs to party ``owners[k]``
    (default k); returns all rows as one shared matrix (or vector)."""
    return _share_parts(session, parts, owners, axis=0)


def share_columns(session: Any, parts: Sequence[Any], owners: Sequence[int] | None = None
                  ) -> SharedTensor:
    """Vertically partitioned data: ``parts[k]`` (columns of the same, aligned rows)
    belongs to party ``owners[k]``; returns the joined shared matrix."""
    parts = [np.asarray(p, dtype=np.float64) for p in parts]
    parts = [p.reshape(-1, 1) if p.ndim == 1 else p for p in parts]
    return _share_parts(session, parts, owners, axis=1)


class _GradientDescent(ABC):
    """Shared training loop of the two models (scikit-learn conventions)."""

    def __init__(self, learning_rate: float = 0.1, max_iter: int = 100,
                 fit_intercept: bool = True, alpha: float = 0.0) -> None:
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.alpha = alpha

    @abstractmethod
    def _link(self, z: SharedTensor) -> SharedTensor:
        """The model's output function h applied to the shared scores z."""

    def _check(self, X: Any, y: Any = None) -> None:
        if not isinstance(X, SharedTensor) or X.ndim != 2:
            raise DataError(f"X must be a 2-d SharedTensor (rows x features), got "
                            f"{getattr(X, 'shape', type(X).__name__)}")
        if y is not None:
            if not isinstance(y, SharedTensor) or y.shape != (X.shape[0],):
                raise DataError(f"y must be a SharedTensor of shape ({X.shape[0]},), got "
                                f"{getattr(y, 'shape', type(y).__name__)}")
            X._peer(y)

    def fit(self, X: SharedTensor, y: SharedTensor, *, noise: Any = None) -> Any:
        """Train on shared ``X`` (n x d) and ``y`` (n,); the weights stay shared.

        ``noise``: None, or a callable ``(session, step) -> SharedTensor`` of the weights'
        shape (d, plus 1 with the intercept) added to the gradient sum ``X^T (h - y)``
        before each step (gradient perturbation, e.g.
        :class:`veil.fl.vertical.gradient_noise.GradientNoise`)."""
        lr = check_positive(self.learning_rate, "learning_rate")
        iters = check_int(self.max_iter, "max_iter", low=1)
        alpha = check_positive(self.alpha, "alpha", allow_zero=True)
        self._check(X, y)
        n, d = X.shape
        session = X.session
        if self.fit_intercept:
            X = concatenate([X, session.public(np.ones((n, 1)))], axis=1)
        w = session.public(np.zeros(X.shape[1]))
        Xt = X.T
        step = lr / n
        for t in range(iters):
            grad = Xt @ (self._link(X @ w) - y)
            if noise is not None:
                grad = grad + noise(session, t)
            if alpha:
                penalty = w if not self.fit_intercept else w * np.r_[np.ones(d), 0.0]
                grad = grad + penalty * (alpha * n)
            w = w - grad * step
        self.coef_ = w[:d]
        self.intercept_ = w[d] if self.fit_intercept else None
        self.n_features_in_ = d
        self.n_iter_ = iters
        return self

    def reveal(self) -> RevealedModel:
        """Open the weights to every party -- a release all of them must agree to -- as a
        plain model that predicts on numpy arrays and saves with :mod:`veil.learn.model_format`."""
        if not hasattr(self, "coef_"):
            raise DataError(f"this {type(self).__name__} is not fitted: call fit() first")
        model = RevealedModel("logistic" if isinstance(self, LogisticRegression) else "linear")
        model.coef_ = np.asarray(self.coef_.reveal(), dtype=np.float64)
        model.intercept_ = float(self.intercept_.reveal()) if self.fit_intercept else 0.0
        model.n_features_in_ = self.n_features_in_
        if model.kind == "logistic":
            model.classes_ = np.array([0, 1])
        return model

    def _decision(self, X: SharedTensor) -> SharedTensor:
        if not hasattr(self, "coef_"):
            raise DataError(f"this {type(self).__name__} is not fitted: call fit() first")
        self._check(X)
        self.coef_._peer(X)
        if X.shape[1] != self.n_features_in_:
            raise DataError(f"X has {X.shape[1]} features; the model was fitted on "
                            f"{self.n_features_in_}")
        z = X @ self.coef_
        return z + self.intercept_ if self.fit_intercept else z


@register_model_class
class RevealedModel(BaseEstimator):
    """The opened weights of a secure model (:meth:`_GradientDescent.reveal`): ``kind``
    "linear" predicts ``X coef_ + intercept_``; "logistic" predicts the label of
    ``X coef_ + intercept_ >= 0`` and probabilities with the exact sigmoid."""

    def __init__(self, kind: str = "linear") -> None:
        self.kind = kind

    def decision_function(self, X: Any) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise DataError("this RevealedModel holds no weights: reveal a fitted model")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise DataError(f"X has shape {X.shape}; expected (n, {self.n_features_in_})")
        return X @ self.coef_ + self.intercept_

    def predict(self, X: Any) -> np.ndarray:
        z = self.decision_function(X)
        return (z >= 0).astype(np.int64) if self.kind == "logistic" else z

    def predict_proba(self, X: Any) -> np.ndarray:
        if self.kind != "logistic":
            raise DataError("predict_proba needs a logistic model")
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p, p])


class LinearRegression(_GradientDescent):
    """Least-squares regression by gradient descent on shares (``alpha``: ridge penalty).

    Learned: ``coef_`` (shared, shape (d,)), ``intercept_`` (shared scalar or None).
    """

    def _link(self, z: SharedTensor) -> SharedTensor:
        return z

    def predict(self, X: SharedTensor) -> SharedTensor:
        """Shared predictions ``X coef_ + intercept_`` (reveal them to whom may see them)."""
        return self._decision(X)

    def score(self, X: SharedTensor, y: Any) -> float:
        """R^2 of the predictions, which this reveals to every party, against ``y``."""
        pred = self.predict(X).reveal()
        y = np.asarray(y.reveal() if isinstance(y, SharedTensor) else y, dtype=np.float64)
        return float(1.0 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))


class LogisticRegression(_GradientDescent):
    """Binary logistic regression (labels 0/1) by gradient descent on shares, with the
    piecewise-linear sigmoid (max error 0.00775; see :mod:`veil.mpc.protocols`).

    Learned: ``coef_`` (shared, shape (d,)), ``intercept_`` (shared scalar or None).
    """

    def _link(self, z: SharedTensor) -> SharedTensor:
        return z.sigmoid()

    def decision_function(self, X: SharedTensor) -> SharedTensor:
        return self._decision(X)

    def predict_proba(self, X: SharedTensor) -> SharedTensor:
        """Shared probabilities of class 1 (approximate sigmoid)."""
        return self._decision(X).sigmoid()

    def predict(self, X: SharedTensor) -> SharedTensor:
        """Shared 0/1 labels: ``[X coef_ + intercept_ >= 0]`` (one comparison)."""
        return self._decision(X) >= 0

    def score(self, X: SharedTensor, y: Any) -> float:
        """Accuracy of the labels, which this reveals to every party, against ``y``."""
        pred = self.predict(X).reveal()
        y = np.asarray(y.reveal() if isinstance(y, SharedTensor) else y)
        return float(np.mean(pred == np.rint(y)))
