"""Differentially private linear regression by sufficient-statistics perturbation.

Least squares needs only ``A = Z^T Z`` and ``b = Z^T y``. With every feature clipped into
its declared range ``[lo_j, hi_j]`` and centred on the range's midpoint, ``|z_j| <= r_j =
(hi_j - lo_j)/2`` (``z`` also holds a constant 1 for the intercept, ``r = 1``), and
``|y - m_y| <= r_y``. One record adds ``z z^T`` to A and ``z y`` to b, so the vector of
the **upper triangle of A (diagonal included) and all of b** has sensitivity (add/remove)

    L1:  sum_{j<=k} r_j r_k + r_y sum_j r_j  =  ((sum r)^2 + sum r^2) / 2 + r_y sum r,
    L2:  sqrt( sum_{j<=k} r_j^2 r_k^2 + r_y^2 sum_j r_j^2 ),

and it is released in one piece: Laplace noise (delta = 0) or Gaussian noise (delta > 0)
on **every** entry (Sheffet 2017; Wang 2018, "SSP"). The noisy triangle is mirrored, so A
stays symmetric. diffprivlib's issue #104 is the bug this avoids: part of the statistics
left without noise.

The solution is post-processing: A is projected onto the positive semidefinite cone
(eigenvalues clipped at 0) and a ridge ``alpha`` is added to the feature block (not the
intercept). ``alpha="auto"`` uses the noise standard deviation times ``sqrt(p)``, the order
of the noise matrix's spectral norm, so the noise cannot make the system ill-posed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

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
    noise_mechanism,
    open_ledger,
    reserve,
)
from veil.random import RngLike, check_rng

__all__ = ["LinearRegression", "sufficient_statistics", "statistics_sensitivity"]


def sufficient_statistics(Z: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The released vector: the upper triangle of ``Z^T Z`` (row-major) then ``Z^T t``."""
    return np.concatenate([(Z.T @ Z)[np.triu_indices(Z.shape[1])], Z.T @ t])


def statistics_sensitivity(r: np.ndarray, r_y: float) -> tuple[float, float]:
    """(L1, L2) sensitivity of [upper triangle of Z^T Z, Z^T y] for ``|z_j| <= r_j``."""
    outer = np.outer(r, r)[np.triu_indices(r.size)]
    l1 = float(outer.sum() + r_y * r.sum())
    l2 = math.sqrt(float((outer ** 2).sum() + r_y ** 2 * (r ** 2).sum()))
    return l1, l2


@register_model_class
class LinearRegression(RegressorMixin, BaseEstimator):
    """Least squares from noisy sufficient statistics (see the module docstring).

    Parameters
    ----------
    epsilon, delta:
        The budget of one fit (delta = 0: Laplace noise, pure epsilon-DP).
    bounds_X, bounds_y:
        Declared ranges ``(lo, hi)`` (per feature or scalars) or ``"estimate"`` (10% of
        epsilon each, :func:`veil.learn.private._common.estimate_bounds`).
    fit_intercept, alpha:
        Intercept, and the ridge added after the noise (a number or ``"auto"``).
    ledger, rng:
        Where the release is charged (None: a one-off ledger); randomness.

    Learned: ``coef_``, ``intercept_``, and the released statistics ``XtX_``, ``Xty_`` (of
    the centred, augmented design; differentially private).
    """

    def __init__(self, *, epsilon: float = 1.0, delta: float = 0.0, bounds_X: Any = None,
                 bounds_y: Any = None, fit_intercept: bool = True, alpha: Any = "auto",
                 ledger: Ledger | None = None, rng: RngLike = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.fit_intercept = fit_intercept
        self.alpha = alpha
        self.ledger = ledger
        self.rng = rng

    def fit(self, X: Any, y: Any) -> LinearRegression:
        epsilon, delta = check_privacy(self.epsilon, self.delta)
        if not (self.alpha == "auto" or (isinstance(self.alpha, (int, float))
                                         and check_positive(self.alpha, "alpha",
                                                            allow_zero=True) >= 0)):
            raise ConfigError(f"alpha={self.alpha!r} is not allowed: a number >= 0 or 'auto'")
        X, y = check_xy(X, y)
        y = check_array(y, "y", ndim=1)
        rng = check_rng(self.rng)
        ledger = open_ledger(self.ledger, epsilon, delta)
        box_x = declared_box(self.bounds_X, X.shape[1], "bounds_X")
        box_y = declared_box(self.bounds_y, 1, "bounds_y")
        eps_x = estimate_cost(self.bounds_X, epsilon)
        eps_y = estimate_cost(self.bounds_y, epsilon)
        epsilon -= eps_x + eps_y
        reserve(ledger, estimate_events(X.shape[1], eps_x) + estimate_events(1, eps_y)
                + [noise_mechanism(epsilon, delta, 1.0, 1.0).event], "LinearRegression.fit")
        lo, hi = box_x or estimate_bounds(X, eps_x, ledger=ledger, rng=rng)
        (lo_y,), (hi_y,) = box_y or estimate_bounds(y[:, None], eps_y, ledger=ledger, rng=rng)
        mid, r = (lo + hi) / 2, (hi - lo) / 2
        mid_y, r_y = (lo_y + hi_y) / 2, (hi_y - lo_y) / 2
        Z = np.clip(X, lo, hi) - mid
        t = np.clip(y, lo_y, hi_y) - mid_y
        if self.fit_intercept:
            Z = np.hstack([Z, np.ones((Z.shape[0], 1))])
            r = np.append(r, 1.0)
        p = Z.shape[1]
        upper = np.triu_indices(p)
        exact = sufficient_statistics(Z, t)
        l1, l2 = statistics_sensitivity(r, r_y)
        mechanism = noise_mechanism(epsilon, delta, l1, l2)
        noisy = ledger.release(mechanism, exact, label="LinearRegression: Z'Z and Z'y", rng=rng)
        A = np.zeros((p, p))
        A[upper] = noisy[:upper[0].size]
        A = A + np.triu(A, 1).T
        b = noisy[upper[0].size:]
        self.XtX_, self.Xty_ = A, b
        w = self._solve(A, b, mechanism.scale * (math.sqrt(2.0) if delta == 0 else 1.0))
        d = X.shape[1]
        self.coef_ = w[:d]
        self.intercept_ = float(mid_y - mid @ w[:d] + (w[d] if self.fit_intercept else 0.0))
        self.n_features_in_ = d
        self.ledger_ = ledger
        return self

    def _solve(self, A: np.ndarray, b: np.ndarray, noise_std: float) -> np.ndarray:
        values, vectors = np.linalg.eigh(A)
        psd = (vectors * np.maximum(values, 0.0)) @ vectors.T
        p = A.shape[0]
        ridge = noise_std * math.sqrt(p) if self.alpha == "auto" else float(self.alpha)
        reg = np.full(p, ridge)
        if self.fit_intercept:
            reg[-1] = 0.0
        return np.linalg.lstsq(psd + np.diag(reg), b, rcond=None)[0]

    def predict(self, X: Any) -> np.ndarray:
        check_fitted(self, "coef_")
        X = check_features(X, self.n_features_in_, owner=self)
        return X @ self.coef_ + self.intercept_
