"""Differentially private linear classifiers: LogisticRegression and LinearSVC.

Two training methods, each charged to the ledger before any noise is drawn:

* ``method="objective"`` (default, pure epsilon-DP): objective perturbation
  (:mod:`veil.learn.private.objective`; Chaudhuri, Monteleoni & Sarwate 2011). Rows are
  clipped to the declared ``data_norm`` R (:func:`veil.dp.sensitivity.clip_l2`) and
  augmented to ``z = [x, 1]`` (norm <= sqrt(R^2 + 1)). The objective is
  ``sum_i l(t_i w.z_i) + ||w||^2 / (2C)`` (scikit-learn's C; the intercept is regularized
  too, as the analysis needs). Several classes are handled one-vs-rest, each with
  epsilon / n_classes.
* ``method="dpsgd"`` ((epsilon, delta)-DP, delta > 0): DP-SGD (:mod:`veil.learn.private.sgd`)
  on veil's numpy models; gradients are clipped, so no data bound is needed.

The label set (``classes=``) and, for DP-SGD, the dataset size (``n=``) are declared public
facts (:mod:`veil.learn.public`: add/remove neighbours, where both are private).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin

from veil._validation import (
    check_choice,
    check_features,
    check_fitted,
    check_int,
    check_positive,
    check_xy,
)
from veil.dp.ledger import Ledger
from veil.dp.selection import pure_dp_event
from veil.dp.sensitivity import clip_l2
from veil.errors import ConfigError
from veil.learn import linear as plain
from veil.learn.model_format import register_model_class
from veil.learn.private._common import (
    check_privacy,
    declared_norm,
    estimate_bounds,
    estimate_cost,
    estimate_events,
    open_ledger,
    reserve,
)
from veil.learn.private.objective import LOGISTIC, MarginLoss, fit_perturbed, huber_hinge
from veil.learn.private.sgd import dp_sgd
from veil.learn.public import declared_classes, declared_size
from veil.random import RngLike, check_rng

__all__ = ["LogisticRegression", "LinearSVC"]


class _PrivateLinear(ClassifierMixin, BaseEstimator):
    """Shared fit/predict of the private linear classifiers."""

    def __init__(self, *, epsilon: float = 1.0, delta: float = 0.0, data_norm: Any = None,
                 C: float = 1.0, fit_intercept: bool = True, method: str = "objective",
                 max_grad_norm: float = 1.0, epochs: int = 20, batch_size: int = 64,
                 learning_rate: float = 0.5, ledger: Ledger | None = None,
                 rng: RngLike = None, classes: Any = None, n: Any = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.C = C
        self.fit_intercept = fit_intercept
        self.method = method
        self.max_grad_norm = max_grad_norm
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.ledger = ledger
        self.rng = rng
        self.classes = classes
        self.n = n

    def _loss(self) -> MarginLoss:
        raise NotImplementedError

    def _plain(self, n_classes: int) -> plain.GradientClassifier:
        raise NotImplementedError

    def fit(self, X: Any, y: Any) -> _PrivateLinear:
        """Train on (X, y) under the model's (epsilon, delta), charged to its ledger."""
        epsilon, delta = check_privacy(self.epsilon, self.delta)
        method = check_choice(self.method, "method", ("objective", "dpsgd"))
        X, y = check_xy(X, y)
        classes = declared_classes(self.classes, y, type(self).__name__)
        if classes.size < 2:
            raise ConfigError(f"classes={classes.tolist()!r} is not allowed: need at least two")
        generator = check_rng(self.rng)
        ledger = open_ledger(self.ledger, epsilon, delta)
        if method == "objective":
            self._fit_objective(X, y, classes, epsilon, ledger, generator)
        else:
            self._fit_dpsgd(X, y, classes, epsilon, delta, ledger, generator)
        self.classes_ = classes
        self.n_features_in_ = X.shape[1]
        self.ledger_ = ledger
        return self

    def _fit_objective(self, X: np.ndarray, y: np.ndarray, classes: np.ndarray,
                       epsilon: float, ledger: Ledger | None, rng: RngLike) -> None:
        alpha = 1.0 / check_positive(self.C, "C")
        radius = declared_norm(self.data_norm)
        eps_norm = estimate_cost(self.data_norm, epsilon)
        epsilon -= eps_norm
        reserve(ledger, estimate_events(1, eps_norm) + [pure_dp_event(epsilon)],
                f"{type(self).__name__}.fit")
        if radius is None:
            norms = np.linalg.norm(X, axis=1)[:, None]
            radius = float(estimate_bounds(norms, eps_norm, ledger=ledger, rng=rng)[1][0])
        Z = clip_l2(X, radius)[0]
        if self.fit_intercept:
            Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
            radius = math.hypot(radius, 1.0)
        targets = [classes[1]] if classes.size == 2 else list(classes)
        ledger.charge(pure_dp_event(epsilon),
                      label=f"{type(self).__name__} objective perturbation, "
                            f"{len(targets)} problem(s)")
        share = epsilon / len(targets)
        W = np.array([fit_perturbed(Z, np.where(y == k, 1.0, -1.0), self._loss(), share,
                                    alpha, radius, rng) for k in targets])
        self.coef_ = W[:, :X.shape[1]]
        self.intercept_ = W[:, -1] if self.fit_intercept else np.zeros(len(targets))

    def _fit_dpsgd(self, X: np.ndarray, y: np.ndarray, classes: np.ndarray, epsilon: float,
                   delta: float, ledger: Ledger | None, rng: RngLike) -> None:
        model = self._plain(classes.size)
        model.initialize(X.shape[1], classes)
        self.noise_multiplier_ = dp_sgd(
            model, X, y, epsilon=epsilon, delta=delta,
            max_grad_norm=check_positive(self.max_grad_norm, "max_grad_norm"),
            epochs=check_int(self.epochs, "epochs", low=1),
            batch_size=check_int(self.batch_size, "batch_size", low=1),
            learning_rate=check_positive(self.learning_rate, "learning_rate"),
            ledger=ledger, rng=rng, n=declared_size(self.n, X.shape[0], type(self).__name__))
        self.coef_ = model.coef_.T.copy()
        self.intercept_ = model.intercept_.copy()

    def decision_function(self, X: Any) -> np.ndarray:
        """``X coef^T + intercept``: shape (n,) for two classes, (n, n_classes) otherwise."""
        check_fitted(self, "coef_")
        X = check_features(X, self.n_features_in_, owner=self)
        scores = X @ self.coef_.T + self.intercept_
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X: Any) -> np.ndarray:
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(np.intp)]
        return self.classes_[np.argmax(scores, axis=1)]


@register_model_class
class LogisticRegression(_PrivateLinear):
    """Differentially private logistic regression (objective perturbation or DP-SGD).

    Parameters: ``epsilon``, ``delta`` (0 for objective perturbation), ``data_norm`` (a
    bound on the rows' L2 norm, or ``"estimate"``; objective perturbation only), ``C``
    (inverse regularization, objective perturbation), ``method``, the DP-SGD schedule
    (``max_grad_norm``, ``epochs``, ``batch_size``, ``learning_rate``), ``ledger``, ``rng``,
    ``classes`` (the declared label set, or ``"from_data"``, warned) and ``n`` (DP-SGD: the
    declared public dataset size; see :mod:`veil.learn.public`).
    """

    def _loss(self) -> MarginLoss:
        return LOGISTIC

    def _plain(self, n_classes: int) -> plain.GradientClassifier:
        cls = plain.LogisticRegression if n_classes == 2 else plain.SoftmaxRegression
        return cls(alpha=0.0, fit_intercept=self.fit_intercept)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (sigmoid for two classes; softmax or normalized one-vs-rest)."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        if self.method == "dpsgd":
            e = np.exp(scores - scores.max(axis=1, keepdims=True))
        else:
            e = expit(scores)
        return e / e.sum(axis=1, keepdims=True)


@register_model_class
class LinearSVC(_PrivateLinear):
    """Differentially private linear SVM.

    Objective perturbation uses the Huber-smoothed hinge of width ``huber`` (Chaudhuri et
    al. 2011, Section 3.4.2: ``c = 1/(2h)``); DP-SGD uses the hinge. Other parameters as
    :class:`LogisticRegression`.
    """

    def __init__(self, *, epsilon: float = 1.0, delta: float = 0.0, data_norm: Any = None,
                 C: float = 1.0, huber: float = 0.5, fit_intercept: bool = True,
                 method: str = "objective", max_grad_norm: float = 1.0, epochs: int = 20,
                 batch_size: int = 64, learning_rate: float = 0.5, ledger: Ledger | None = None,
                 rng: RngLike = None, classes: Any = None, n: Any = None) -> None:
        super().__init__(epsilon=epsilon, delta=delta, data_norm=data_norm, C=C,
                         fit_intercept=fit_intercept, method=method,
                         max_grad_norm=max_grad_norm, epochs=epochs, batch_size=batch_size,
                         learning_rate=learning_rate, ledger=ledger, rng=rng, classes=classes,
                         n=n)
        self.huber = huber

    def _loss(self) -> MarginLoss:
        return huber_hinge(check_positive(self.huber, "huber"))

    def _plain(self, n_classes: int) -> plain.GradientClassifier:
        return plain.LinearSVC(loss="hinge", alpha=0.0, fit_intercept=self.fit_intercept)
