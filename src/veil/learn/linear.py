"""Linear classifiers in numpy: logistic regression, softmax regression, linear SVM.

Each model scores ``s = x W + b`` (W of shape (d, k), b of shape (k,)) and differs only in
its per-example loss l(s; y). With the residual ``r = dl/ds`` (a k-vector per example),
the per-example gradient is closed-form and vectorised:

    grad_W l = x^T r   (the outer product x (x) r),    grad_b l = r.

* :class:`LogisticRegression` (binary, k = 1): ``l = log(1 + e^s) - y s``,
  ``r = sigmoid(s) - y``.
* :class:`SoftmaxRegression` (k classes): ``l = logsumexp(s) - s_y``,
  ``r = softmax(s) - onehot(y)``.
* :class:`LinearSVC` (one-vs-rest, k = 1 for two classes): with ``t = +1`` for the true
  class and ``-1`` otherwise and margin ``m = t s``, the hinge ``l = sum_k max(0, 1 - m_k)``
  has the subgradient ``r = -t 1[m < 1]``; the squared hinge (scikit-learn's LinearSVC
  default) ``l = sum_k max(0, 1 - m_k)^2`` has ``r = -2 t max(0, 1 - m)``.

The parameter vector is ``[W.ravel() (row-major), b]``. The objective adds the L2 penalty
``(alpha/2) ||W||^2`` (intercepts are not penalized). ``fit`` minimises it with L-BFGS
(scipy; the default, deterministic) or with mini-batch SGD (:func:`veil.learn.base.sgd`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logsumexp, softmax

from veil._validation import check_array, check_choice, check_int, check_positive
from veil.errors import ConfigError, DataError
from veil.learn.base import GradientClassifier, sgd
from veil.learn.model_format import register_model_class
from veil.random import RngLike

__all__ = ["LogisticRegression", "SoftmaxRegression", "LinearSVC"]


class _LinearClassifier(GradientClassifier):
    """Shared machinery of the linear models (see the module docstring)."""

    def __init__(self, *, alpha: float = 1e-4, fit_intercept: bool = True,
                 solver: str = "lbfgs", learning_rate: float = 0.1, max_iter: int = 200,
                 batch_size: int | None = None, warm_start: bool = False,
                 rng: RngLike = None) -> None:
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.warm_start = warm_start
        self.rng = rng

    # -- per-model pieces -----------------------------------------------------------
    def _n_outputs(self, n_classes: int) -> int:
        return n_classes

    def _loss_and_residual(self, scores: np.ndarray,
                           codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-example losses (n,) and residuals dl/ds (n, k)."""
        raise NotImplementedError

    # -- parameters -----------------------------------------------------------------
    def _init_params(self, n_features: int, n_classes: int) -> None:
        k = self._n_outputs(n_classes)
        self.coef_ = np.zeros((n_features, k))
        self.intercept_ = np.zeros(k)

    def get_params_vector(self) -> np.ndarray:
        self._check_initialized()
        parts = [self.coef_.ravel()]
        if self.fit_intercept:
            parts.append(self.intercept_)
        return np.concatenate(parts)

    def set_params_vector(self, vector: Any) -> _LinearClassifier:
        self._check_initialized()
        v = check_array(vector, "vector", ndim=1)
        d, k = self.coef_.shape
        expected = d * k + (k if self.fit_intercept else 0)
        if v.size != expected:
            raise DataError(f"vector has {v.size} entries; this model has {expected} "
                            f"parameters ({d} features x {k} outputs"
                            f"{' + intercepts' if self.fit_intercept else ''})")
        self.coef_ = v[:d * k].reshape(d, k).copy()
        self.intercept_ = v[d * k:].copy() if self.fit_intercept else np.zeros(k)
        return self

    def _regularized(self) -> np.ndarray:
        mask = np.ones(self.coef_.size + (self.intercept_.size if self.fit_intercept else 0),
                       dtype=bool)
        mask[self.coef_.size:] = False
        return mask

    # -- scores, losses, gradients ------------------------------------------------------
    def _scores(self, X: np.ndarray) -> np.ndarray:
        return X @ self.coef_ + self.intercept_

    def decision_function(self, X: Any) -> np.ndarray:
        s = self._scores(self._check_X(X))
        return s[:, 0] if s.shape[1] == 1 else s

    def _losses(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return self._loss_and_residual(self._scores(X), codes)[0]

    def _mean_gradient(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        r = self._loss_and_residual(self._scores(X), codes)[1]
        n = X.shape[0]
        parts = [(X.T @ r).ravel() / n]
        if self.fit_intercept:
            parts.append(r.mean(axis=0))
        return np.concatenate(parts)

    def per_example_gradients(self, X: Any, y: Any) -> np.ndarray:
        X, codes = self._xy(X, y)
        r = self._loss_and_residual(self._scores(X), codes)[1]
        n, d = X.shape
        grads = (X[:, :, None] * r[:, None, :]).reshape(n, d * r.shape[1])
        return np.hstack([grads, r]) if self.fit_intercept else grads

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any) -> _LinearClassifier:
        """Minimise the regularized objective on (X, y)."""
        solver = check_choice(self.solver, "solver", ("lbfgs", "sgd"))
        check_positive(self.alpha, "alpha", allow_zero=True)
        max_iter = check_int(self.max_iter, "max_iter", low=1)
        X, codes = self._prepare_fit(X, y)
        y_known = self.classes_[codes]
        if solver == "sgd":
            return sgd(self, X, y_known, epochs=max_iter, learning_rate=self.learning_rate,
                       batch_size=self.batch_size, rng=self.rng)

        def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
            self.set_params_vector(w)
            return self._objective(X, codes), self._gradient(X, codes)

        result = minimize(objective, self.get_params_vector(), jac=True, method="L-BFGS-B",
                          options={"maxiter": max_iter})
        self.set_params_vector(result.x)
        self.n_iter_ = int(result.nit)
        return self


@register_model_class
class LogisticRegression(_LinearClassifier):
    """Binary logistic regression (labels: any two classes; ``classes_[1]`` is positive)."""

    def _n_outputs(self, n_classes: int) -> int:
        if n_classes != 2:
            raise ConfigError(f"LogisticRegression is binary; got {n_classes} classes: "
                              "use SoftmaxRegression")
        return 1

    def _loss_and_residual(self, scores, codes):
        y = codes[:, None].astype(np.float64)
        losses = (np.logaddexp(0.0, scores) - y * scores)[:, 0]
        return losses, expit(scores) - y

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n, 2)."""
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])


@register_model_class
class SoftmaxRegression(_LinearClassifier):
    """Multinomial logistic regression over k >= 2 classes."""

    def _loss_and_residual(self, scores, codes):
        rows = np.arange(scores.shape[0])
        losses = logsumexp(scores, axis=1) - scores[rows, codes]
        r = softmax(scores, axis=1)
        r[rows, codes] -= 1.0
        return losses, r

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n, k)."""
        return softmax(self._scores(self._check_X(X)), axis=1)


@register_model_class
class LinearSVC(_LinearClassifier):
    """Linear support vector machine, one-vs-rest, with the hinge or squared hinge loss.

    ``loss="squared_hinge"`` (default, as scikit-learn's LinearSVC) is differentiable and
    suits L-BFGS; ``loss="hinge"`` is best trained with ``solver="sgd"``.
    """

    def __init__(self, *, loss: str = "squared_hinge", alpha: float = 1e-4,
                 fit_intercept: bool = True, solver: str = "lbfgs",
                 learning_rate: float = 0.1, max_iter: int = 200,
                 batch_size: int | None = None, warm_start: bool = False,
                 rng: RngLike = None) -> None:
        super().__init__(alpha=alpha, fit_intercept=fit_intercept, solver=solver,
                         learning_rate=learning_rate, max_iter=max_iter,
                         batch_size=batch_size, warm_start=warm_start, rng=rng)
        self.loss = loss

    def _n_outputs(self, n_classes: int) -> int:
        check_choice(self.loss, "loss", ("hinge", "squared_hinge"))
        return 1 if n_classes == 2 else n_classes

    def _loss_and_residual(self, scores, codes):
        k = scores.shape[1]
        if k == 1:
            t = (2.0 * codes - 1.0)[:, None]
        else:
            t = -np.ones_like(scores)
            t[np.arange(scores.shape[0]), codes] = 1.0
        slack = np.maximum(0.0, 1.0 - t * scores)
        if self.loss == "hinge":
            return slack.sum(axis=1), -t * (slack > 0)
        return (slack ** 2).sum(axis=1), -2.0 * t * slack
