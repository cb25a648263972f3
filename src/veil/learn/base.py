"""The interface every gradient-trained model in veil follows, and the SGD loop they share.

A :class:`GradientClassifier` is a scikit-learn classifier whose parameters are one flat
vector ``w`` (:meth:`~GradientClassifier.get_params_vector` /
:meth:`~GradientClassifier.set_params_vector`) and whose objective is

    F(w) = (1/n) sum_i l(w; x_i, y_i) + (alpha/2) ||M w||^2,

with ``l`` the per-example loss and ``M`` masking the parameters that are regularized
(weights, not intercepts). :meth:`~GradientClassifier.per_example_gradients` returns the
matrix of the ``grad_w l(w; x_i, y_i)`` (one row per example, without the regularizer):
what differentially private learners clip one by one. :meth:`~GradientClassifier.gradient`
is ``grad F``. Federated learning, DP-SGD and the query-based learners only use this
interface, so a numpy linear model and a torch network are interchangeable there.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from veil._validation import check_features, check_int, check_positive, check_xy
from veil.errors import ConfigError, DataError
from veil.random import Generator, RngLike, check_rng

__all__ = ["GradientClassifier", "sgd"]


class GradientClassifier(ClassifierMixin, BaseEstimator):
    """Base class: a classifier with a flat parameter vector and per-example gradients.

    Subclasses implement :meth:`_init_params`, :meth:`per_example_gradients`,
    :meth:`_losses`, :meth:`decision_function`, :meth:`get_params_vector`,
    :meth:`set_params_vector` and :meth:`_regularized`. Learned state: ``classes_``,
    ``n_features_in_`` and the parameters.
    """

    # -- to implement -------------------------------------------------------------
    @abstractmethod
    def _init_params(self, n_features: int, n_classes: int) -> None:
        """Create the parameters for ``n_features`` inputs and ``n_classes`` classes."""

    @abstractmethod
    def get_params_vector(self) -> np.ndarray:
        """The parameters as a new 1-d float64 array."""

    @abstractmethod
    def set_params_vector(self, vector: np.ndarray) -> GradientClassifier:
        """Load parameters from a 1-d array of length :attr:`n_params_`; returns self."""

    @abstractmethod
    def decision_function(self, X: Any) -> np.ndarray:
        """Scores: shape (n,) for a binary model, (n, n_classes) otherwise."""

    @abstractmethod
    def per_example_gradients(self, X: Any, y: Any) -> np.ndarray:
        """``grad_w l(w; x_i, y_i)`` for every example: shape (n, n_params_)."""

    @abstractmethod
    def _losses(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Per-example losses for label codes (indices into ``classes_``)."""

    @abstractmethod
    def _mean_gradient(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(1/n) sum_i grad l(w; x_i, y_i), without the regularizer."""

    @abstractmethod
    def _regularized(self) -> np.ndarray:
        """Boolean mask over the parameter vector: True where the L2 penalty applies."""

    # -- shared -------------------------------------------------------------------
    @property
    def n_params_(self) -> int:
        """Length of the parameter vector."""
        return int(self.get_params_vector().size)

    def initialize(self, n_features: int, classes: Sequence[Any]) -> GradientClassifier:
        """Set up fresh parameters for ``n_features`` inputs and the given classes.

        Federated learning calls this on the server (classes are public schema knowledge)
        before the first round; :meth:`fit` calls it from the data.
        """
        n_features = check_int(n_features, "n_features", low=1)
        classes = np.unique(np.asarray(classes))
        if classes.size < 2:
            raise DataError(f"classes={classes.tolist()!r}: need at least two classes")
        self.classes_ = classes
        self.n_features_in_ = n_features
        self._init_params(n_features, classes.size)
        return self

    def _check_X(self, X: Any) -> np.ndarray:
        self._check_initialized()
        return check_features(X, self.n_features_in_, owner=self)

    def _check_initialized(self) -> None:
        if not hasattr(self, "classes_"):
            raise ConfigError(f"this {type(self).__name__} is not fitted or initialized yet: "
                              "call fit(X, y) or initialize(n_features, classes) first")

    def _codes(self, y: Any, n: int) -> np.ndarray:
        """Labels as indices into ``classes_`` (unknown labels are a DataError)."""
        y = np.asarray(y)
        if y.shape != (n,):
            raise DataError(f"y has shape {y.shape}; expected ({n},) to match X")
        codes = np.searchsorted(self.classes_, y)
        codes = np.clip(codes, 0, self.classes_.size - 1)
        bad = self.classes_[codes] != y
        if np.any(bad):
            unknown = sorted({str(v) for v in y[bad]})[:5]
            raise DataError(f"y holds labels outside classes_={self.classes_.tolist()}: "
                            f"{unknown}")
        return codes.astype(np.intp)

    def _xy(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        X = self._check_X(X)
        return X, self._codes(y, X.shape[0])

    def objective(self, X: Any, y: Any) -> float:
        """The objective F(w): mean per-example loss plus (alpha/2) ||M w||^2."""
        return self._objective(*self._xy(X, y))

    def _objective(self, X: np.ndarray, codes: np.ndarray) -> float:
        w = self.get_params_vector()[self._regularized()]
        return float(np.mean(self._losses(X, codes)) + 0.5 * self.alpha * (w @ w))

    def gradient(self, X: Any, y: Any) -> np.ndarray:
        """grad F(w) at the current parameters (a new 1-d array)."""
        X, codes = self._xy(X, y)
        return self._gradient(X, codes)

    def _gradient(self, X: np.ndarray, codes: np.ndarray) -> np.ndarray:
        g = self._mean_gradient(X, codes)
        if self.alpha:
            mask = self._regularized()
            g[mask] += self.alpha * self.get_params_vector()[mask]
        return g

    def predict(self, X: Any) -> np.ndarray:
        """Predicted class labels."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(np.intp)]
        return self.classes_[np.argmax(scores, axis=1)]

    def _prepare_fit(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        X, y = check_xy(X, y)
        if not (getattr(self, "warm_start", False) and hasattr(self, "classes_")):
            self.initialize(X.shape[1], np.unique(y))
        return self._xy(X, y)


def sgd(model: GradientClassifier, X: np.ndarray, y: np.ndarray, *, epochs: int,
        learning_rate: float, batch_size: int | None = None, rng: RngLike = None,
        penalty: Callable[[np.ndarray], np.ndarray] | None = None) -> GradientClassifier:
    """Mini-batch stochastic gradient descent on ``model``'s objective, in place.

    Each epoch visits the rows in a fresh random order (drawn from ``rng``) in batches of
    ``batch_size`` (None: one full batch, i.e. gradient descent, which needs no
    randomness) and steps ``w <- w - learning_rate * (grad F_batch(w) + penalty(w))``.
    ``penalty`` adds a term to the gradient, e.g. FedProx's ``mu (w - w_global)``.
    """
    epochs = check_int(epochs, "epochs", low=0)
    learning_rate = check_positive(learning_rate, "learning_rate")
    X, codes = model._xy(X, y)
    n = X.shape[0]
    batch = n if batch_size is None else check_int(batch_size, "batch_size", low=1)
    generator: Generator | None = check_rng(rng) if batch < n else None
    w = model.get_params_vector()
    for _ in range(epochs):
        order = generator.permutation(n) if generator is not None else np.arange(n)
        for start in range(0, n, batch):
            rows = order[start:start + batch]
            g = model._gradient(X[rows], codes[rows])
            if penalty is not None:
                g = g + penalty(w)
            w = w - learning_rate * g
            model.set_params_vector(w)
    return model
