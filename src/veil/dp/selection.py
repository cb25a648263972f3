"""Private selection: the exponential mechanism and report-noisy-max.

Exponential mechanism (McSherry & Talwar 2007): given utilities ``u_i(D)`` of candidates
with sensitivity ``Delta_u`` (each ``u_i`` moves by at most ``Delta_u`` between neighbours),
choose ``i`` with probability proportional to ``exp(epsilon u_i / (2 Delta_u))``; it is
epsilon-DP. When the utilities are *monotone* (all move in the same direction between
neighbours, e.g. counts) ``exp(epsilon u_i / Delta_u)`` suffices.

Report-noisy-max (Dwork & Roth 2014, Claim 3.9 and Section 3.3): return
``argmax_i u_i + Lap(b)``; with ``b = 2 Delta_u / epsilon`` it is epsilon-DP (``Delta_u /
epsilon`` for monotone utilities).

Both are sampled exactly by :func:`veil.dp.samplers.noisy_argmax` (Gumbel-max for the
exponential mechanism), so floating point cannot bias the choice. Neither has a
dp_accounting event of its own; their cost is :func:`pure_dp_event`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_array, check_epsilon, check_positive
from veil.dp._numeric import div_down, div_up
from veil.dp.mechanism import Mechanism
from veil.dp.samplers import noisy_argmax
from veil.errors import ConfigError, DataError
from veil.random import Generator

__all__ = ["Exponential", "ReportNoisyMax", "pure_dp_event"]


def pure_dp_event(epsilon: float) -> de.RandomizedResponseDpEvent:
    """The cost of any (epsilon, 0)-DP mechanism, as a dp_accounting event.

    Binary randomized response with odds e^epsilon (noise parameter
    ``p = 2 / (1 + e^epsilon)``, rounded down) is the worst case of every epsilon-DP
    mechanism: on any neighbouring pair, the mechanism's two output distributions are a
    post-processing of randomized response's (Kairouz, Oh & Viswanath 2015), so composing
    this event is sound for the PLD and RDP accountants.
    """
    epsilon = check_epsilon(epsilon)
    q = math.exp(-epsilon)
    p = 2.0 * q / (1.0 + q) * (1.0 - 2.0 ** -50)
    if p == 0.0:
        raise ConfigError(f"epsilon={epsilon!r} is not allowed: above about 700 the cost of a "
                          "pure-DP release underflows double precision")
    return de.RandomizedResponseDpEvent(noise_parameter=p, num_buckets=2)


def _candidates(value: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """``utilities`` or ``(utilities, multiplicities)`` as arrays (DataError when bad)."""
    if isinstance(value, tuple) and len(value) == 2:
        utilities, mult = value
        m = check_array(mult, "multiplicities", ndim=1)
        if np.any(m < 0) or not np.any(m > 0):
            raise DataError("multiplicities must be >= 0 with at least one > 0")
    else:
        utilities, m = value, None
    u = check_array(utilities, "utilities", ndim=1)
    if m is not None and m.shape != u.shape:
        raise DataError(f"multiplicities have shape {m.shape}; utilities have {u.shape}")
    return u, m


class _Selection(Mechanism):
    """A pure epsilon-DP choice of one index among scored candidates: the budget, the
    scores' sensitivity and whether they are monotone (every score moves the same way
    between neighbours, which halves the noise), validated once for both selections."""

    def __init__(self, epsilon: float, sensitivity: float = 1.0, *,
                 monotone: bool = False) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = 0.0
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.monotone = bool(monotone)

    @property
    def _spread(self) -> float:
        """The score range a neighbour can move: 2 sensitivity, or sensitivity if monotone."""
        return self.sensitivity * (1.0 if self.monotone else 2.0)

    @property
    def event(self) -> de.DpEvent:
        return pure_dp_event(self.epsilon)

    def __repr__(self) -> str:
        kind = ", monotone" if self.monotone else ""
        return (f"{type(self).__name__}(epsilon={self.epsilon:g}, "
                f"sensitivity={self.sensitivity:g}{kind})")


class Exponential(_Selection):
    """Choose candidate i with probability proportional to ``m_i exp(coef * u_i)``.

    ``coef = epsilon / (2 sensitivity)`` (``epsilon / sensitivity`` with ``monotone=True``),
    rounded down. Release a 1-D array of utilities, or ``(utilities, multiplicities)``
    where ``m_i`` counts candidates sharing utility ``u_i`` (a base measure, as in the
    quantile mechanism); the result is the chosen index.
    """

    def __init__(self, epsilon: float, sensitivity: float = 1.0, *,
                 monotone: bool = False) -> None:
        super().__init__(epsilon, sensitivity, monotone=monotone)
        self.coef = div_down(self.epsilon, self._spread)

    def check(self, value: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Validate candidates before anything is charged."""
        return _candidates(value)

    def probabilities(self, value: Any) -> np.ndarray:
        """The selection probabilities (for inspection; sampling never uses them)."""
        u, m = self.check(value)
        logits = self.coef * u + (0.0 if m is None else np.log(np.where(m > 0, m, 1.0)))
        if m is not None:
            logits = np.where(m > 0, logits, -np.inf)
        w = np.exp(logits - logits.max())
        return w / w.sum()

    def _randomize(self, value: Any, rng: Generator) -> int:
        u, m = self.check(value)
        return noisy_argmax(u, coef=self.coef, multiplicities=m, noise="gumbel", rng=rng)


class ReportNoisyMax(_Selection):
    """``argmax_i u_i + Lap(b)``, ``b = 2 sensitivity / epsilon`` (``sensitivity / epsilon``
    with ``monotone=True``), rounded up. Release a 1-D array of scores; get an index."""

    def __init__(self, epsilon: float, sensitivity: float = 1.0, *,
                 monotone: bool = False) -> None:
        super().__init__(epsilon, sensitivity, monotone=monotone)
        self.scale = div_up(self._spread, self.epsilon)

    def check(self, value: Any) -> np.ndarray:
        """Validate the scores before anything is charged."""
        return check_array(value, "scores", ndim=1)

    def _randomize(self, value: Any, rng: Generator) -> int:
        scores = self.check(value)
        return noisy_argmax(scores, noise="laplace", scale=self.scale, rng=rng)
