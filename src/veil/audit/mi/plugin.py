"""Plug-in (maximum-likelihood) mutual information for discrete data.

With counts c_xy of each observed pair of values in N samples,

    I(X; Y) ~ sum_xy (c_xy / N) log( c_xy N / (c_x c_y) )

(the MI of the empirical joint distribution). Its bias is positive: to first order
(Miller 1955; Paninski 2003, "Estimation of entropy and mutual information", eq. 3.3 and
section 5) each plug-in entropy is low by (m - 1) / (2N), where m is the number of cells with
non-zero probability, so

    E[I_plugin] - I ~ (m_xy - m_x - m_y + 1) / (2N),

which for independent X, Y with a and b values is (a - 1)(b - 1) / (2N). The Miller–Madow
correction (``correction="miller-madow"``) subtracts this term, with m counted over the
observed cells; it removes the first-order bias but can undershoot (even below 0) when many
cells are rare.
"""

from __future__ import annotations

import numpy as np

from veil._validation import check_choice
from veil.audit.mi.estimate import (
    MIEstimate,
    as_codes,
    check_interval_options,
    check_not_constant,
    check_pair,
    subsample_interval,
)
from veil.random import check_rng

PLUGIN_BIAS = ("plug-in: biased upward by about (m_xy - m_x - m_y + 1) / (2N) nats "
               "(m = number of observed cells)")
MM_BIAS = ("Miller-Madow corrected plug-in: first-order bias removed; may undershoot when "
           "cells are sparse (N not much larger than m_xy)")


def _plugin_value(xc: np.ndarray, yc: np.ndarray, miller_madow: bool) -> float:
    n = xc.size
    _, xc = np.unique(xc, return_inverse=True)
    _, yc = np.unique(yc, return_inverse=True)
    b = int(yc.max()) + 1
    _, joint = np.unique(xc * b + yc, return_counts=True)
    cx, cy = np.bincount(xc), np.bincount(yc)
    # sum c_xy log c_xy - sum c_x log c_x - sum c_y log c_y, over N, plus log N
    value = (np.sum(joint * np.log(joint)) - np.sum(cx * np.log(cx))
             - np.sum(cy * np.log(cy))) / n + np.log(n)
    if miller_madow:
        value -= (joint.size - cx.size - cy.size + 1) / (2.0 * n)
    return float(value)


def plugin(x, y, *, correction: str | None = None, bootstrap: int = 100,
           confidence: float = 0.95, rng=None) -> MIEstimate:
    """Plug-in estimate of I(X; Y) in nats for discrete x and y (any dtype; rows of a 2-D
    array are joint values). ``correction="miller-madow"`` removes the first-order bias."""
    check_choice(correction, "correction", [None, "miller-madow"])
    xc, yc = as_codes(x, "x"), as_codes(y, "y")
    bootstrap, confidence = check_interval_options(bootstrap, confidence)
    n = check_pair(xc.reshape(-1, 1), yc.reshape(-1, 1), min_rows=4 if bootstrap else 2)
    check_not_constant(xc, "x")
    check_not_constant(yc, "y")
    mm = correction == "miller-madow"
    value = _plugin_value(xc, yc, mm)
    lo, hi = subsample_interval(lambda rows: _plugin_value(xc[rows], yc[rows], mm), n, value,
                                bootstrap, confidence, check_rng(rng))
    return MIEstimate(value, lo, hi, confidence, "plugin" + ("+miller-madow" if mm else ""), n,
                      MM_BIAS if mm else PLUGIN_BIAS)
