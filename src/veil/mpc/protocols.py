"""Compositions of the basic protocols: sigmoid, maximum / argmax.

Sigmoid
-------
``sigmoid(x)`` evaluates the continuous piecewise-linear function through the points
:data:`SIGMOID_KNOTS`, :data:`SIGMOID_VALUES` (constant outside ``[-4.25, 4.25]``)::

    s(x) = v_0 + sum_j m_j ReLU(x - t_j)

where ``m_j`` is the change of slope at knot ``t_j``. The knot values minimise the largest
error ``max_x |s(x) - 1 / (1 + e^-x)|`` for these knots (a linear program); that error is
**0.00775**, attained at the knots and in the tails. On shares this is one batched
comparison of the 7 differences ``x - t_j`` (8 rounds), one product of the comparison bits
with the differences (1 round, exact: a bit times a value needs no truncation) and one
public weighted sum with a single truncation (1 round): 10 rounds in all. The
error of the shared evaluation against :func:`sigmoid_reference` (the same function in
floating point) is a few units of 2^-f. SecureML (Mohassel & Zhang 2017) used the same
idea with 2 pieces; more knots buy accuracy for comparisons that are computed in parallel.

Maximum
-------
A tournament: compare neighbours 2k and 2k + 1 elementwise (``c = [a >= b]``), keep
``b + c (a - b)`` (and the index alike), repeat on the half-size array (an odd last one
waits a level): ``ceil(log2 n)`` levels of one comparison (8 rounds) and one product
(1 round). Survivors stay in index order, so ties go to the lowest index.
"""

from __future__ import annotations

import numpy as np

from veil.errors import DataError
from veil.mpc.tensor import SharedTensor, concatenate, stack

__all__ = ["SIGMOID_KNOTS", "SIGMOID_VALUES", "SIGMOID_MAX_ERROR", "sigmoid",
           "sigmoid_reference", "maximum"]

SIGMOID_KNOTS = np.array([-4.25, -2.4, -1.2, 0.0, 1.2, 2.4, 4.25])
SIGMOID_VALUES = np.array([0.00775, 0.07543, 0.22373, 0.5, 0.77627, 0.92457, 0.99225])
SIGMOID_MAX_ERROR = 0.00775
_SLOPES = np.diff(SIGMOID_VALUES) / np.diff(SIGMOID_KNOTS)
_SLOPE_CHANGES = np.diff(np.concatenate([[0.0], _SLOPES, [0.0]]))


def sigmoid_reference(x: np.ndarray) -> np.ndarray:
    """The same approximation in floating point (the plaintext twin of :func:`sigmoid`)."""
    return np.interp(np.asarray(x, dtype=np.float64), SIGMOID_KNOTS, SIGMOID_VALUES)


def sigmoid(x: SharedTensor) -> SharedTensor:
    """The piecewise-linear sigmoid of a shared tensor (see the module docstring)."""
    k = SIGMOID_KNOTS.size
    knots = SIGMOID_KNOTS.reshape((k,) + (1,) * x.ndim)
    diffs = x.reshape((1, *x.shape)) - knots                  # (k, *shape), local
    relu = diffs * (1 - diffs._ltz())                         # exact: bits times values
    total = _SLOPE_CHANGES.reshape(1, k) @ relu.reshape(k, -1)  # one truncation
    return total.reshape(x.shape) + SIGMOID_VALUES[0]


def _relabel(t: SharedTensor, frac: int) -> SharedTensor:
    """The same ring elements read with ``frac`` fractional bits (a local copy)."""
    return t._apply("linear", [t], t.shape, frac, coefs=[1])


def maximum(x: SharedTensor, axis: int = 0, index: bool = False
            ) -> tuple[SharedTensor, SharedTensor | None]:
    """The maximum along ``axis`` and, with ``index=True``, its (first) index as a shared
    integer."""
    if not isinstance(x, SharedTensor):
        raise DataError(f"maximum needs a SharedTensor, got {type(x).__name__}")
    if x.ndim == 0:
        raise DataError("maximum of a 0-d SharedTensor: there is nothing to compare")
    if not -x.ndim <= axis < x.ndim:
        raise DataError(f"axis={axis} is out of range for {x.ndim} dimensions")
    axis %= x.ndim
    if axis:
        order = [axis] + [a for a in range(x.ndim) if a != axis]
        x = x.transpose(order)
    n = x.shape[0]
    idx = None
    if index:
        ids = np.arange(n).reshape((n,) + (1,) * (x.ndim - 1))
        idx = x.session.public(np.broadcast_to(ids, x.shape).copy())
    while n > 1:
        half = n // 2
        a, b = x[0:2 * half:2], x[1:2 * half:2]              # neighbours: a has the lower index
        c = 1 - (a - b)._ltz()                                 # [a >= b]: ties keep a
        if index:
            ia, ib = idx[0:2 * half:2], idx[1:2 * half:2]
            raw = stack([_relabel(a - b, 0), ia - ib])        # one product for both
            prod = c.reshape((1, *c.shape)) * raw
            best = b + _relabel(prod[0], x.frac)
            best_idx = ib + prod[1]
        else:
            best = b + c * (a - b)
        if n % 2:
            best = concatenate([best, x[2 * half:]])
            if index:
                best_idx = concatenate([best_idx, idx[2 * half:]])
        x, n = best, best.shape[0]
        if index:
            idx = best_idx
    return x[0], (idx[0] if index else None)
