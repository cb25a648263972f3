"""DP-SGD for veil's numpy models (any :class:`veil.learn.base.GradientClassifier`).

Abadi et al. (CCS 2016), Algorithm 1, with Poisson sampling: ``steps = epochs * floor(1/q)``
batches, each example joining with probability ``q = batch_size / n`` with ``n`` the
declared public size (:mod:`veil.learn.public`), whatever the true size; per-example
gradients (the model's closed form) clipped to L2 norm ``C`` by
:func:`veil.dp.sensitivity.clip_l2`, summed, plus ``N(0, sigma^2 C^2 I)``, divided by the
expected batch size ``qn = batch_size``. sigma is calibrated with the ledger's accountant to
the target (epsilon, delta) and the whole schedule is charged before the first step, as in
:mod:`veil.learn.dpsgd`.
"""

from __future__ import annotations

import numpy as np

from veil.dp.accounting import calibrate_noise, subsampled_gaussian_event
from veil.dp.ledger import Ledger
from veil.dp.sensitivity import clip_l2
from veil.errors import ConfigError
from veil.learn.base import GradientClassifier
from veil.random import Generator

__all__ = ["dp_sgd"]


def dp_sgd(model: GradientClassifier, X: np.ndarray, y: np.ndarray, *, epsilon: float,
           delta: float, max_grad_norm: float, epochs: int, batch_size: int,
           learning_rate: float, ledger: Ledger, rng: Generator, n: int) -> float:
    """Train ``model`` (initialized) in place on ``X`` (of declared public size ``n``);
    returns the noise multiplier used."""
    if not 1 <= batch_size <= n:
        raise ConfigError(f"batch_size={batch_size} is not allowed: must be in [1, {n}] "
                          "(the declared dataset size n)")
    if delta == 0.0:
        raise ConfigError("delta=0 is not allowed with method='dpsgd' (Gaussian noise); use "
                          "delta > 0 or method='objective'")
    q = batch_size / n
    steps = epochs * max(1, int(1.0 / q))
    sigma = calibrate_noise(epsilon, delta, q, steps, ledger.accountant)
    ledger.charge(subsampled_gaussian_event(sigma, q, steps), delta=delta,  # one block
                  label=f"dp-sgd {type(model).__name__}: {steps} steps, q={q:.4g}, "
                        f"sigma={sigma:.4g}, C={max_grad_norm:g}")
    w = model.get_params_vector()
    for _ in range(steps):
        rows = np.flatnonzero(rng.bernoulli(q, X.shape[0]))
        total = np.zeros_like(w)
        if rows.size:
            grads, _ = clip_l2(model.per_example_gradients(X[rows], y[rows]), max_grad_norm)
            total = grads.sum(axis=0)
        noisy = total + max_grad_norm * sigma * rng.standard_normal(w.size)
        w = w - learning_rate * noisy / (q * n)
        model.set_params_vector(w)
    return sigma
