"""Nearest-neighbour mutual-information estimators (k-d trees, max-norm).

KSG — Kraskov, Stögbauer & Grassberger (2004), "Estimating mutual information", Phys. Rev.
E 69, 066138, estimator (8) ("algorithm 1"). For each sample i let eps_i be the max-norm
distance from z_i = (x_i, y_i) to its k-th nearest neighbour in the joint space, and
n_x(i), n_y(i) the number of *other* samples strictly closer than eps_i in the x and y
spaces. Then

    I(X; Y) ~ psi(k) + psi(N) - < psi(n_x(i) + 1) + psi(n_y(i) + 1) >_i .

The estimator is consistent and, for independent variables, nearly unbiased. Its bias:
small for moderate dependence in few dimensions (|bias| < 2% for the correlated-Gaussian
cases in the tests); negative and growing with the MI and the dimension when the
dependence is strong in high dimension (the k-NN ball cannot resolve a near-functional
relation: Gao, Ver Steeg & Galstyan 2015 show the sample size KSG needs grows
exponentially with the true MI). Larger ``k`` lowers the variance and raises the bias.

Ross (2014), "Mutual information between discrete and continuous data sets", PLoS ONE 9,
e87357 — one discrete variable X (labels) and continuous Y. For each sample i, d_i is the
distance to the k-th nearest sample *with the same label* (N_{x_i} samples share it), and
m_i the number of samples of *any* label within d_i (the k neighbours included):

    I(X; Y) ~ psi(N) - < psi(N_{x_i}) > + psi(k) - < psi(m_i) >_i .

Same bias profile as KSG; each label needs more than k samples.

Ties (repeated values) would put neighbours at distance zero: both estimators add jitter of
relative size 1e-10 to the standardised data (as scikit-learn does), which leaves untied
data unchanged to double precision.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import digamma

from veil._validation import check_int
from veil.audit.mi.estimate import (
    MIEstimate,
    as_codes,
    as_columns,
    check_interval_options,
    check_not_constant,
    check_pair,
    standardize,
    subsample_interval,
)
from veil.errors import DataError
from veil.random import check_rng

KSG_BIAS = ("KSG (k-NN, max-norm): nearly unbiased for moderate dependence in low dimension; "
            "underestimates strong dependence in high dimension (the shortfall grows with the "
            "true MI and the dimension)")
ROSS_BIAS = ("Ross k-NN estimator (discrete x, continuous y): nearly unbiased for moderate "
             "dependence; underestimates near-deterministic labels in high dimension")
_JITTER = 1e-10


def _prepare(arr: np.ndarray, rng) -> np.ndarray:
    z = standardize(arr)
    return z + _JITTER * rng.standard_normal(z.shape)


def _count_within(points: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Samples (self included) within max-norm ``radius`` of each point."""
    return cKDTree(points).query_ball_point(points, radius, p=np.inf, return_length=True)


def _ksg_value(x: np.ndarray, y: np.ndarray, k: int) -> float:
    n = x.shape[0]
    dist, _ = cKDTree(np.hstack([x, y])).query(np.hstack([x, y]), k=k + 1, p=np.inf)
    strict = np.nextafter(dist[:, -1], 0.0)  # "strictly closer than eps_i"
    nx1 = _count_within(x, strict)  # = n_x(i) + 1: the count includes i itself
    ny1 = _count_within(y, strict)
    return float(digamma(k) + digamma(n) - np.mean(digamma(nx1) + digamma(ny1)))


def _ross_value(labels: np.ndarray, y: np.ndarray, k: int) -> float:
    n = y.shape[0]
    radius = np.empty(n)
    label_size = np.empty(n)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        dist, _ = cKDTree(y[rows]).query(y[rows], k=k + 1, p=np.inf)
        radius[rows] = dist[:, -1]
        label_size[rows] = rows.size
    m = _count_within(y, radius) - 1  # others within d_i, the k same-label neighbours included
    return float(digamma(n) - np.mean(digamma(label_size)) + digamma(k) - np.mean(digamma(m)))


def ksg(x, y, *, k: int = 3, bootstrap: int = 100, confidence: float = 0.95,
        rng=None) -> MIEstimate:
    """KSG estimate of I(X; Y) in nats for continuous x (n,) / (n, dx) and y (n,) / (n, dy)."""
    xa, ya = as_columns(x, "x"), as_columns(y, "y")
    bootstrap, confidence = check_interval_options(bootstrap, confidence)
    k = check_int(k, "k", low=1)
    n = check_pair(xa, ya, min_rows=2 * (k + 1) if bootstrap else k + 1)
    check_not_constant(xa, "x")
    check_not_constant(ya, "y")
    rng = check_rng(rng)
    xs, ys = _prepare(xa, rng), _prepare(ya, rng)
    value = _ksg_value(xs, ys, k)
    lo, hi = subsample_interval(lambda rows: _ksg_value(xs[rows], ys[rows], k), n, value,
                                bootstrap, confidence, rng)
    return MIEstimate(value, lo, hi, confidence, f"ksg(k={k})", n, KSG_BIAS)


def ross(labels, y, *, k: int = 3, bootstrap: int = 100, confidence: float = 0.95,
         rng=None) -> MIEstimate:
    """Ross's estimate of I(X; Y) in nats for discrete ``labels`` and continuous ``y``."""
    codes = as_codes(labels, "labels")
    ya = as_columns(y, "y")
    bootstrap, confidence = check_interval_options(bootstrap, confidence)
    k = check_int(k, "k", low=1)
    n = check_pair(codes.reshape(-1, 1), ya, min_rows=2)
    check_not_constant(codes, "labels")
    check_not_constant(ya, "y")
    counts = np.bincount(codes)
    need = 2 * (k + 1) if bootstrap else k + 1
    if counts.min() < need:
        raise DataError(f"a label of x has only {counts.min()} samples; the Ross estimator "
                        f"with k={k} needs at least {need} per label"
                        + (" (half of them in each bootstrap replicate)" if bootstrap else ""))
    rng = check_rng(rng)
    ys = _prepare(ya, rng)
    value = _ross_value(codes, ys, k)
    lo, hi = subsample_interval(lambda rows: _ross_value(codes[rows], ys[rows], k), n, value,
                                bootstrap, confidence, rng, strata=codes)
    return MIEstimate(value, lo, hi, confidence, f"ross(k={k})", n, ROSS_BIAS)
