"""Differentially private k-means: Lloyd's iterations on noisy counts and sums.

DP-Lloyd (Blum, Dwork, McSherry & Nissim 2005, "SuLQ"; Su, Cao, Li, Bertino & Jajodia,
VLDB Journal 2016): the centres start at a data-independent position (uniform in the
central half of the declared box), then each of ``max_iter`` iterations assigns the records
to their nearest centre and releases, over all clusters at once,

* the counts ``N_c`` (sensitivity 1: a record is in one cluster), and
* the sums ``S_c = sum (x - m)`` of the records clipped into the box and centred on its
  midpoint (L1 ``sum_j r_j``, L2 ``sqrt(sum_j r_j^2)``),

and moves each centre to the posterior mean of ``c`` given the noisy sum
``S_c ~ N_c c + noise`` under a prior with the box's variance ``r^2/3`` around its midpoint:
``m + S_c N_c / (N_c^2 + 3 s^2 / r^2)`` (``s^2`` the sum noise's variance, ``N_c`` the noisy
count, at least 1), clipped to the box. This post-processing is ``m + S_c / N_c`` when the
noise is small and shrinks a centre towards the midpoint when it would be noise.

Each iteration gets epsilon / max_iter, split between counts and sums as
``cbrt(4 d rho^2) : d`` with ``rho = 0.225`` (Su et al. 2016, Section 5.2). Few iterations
are best at small budgets (their rule gives 2 for a few hundred records in 30 dimensions,
the default; the number of records is private, so it is not used to choose it). Only the
centres are released: unlike scikit-learn, the model has no ``labels_`` or ``inertia_`` of
the training data (they would not be private); use :meth:`predict`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from veil._validation import check_array, check_features, check_fitted, check_int
from veil.dp.ledger import Ledger
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
from veil.random import RngLike, check_rng

__all__ = ["KMeans"]

_RHO = 0.225  # Su et al. (2016): the count/sum budget ratio's constant


def _nearest(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    d2 = (X ** 2).sum(1)[:, None] - 2.0 * X @ centers.T + (centers ** 2).sum(1)[None]
    return np.argmin(d2, axis=1)


@register_model_class
class KMeans(ClusterMixin, BaseEstimator):
    """k-means with differentially private Lloyd iterations.

    Parameters: ``n_clusters``, ``epsilon``, ``delta`` (0: Laplace; > 0: Gaussian noise),
    ``bounds`` (per feature or scalar ``(lo, hi)``, or ``"estimate"``), ``max_iter`` (the
    number of private iterations), ``ledger``, ``rng``. Learned: ``cluster_centers_``.
    """

    def __init__(self, n_clusters: int = 8, *, epsilon: float = 1.0, delta: float = 0.0,
                 bounds: Any = None, max_iter: int = 2, ledger: Ledger | None = None,
                 rng: RngLike = None) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.max_iter = max_iter
        self.ledger = ledger
        self.rng = rng

    def fit(self, X: Any, y: Any = None) -> KMeans:
        epsilon, delta = check_privacy(self.epsilon, self.delta)
        k = check_int(self.n_clusters, "n_clusters", low=1)
        iters = check_int(self.max_iter, "max_iter", low=1)
        X = check_array(X, "X", ndim=2)
        d = X.shape[1]
        box = declared_box(self.bounds, d)
        rng = check_rng(self.rng)
        ledger = open_ledger(self.ledger, epsilon, delta)
        eps_bounds = estimate_cost(self.bounds, epsilon)
        per_iter = split(epsilon - eps_bounds, delta, [1.0] * iters)[0]
        parts = split(*per_iter, [np.cbrt(4.0 * d * _RHO ** 2), float(d)])
        probe = [noise_mechanism(e, dl, 1.0, 1.0).event for e, dl in parts] * iters
        reserve(ledger, estimate_events(d, eps_bounds) + probe, "KMeans.fit")
        lo, hi = box or estimate_bounds(X, eps_bounds, ledger=ledger, rng=rng)
        mid, r = (lo + hi) / 2, (hi - lo) / 2
        Z = np.clip(X, lo, hi) - mid
        centers = r * rng.uniform(-0.5, 0.5, size=(k, d))
        (e_count, d_count), (e_sum, d_sum) = parts
        for it in range(iters):
            exact_counts, exact_sums, _ = group_sums(Z, _nearest(Z, centers), k)
            counts = ledger.release(noise_mechanism(e_count, d_count, 1.0, 1.0),
                                    exact_counts, rng=rng, label=f"KMeans counts {it}")
            mechanism = noise_mechanism(e_sum, d_sum, r.sum(), float(np.sqrt((r ** 2).sum())))
            sums = ledger.release(mechanism, exact_sums, rng=rng, label=f"KMeans sums {it}")
            noise_var = mechanism.scale ** 2 * (2.0 if d_sum == 0 else 1.0)
            n = np.maximum(counts, 1.0)[:, None]
            centers = np.clip(sums * n / (n ** 2 + 3.0 * noise_var / r ** 2), -r, r)
        self.cluster_centers_ = centers + mid
        self.n_features_in_ = d
        self.n_iter_ = iters
        self.ledger_ = ledger
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest centre for each row."""
        check_fitted(self, "cluster_centers_")
        X = check_features(X, self.n_features_in_, owner=self)
        return _nearest(X, self.cluster_centers_)

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).predict(X)
