"""Objective perturbation for regularized linear classifiers (Chaudhuri, Monteleoni &
Sarwate, JMLR 2011, Algorithm 2), for add/remove-one neighbours.

Rows ``z_i`` with ``||z_i|| <= R``, labels ``t_i`` in {-1, +1}, a convex margin loss ``l``
with ``|l'| <= 1`` and ``0 <= l'' <= c``. The released model is the exact minimizer of

    J(w) = sum_i l(t_i w.z_i) + (lam / 2) ||w||^2 + b.w,     lam = alpha + Delta,

with ``b`` drawn from the density proportional to ``exp(-beta ||b||)`` (a uniform direction
and ``||b|| ~ Gamma(p, 1/beta)``).

Privacy, following the paper's proof (Theorem 9) for a record ``z`` added to ``D``: the map
``b -> w*`` is a bijection with ``b_D(w) = -grad(sum_D l + lam/2 ||w||^2)(w)``, so the
densities of ``w*`` are ``nu(b_D(w)) |det grad b_D(w)|``. Adding ``z`` moves ``b`` by
``l'(t w.z) t z`` (norm <= R) and multiplies the determinant by
``1 + l'' z^T A^-1 z in [1, 1 + c R^2/lam]`` (``A >= lam I``). The privacy loss is
therefore at most ``beta R + ln(1 + c R^2/lam)`` in both directions. Given epsilon and the
regularization ``alpha``: if ``ln(1 + c R^2/alpha) <= epsilon/2``, ``Delta = 0`` and
``beta = (epsilon - ln(1 + c R^2/alpha)) / R``; otherwise ``lam = c R^2 / (e^(epsilon/2) - 1)``
and ``beta = epsilon / (2R)``. (With ``R = 1`` this is the paper's Algorithm 2, except that
its replace-one analysis moves ``b`` by up to 2R; with add/remove neighbours, the ledger's
relation, it is R.) The objective is the sum of the losses, not their mean, so nothing
depends on the (private) number of records, and ``alpha = 1/C`` is scikit-learn's
regularization in the data's own units.

The guarantee assumes the exact minimizer; L-BFGS is run to a gradient tolerance of 1e-10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from veil.random import Generator

__all__ = ["MarginLoss", "LOGISTIC", "huber_hinge", "perturbation", "fit_perturbed"]


@dataclass(frozen=True)
class MarginLoss:
    """A margin loss ``l(m)``, its derivative, and ``c``, the bound on ``l''``."""

    name: str
    c: float
    h: float = 0.0  # Huber width (hinge only)

    def value_and_slope(self, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.name == "logistic":
            return np.logaddexp(0.0, -m), -expit(-m)
        h = self.h
        value = np.where(m > 1 + h, 0.0,
                         np.where(m < 1 - h, 1.0 - m, (1.0 + h - m) ** 2 / (4.0 * h)))
        slope = np.where(m > 1 + h, 0.0,
                         np.where(m < 1 - h, -1.0, -(1.0 + h - m) / (2.0 * h)))
        return value, slope


#: logistic loss ``ln(1 + e^-m)``: ``l'' = sigma(m) sigma(-m) <= 1/4``
LOGISTIC = MarginLoss("logistic", 0.25)


def huber_hinge(h: float) -> MarginLoss:
    """The Huber-smoothed hinge of Chaudhuri et al. (2011, eq. 7): ``c = 1 / (2h)``."""
    return MarginLoss("huber", 1.0 / (2.0 * h), h)


def perturbation(epsilon: float, alpha: float, c: float,
                 radius: float) -> tuple[float, float]:
    """``(lam, beta)``: total L2 regularization and the noise density's rate."""
    curvature = c * radius ** 2
    slack = math.log1p(curvature / alpha)
    if slack <= epsilon / 2:
        return alpha, (epsilon - slack) / radius
    return curvature / math.expm1(epsilon / 2), epsilon / (2 * radius)


def fit_perturbed(Z: np.ndarray, t: np.ndarray, loss: MarginLoss, epsilon: float,
                  alpha: float, radius: float, rng: Generator) -> np.ndarray:
    """The perturbed minimizer for rows of norm <= ``radius`` and labels +-1 (the caller
    charges epsilon first)."""
    lam, beta = perturbation(epsilon, alpha, loss.c, radius)
    p = Z.shape[1]
    direction = rng.standard_normal(p)
    direction /= np.linalg.norm(direction)
    b = rng.gamma(p, 1.0 / beta) * direction

    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        value, slope = loss.value_and_slope(t * (Z @ w))
        grad = Z.T @ (slope * t) + lam * w + b
        return float(value.sum() + 0.5 * lam * (w @ w) + b @ w), grad

    result = minimize(objective, np.zeros(p), jac=True, method="L-BFGS-B",
                      options={"maxiter": 5000, "gtol": 1e-10, "ftol": 0.0})
    return result.x
