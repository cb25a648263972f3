"""Differential privacy for the secret-shared vertical logistic regression: noisy gradients.

``VerticalLogisticRegression("ss", epsilon=..., clip=...)`` (:mod:`veil.fl.vertical.linear`)
trains by full-batch gradient descent on secret shares (:class:`veil.mpc.models.
LogisticRegression`); every step adds discrete Gaussian noise to the shared gradient sum
``G = X^T (h(X w) - y)`` before the step ``w <- w - (lr / n)(G + Z + alpha n P w)``, so that
the released weights (each party's block, revealed to that party) are
(epsilon, delta)-differentially private with respect to one row of the aligned table.

Neighbouring tables: the same ``n`` aligned rows (the intersection size is released by the
alignment anyway) with one row replaced - its features at every party and its label.

Sensitivity of one step. Each party clips its own block of every row to L2 norm ``c_k``
(its own preprocessing, :func:`clip_rows`); with the intercept's constant 1 (and the
fixed-point rounding of the features, half a unit ``2^-f`` per entry) a row has
``||x|| <= R = sqrt(1 + sum_k (c_k + sqrt(d_k) 2^-(f+1))^2)``. The row's term of G is
``x (h(z) - y)`` with ``|h(z) - y| <= H``: the piecewise-linear sigmoid of
:mod:`veil.mpc.protocols` lies in ``[v_0, 1 - v_0]`` (``v_0 = 0.00775``), and its shared
evaluation (public constants encoded with relative precision ``2^-f``, products truncated
by less than one unit) stays within a few units ``2^-f`` of it (``H`` below adds eight, and
the encoded slope of the tails times the largest representable z). For the same
truncation randomness the other rows' terms are bit-identical, and the single truncation
of the sum errs by less than one unit per entry in either table, so ``||G(D) - G(D')|| <=
Delta = 2 R H + 2 sqrt(d + 1) 2^-f`` whatever the weights (Abadi et al. 2016's
argument, with the clipping done per party on its own columns).

Mechanism. G and the noise are integers in units of ``2^-f``; each of two parties - the
guest and the first host - draws ``Z`` from the discrete Gaussian of standard deviation
``sigma`` (Canonne, Kamath & Steinke 2020, Algorithm 3; :func:`veil.dp.samplers.
discrete_gaussian`) from its own CSPRNG and secret-shares it into the step, so each of
them, and every other party, is ignorant of at least one full-sigma noise vector: against
any single party the step is the discrete Gaussian mechanism of L2 sensitivity Delta,
``rho = Delta^2 / (2 sigma^2)``-zCDP (their Theorem 14), the other noise being
post-processing. T steps compose to ``T rho`` (Bun & Steinke 2016); sigma is the smallest
whose ``T rho`` certifies (epsilon, delta) (:func:`veil.dp.gaussian.zcdp_rho`). The
revealed weights and everything computed from them are post-processing. Every party's
own :class:`~veil.dp.Ledger` is charged the whole run (``T`` zCDP events) before the
first step; a ledger it does not fit refuses the run before anything is charged.

Threat model: that of :mod:`veil.mpc.session` (semi-honest parties, a trusted dealer that
sees no shares), plus: no party colludes with the guest and the first host at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_delta, check_epsilon, check_positive
from veil.dp.gaussian import zcdp_rho
from veil.dp.samplers import discrete_gaussian
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.mpc.fixedpoint import INPUT_BITS, encode_constant
from veil.mpc.protocols import SIGMOID_KNOTS, SIGMOID_VALUES
from veil.random import check_rng

__all__ = ["GradientNoise", "clip_rows", "sigmoid_bound"]

log = logging.getLogger(__name__)

#: units 2^-f allowed for the shared sigmoid's own rounding (module docstring)
_ROUNDING_UNITS = 8


def clip_rows(X: np.ndarray, bound: float) -> np.ndarray:
    """Every row of ``X`` scaled down to L2 norm at most ``bound`` (a party's own block)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


def sigmoid_bound(frac_bits: int) -> float:
    """H: an upper bound on ``|h(z) - y|`` for the shared sigmoid h, y in {0, 1}, any
    representable z (module docstring)."""
    slopes = np.diff(SIGMOID_VALUES) / np.diff(SIGMOID_KNOTS)
    changes = np.diff(np.concatenate([[0.0], slopes, [0.0]]))
    ring, bits = encode_constant(changes, frac_bits)
    tail = abs(int(ring.view(np.int64).sum())) / 2.0 ** bits   # the tails' encoded slope
    top = max(1.0 - SIGMOID_VALUES[0], SIGMOID_VALUES[-1])
    return top + tail * 2.0 ** (INPUT_BITS - frac_bits) + _ROUNDING_UNITS * 2.0 ** -frac_bits


class GradientNoise:
    """The calibration and the noise of one private training run (module docstring).

    ``widths``: the parties' feature counts (guest first); ``clip``: each party's row-norm
    bound (one value for all, or one per party); ``steps``: gradient steps T.
    """

    def __init__(self, widths: Sequence[int], clip: float | Sequence[float], steps: int,
                 epsilon: float, delta: float, *, frac_bits: int,
                 fit_intercept: bool = True) -> None:
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.delta = check_delta(delta, "delta")
        if self.delta == 0.0:
            raise ConfigError("delta=0 is not allowed: Gaussian noise needs delta > 0")
        bounds = [clip] * len(widths) if np.isscalar(clip) else list(clip)
        if len(bounds) != len(widths):
            raise ConfigError(f"clip has {len(bounds)} bounds for {len(widths)} parties; give "
                              "one for all or one per party")
        self.clip = [check_positive(c, f"clip[{k}]") for k, c in enumerate(bounds)]
        self.steps = int(steps)
        self.widths = [int(w) for w in widths]
        unit = 2.0 ** -frac_bits
        self.frac_bits = frac_bits
        radius2 = sum((c + math.sqrt(w) * unit / 2) ** 2 for c, w in zip(self.clip, widths))
        self.radius = math.sqrt(radius2 + (1.0 if fit_intercept else 0.0))
        size = sum(self.widths) + (1 if fit_intercept else 0)
        self.size = size
        self.sensitivity = 2 * self.radius * sigmoid_bound(frac_bits) + 2 * math.sqrt(size) * unit
        rho = zcdp_rho(self.epsilon, self.delta)
        #: in units of 2^-f, as the noise is drawn
        self.sigma = self.sensitivity / unit * math.sqrt(self.steps / (2.0 * rho)) * (1 + 1e-12)
        step_rho = (self.sensitivity / unit) ** 2 / (2.0 * self.sigma ** 2)
        self.event = de.SelfComposedDpEvent(de.ZCDpEvent(step_rho), self.steps)
        self._rngs: list[Any] = []

    def clip_blocks(self, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each party's block clipped to its own bound."""
        if [b.shape[1] for b in blocks] != self.widths:
            raise DataError(f"blocks of {[b.shape[1] for b in blocks]} columns; the noise was "
                            f"calibrated for {self.widths}")
        return [clip_rows(b, c) for b, c in zip(blocks, self.clip)]

    def charge(self, ledgers: Sequence[Any], rngs: Sequence[Any] = (None, None)) -> None:
        """Charge every party's ledger the whole run (all fit, or none is charged); the two
        drawers' generators (None: the CSPRNG; seeds in tests only)."""
        if len(ledgers) != len(self.widths) or any(ledger is None for ledger in ledgers):
            raise ConfigError(f"ledgers: one Ledger per party ({len(self.widths)}) is needed "
                              "for the noisy gradients")
        for k, ledger in enumerate(ledgers):
            if not ledger.fits(self.event, delta=self.delta):
                raise BudgetExceededError(
                    f"epsilon={self.epsilon}, delta={self.delta} over {self.steps} noisy "
                    f"gradient steps does not fit party {k}'s ledger; nothing was charged")
        for ledger in ledgers:
            ledger.charge(self.event, label=f"vertical SS-LR: {self.steps} noisy gradients "
                          f"(sigma {self.sigma:.4g} units 2^-{self.frac_bits})",
                          delta=self.delta)
        self._rngs = [check_rng(r) for r in rngs]
        log.info("noisy SS-LR: sensitivity %.4g, sigma %.4g units, %d steps",
                 self.sensitivity, self.sigma, self.steps)

    def __call__(self, session: Any, step: int) -> Any:
        """The shared noise of ``step``: the guest's (party 0) and the first host's (party
        1) draws, each input by its drawer."""
        if not self._rngs:
            raise ConfigError("charge() the ledgers before drawing noise")
        unit = 2.0 ** -self.frac_bits
        parts = [session.share(discrete_gaussian(self.sigma, self.size, rng) * unit, owner=k)
                 for k, rng in enumerate(self._rngs)]
        return parts[0] + parts[1]
