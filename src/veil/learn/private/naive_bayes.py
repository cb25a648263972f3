"""Differentially private Gaussian naive Bayes (Vaidya, Shafiq, Basu & Hong 2013).

Per class c and feature j the model needs a count ``N_c``, a mean and a variance. With every
feature clipped into its declared range and centred on its midpoint (``|x_j - m_j| <= r_j``),
three vectors are released, each over all classes at once:

* counts ``N_c``: sensitivity 1;
* sums ``S_cj = sum x_j - m_j``: L1 ``sum_j r_j``, L2 ``sqrt(sum_j r_j^2)``;
* sums of squares ``Q_cj = sum (x_j - m_j)^2``: L1 ``sum_j r_j^2``, L2 ``sqrt(sum_j r_j^4)``

(add/remove one record: it belongs to one class, so it moves one row of each). The budget is
split ``1 : d^(2/3) : d^(2/3)``, which equalizes the marginal value of epsilon when the
relative noise of a class's sums grows like d (Laplace noise ~ L1/epsilon_k; minimising
``sum_k a_k^2 / epsilon_k^2`` under ``sum_k epsilon_k = epsilon`` gives
``epsilon_k ~ a_k^(2/3)``). Then ``mean = m + S/N`` and ``var = Q/N - (S/N)^2``, clipped to
``[s_Q / N, r^2]`` (``s_Q`` the noise standard deviation of Q: smaller variances cannot be
told from 0, and a variance near 0 would let one feature decide every prediction), plus
``var_smoothing`` times the largest variance. Priors are the noisy
counts' proportions (unless ``priors`` is given). The label set is treated as public.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin

from veil._validation import check_array, check_features, check_fitted, check_positive, check_xy
from veil.dp.ledger import Ledger
from veil.errors import ConfigError
from veil.learn.model_format import register_model_class
from veil.learn.private._common import (
    check_privacy,
    declared_box,
    estimate_bounds,
    estimate_cost,
    estimate_events,
    group_sums,
    noise_mechanism,
    open_ledger,
    reserve,
    split,
)
from veil.learn.public import declared_classes
from veil.random import RngLike, check_rng

__all__ = ["GaussianNB"]


@register_model_class
class GaussianNB(ClassifierMixin, BaseEstimator):
    """Gaussian naive Bayes from noisy counts, sums and sums of squares.

    Parameters: ``epsilon``, ``delta`` (0: Laplace; > 0: Gaussian noise), ``bounds`` (per
    feature or scalar ``(lo, hi)``, or ``"estimate"``), ``priors``, ``var_smoothing``,
    ``ledger``, ``rng``, ``classes`` (the declared label set, or ``"from_data"``, warned:
    :mod:`veil.learn.public`). Learned: ``classes_``, ``class_count_`` (noisy), ``class_prior_``,
    ``theta_`` (means), ``var_``.
    """

    def __init__(self, *, epsilon: float = 1.0, delta: float = 0.0, bounds: Any = None,
                 priors: Any = None, var_smoothing: float = 1e-9, ledger: Ledger | None = None,
                 rng: RngLike = None, classes: Any = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.priors = priors
        self.var_smoothing = var_smoothing
        self.ledger = ledger
        self.rng = rng
        self.classes = classes

    def fit(self, X: Any, y: Any) -> GaussianNB:
        epsilon, delta = check_privacy(self.epsilon, self.delta)
        smoothing = check_positive(self.var_smoothing, "var_smoothing", allow_zero=True)
        X, y = check_xy(X, y)
        classes = np.unique(declared_classes(self.classes, y, "GaussianNB"))
        codes = np.searchsorted(classes, y)
        n_classes, d = classes.size, X.shape[1]
        priors = None
        if self.priors is not None:
            priors = check_array(self.priors, "priors", ndim=1)
            if priors.size != n_classes or np.any(priors < 0) or \
                    not np.isclose(priors.sum(), 1.0):
                raise ConfigError(f"priors={self.priors!r} is not allowed: need {n_classes} "
                                  "non-negative values summing to 1")
        box = declared_box(self.bounds, d)
        rng = check_rng(self.rng)
        ledger = open_ledger(self.ledger, epsilon, delta)
        eps_bounds = estimate_cost(self.bounds, epsilon)
        weight = d ** (2.0 / 3.0)
        parts = split(epsilon - eps_bounds, delta, [1.0, weight, weight])
        probe = [noise_mechanism(e, dl, 1.0, 1.0).event for e, dl in parts]
        reserve(ledger, estimate_events(d, eps_bounds) + probe, "GaussianNB.fit")
        lo, hi = box or estimate_bounds(X, eps_bounds, ledger=ledger, rng=rng)
        mid, r = (lo + hi) / 2, (hi - lo) / 2
        Z = np.clip(X, lo, hi) - mid
        exact = group_sums(Z, codes, n_classes)
        sens = [(1.0, 1.0), (r.sum(), np.sqrt((r ** 2).sum())),
                ((r ** 2).sum(), np.sqrt((r ** 4).sum()))]
        names = ["counts", "sums", "sums of squares"]
        mechanisms = [noise_mechanism(e, dl, l1, l2) for (e, dl), (l1, l2) in zip(parts, sens)]
        counts, sums, squares = (
            ledger.release(m, value, rng=rng, label=f"GaussianNB {name}")
            for m, value, name in zip(mechanisms, exact, names))
        n = np.maximum(counts, 1.0)[:, None]
        mean = sums / n
        # a variance below the noise of Q / N cannot be told from 0: floor it there
        noise = mechanisms[2].scale * (np.sqrt(2.0) if delta == 0 else 1.0) / n
        var = np.clip(squares / n - mean ** 2, np.minimum(noise, r ** 2), r ** 2)
        self.var_ = var + smoothing * var.max()
        self.theta_ = mid + np.clip(mean, -r, r)
        self.class_count_ = np.maximum(counts, 0.0)
        total = self.class_count_.sum()
        self.class_prior_ = priors if priors is not None else (
            self.class_count_ / total if total > 0 else np.full(n_classes, 1.0 / n_classes))
        self.classes_ = classes
        self.n_features_in_ = d
        self.ledger_ = ledger
        return self

    def _joint_log_likelihood(self, X: Any) -> np.ndarray:
        check_fitted(self, "theta_")
        X = check_features(X, self.n_features_in_, owner=self)
        with np.errstate(divide="ignore"):
            log_prior = np.log(self.class_prior_)
        log_norm = -0.5 * np.log(2.0 * np.pi * self.var_).sum(axis=1)
        sq = ((X[:, None, :] - self.theta_[None]) ** 2 / self.var_[None]).sum(axis=2)
        return log_prior + log_norm - 0.5 * sq

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self._joint_log_likelihood(X), axis=1)]

    def predict_proba(self, X: Any) -> np.ndarray:
        jll = self._joint_log_likelihood(X)
        return np.exp(jll - logsumexp(jll, axis=1, keepdims=True))
