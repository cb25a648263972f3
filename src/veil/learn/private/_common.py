"""What the private models share: the ledger, the mechanism choice, and the data bounds.

Bounds are never read from the data. A model either takes them as declared (``bounds=`` a
pair of scalars or of per-feature arrays; ``data_norm=`` a row-norm bound) and clips the
data into them, or, with ``"estimate"``, spends :data:`ESTIMATE_SHARE` of its epsilon on
estimating them privately first (:func:`estimate_bounds`).

:func:`estimate_bounds` is the "approximate bounds" method of Google's differential
privacy library (Wilson et al., PoPETs 2020, Section 5.2 and its ApproxBounds): per feature,
a noisy histogram over logarithmic bins ``+-[2^k, 2^(k+1))`` (plus one bin around 0), which
needs no prior range; the bounds are the outer edges of the outermost bins whose noisy
count exceeds ``tau = b ln(m / (2 beta))`` (b the Laplace scale, m the number of bins), so
that with probability >= 1 - beta no empty bin is selected. The histograms are
:func:`veil.dp.stats.histogram` releases with epsilon split evenly over the features (a
record is in one bin of each feature's histogram).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_array, check_delta, check_epsilon
from veil.dp import stats
from veil.dp.gaussian import Gaussian
from veil.dp.laplace import Laplace
from veil.dp.ledger import Ledger, open_ledger
from veil.dp.mechanism import Mechanism
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import RngLike

__all__ = ["ESTIMATE_SHARE", "open_ledger", "reserve", "noise_mechanism", "split",
           "check_privacy", "estimate_cost", "estimate_events", "declared_box", "declared_norm",
           "estimate_bounds", "group_sums"]

#: share of a model's epsilon spent on estimating bounds declared as "estimate"
ESTIMATE_SHARE = 0.1
_K_MIN, _K_MAX = -20, 60  # logarithmic bins cover magnitudes 2^-20 .. 2^61
_FAILURE = 1e-3           # beta: probability that an empty bin passes the threshold


def reserve(ledger: Ledger, events: Sequence[de.DpEvent], what: str) -> None:
    """Raise BudgetExceededError unless all ``events`` fit ``ledger`` together."""
    event = events[0] if len(events) == 1 else de.ComposedDpEvent(list(events))
    if not ledger.fits(event):
        left, at = ledger.remaining()
        raise BudgetExceededError(f"{what} does not fit: {left:.2g} of the ledger's budget "
                                  f"epsilon={ledger.epsilon:g} remains (at delta={at:g}); "
                                  "nothing was charged")


def noise_mechanism(epsilon: float, delta: float, l1: float, l2: float) -> Mechanism:
    """Laplace with L1 sensitivity ``l1`` when delta == 0, else Gaussian with L2 ``l2``."""
    if delta == 0.0:
        return Laplace(epsilon, 0.0, l1)
    return Gaussian(epsilon, delta, l2)


def split(epsilon: float, delta: float, weights: Sequence[float]) -> list[tuple[float, float]]:
    """(epsilon, delta) in parts proportional to ``weights`` (basic composition)."""
    total = float(sum(weights))
    return [(epsilon * w / total, delta * w / total) for w in weights]


def check_privacy(epsilon: Any, delta: Any) -> tuple[float, float]:
    return check_epsilon(epsilon), check_delta(delta)


def estimate_cost(bounds: Any, epsilon: float) -> float:
    """The epsilon a bound given as ``"estimate"`` costs (0 for a declared one)."""
    return ESTIMATE_SHARE * epsilon if isinstance(bounds, str) else 0.0


def estimate_events(n_features: int, epsilon: float) -> list[de.DpEvent]:
    """The events :func:`estimate_bounds` charges (none when epsilon is 0)."""
    return [Laplace(epsilon / n_features).event] * n_features if epsilon else []


def declared_box(bounds: Any, n_features: int,
                 name: str = "bounds") -> tuple[np.ndarray, np.ndarray] | None:
    """Declared per-feature ``(lo, hi)``, or None for ``"estimate"`` (ConfigError if bad)."""
    d = n_features
    if bounds is None:
        raise ConfigError(f"{name}=None is not allowed: declare the data's range as (lo, hi) "
                          f"(scalars or arrays of {d} values), or pass {name}='estimate' to "
                          f"spend {ESTIMATE_SHARE:.0%} of epsilon estimating it privately; "
                          "bounds are never read from the data")
    if isinstance(bounds, str):
        if bounds != "estimate":
            raise ConfigError(f"{name}={bounds!r} is not allowed: a pair (lo, hi) or "
                              "'estimate'")
        return None
    try:
        lo_raw, hi_raw = bounds
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={bounds!r} is not allowed: expected (lo, hi)") from None

    def per_feature(v: Any) -> np.ndarray | None:
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            return None
        if arr.ndim > 1 or arr.size not in (1, d):
            return None
        return np.broadcast_to(arr.reshape(-1), (d,)).copy()

    lo, hi = per_feature(lo_raw), per_feature(hi_raw)
    if lo is None or hi is None or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
                                        and np.all(lo < hi)):
        raise ConfigError(f"{name}={bounds!r} is not allowed: need finite lo < hi, as scalars "
                          f"or arrays of {d} values (one per feature)")
    return lo, hi


def declared_norm(data_norm: Any) -> float | None:
    """A declared row L2-norm bound, or None for ``"estimate"`` (ConfigError if bad)."""
    if data_norm is None:
        raise ConfigError("data_norm=None is not allowed: declare a bound on the rows' L2 "
                          f"norm, or pass data_norm='estimate' to spend {ESTIMATE_SHARE:.0%} "
                          "of epsilon estimating it privately; it is never read from the data")
    if isinstance(data_norm, str):
        if data_norm != "estimate":
            raise ConfigError(f"data_norm={data_norm!r} is not allowed: a number or 'estimate'")
        return None
    if isinstance(data_norm, bool) or not isinstance(data_norm, (int, float)) or \
            not (math.isfinite(data_norm) and data_norm > 0):
        raise ConfigError(f"data_norm={data_norm!r} is not allowed: must be finite and > 0")
    return float(data_norm)


def group_sums(Z: np.ndarray, groups: np.ndarray,
               n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: the count, the sums of the rows of Z and the sums of their squares.

    A record is in one group, so adding or removing it moves one row of each (by 1,
    ``|z|`` and ``z^2`` elementwise): the add/remove sensitivities are those of one row.
    """
    onehot = np.zeros((Z.shape[0], n_groups))
    onehot[np.arange(Z.shape[0]), groups] = 1.0
    return onehot.sum(0), onehot.T @ Z, onehot.T @ (Z * Z)


def _log_edges() -> np.ndarray:
    powers = 2.0 ** np.arange(_K_MIN, _K_MAX + 2)
    return np.concatenate((-powers[::-1], powers))


def estimate_bounds(X: Any, epsilon: float, *, ledger: Ledger | None = None,
                    rng: RngLike = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(lo, hi)`` of ``X`` (n, d), estimated with pure epsilon-DP.

    See the module docstring. Raises DataError when no bin stands out from the noise
    (too few rows for this epsilon): declare the bounds instead.
    """
    X = check_array(X, "X", ndim=2)
    epsilon = check_epsilon(epsilon)
    ledger = open_ledger(ledger, epsilon, 0.0)
    d = X.shape[1]
    edges = _log_edges()
    per_feature = epsilon / d
    reserve(ledger, estimate_events(d, epsilon), f"estimating bounds of {d} features")
    scale = 1.0 / per_feature
    threshold = scale * math.log((edges.size - 1) * d / (2 * _FAILURE)) + 0.5
    lo, hi = np.empty(d), np.empty(d)
    for j in range(d):
        counts = stats.histogram(X[:, j], edges, epsilon=per_feature, ledger=ledger,
                                 label=f"bounds of feature {j}", rng=rng).value
        busy = np.flatnonzero(counts > threshold)
        if busy.size == 0:
            raise DataError(f"feature {j}: no histogram bin stands out from the noise at "
                            f"epsilon={epsilon:g} ({X.shape[0]} rows); declare the bounds")
        lo[j], hi[j] = edges[busy[0]], edges[busy[-1] + 1]
    return lo, hi
