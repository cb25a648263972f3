"""Label differential privacy by randomized response (Ghazi, Golowich, Kumar, Manurangsi &
Zhang, "Deep learning with label differential privacy", NeurIPS 2021).

A training run is epsilon-label-DP when changing one example's label changes the
distribution of everything it outputs by at most e^epsilon. Randomizing every label once,
before training, with an epsilon-DP mechanism makes all later computation post-processing.

* :func:`randomize_labels` — K-ary randomized response (Warner 1965): keep the label with
  probability ``e^eps / (e^eps + K - 1)``, else report one of the other K - 1 uniformly
  (:class:`veil.dp.RandomizedResponse`, charged to the ledger as its own event).
* :func:`rr_with_prior` — RRWithPrior (Ghazi et al. 2021, Algorithm 2): with a prior p
  over the K classes for the example (from a model trained on earlier, already randomized
  stages), choose ``k* = argmax_k e^eps / (e^eps + k - 1) * (mass of the k most likely
  classes)``; if the true label is among those k*, keep it with probability
  ``e^eps / (e^eps + k* - 1)``, else report another of the k* uniformly; if it is not
  among them, report one of the k* uniformly. Every output has probability between q and
  e^eps q for q = 1 / (e^eps + k* - 1) whatever the label, so it is epsilon-DP for the
  label (their Lemma 1); the prior must not depend on the example's own true label.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_array, check_epsilon
from veil.dp import Ledger, RandomizedResponse
from veil.errors import ConfigError, DataError
from veil.random import check_rng

__all__ = ["randomize_labels", "rr_with_prior"]


def _codes(y: Any, classes: int) -> np.ndarray:
    y = check_array(y, "y", ndim=1, dtype=np.int64)
    if y.min() < 0 or y.max() >= classes:
        raise DataError(f"y holds labels outside 0..{classes - 1}")
    return y


def _need_ledger(ledger: Any) -> Ledger:
    if not isinstance(ledger, Ledger):
        raise ConfigError(f"ledger={ledger!r} is not allowed: label DP charges a "
                          "veil.dp.Ledger")
    return ledger


def randomize_labels(y: Any, classes: int, epsilon: float, ledger: Ledger, *,
                     rng: Any = None) -> np.ndarray:
    """Every label through K-ary randomized response, charged first (one event)."""
    y = _codes(y, classes)
    rr = RandomizedResponse(epsilon, categories=list(range(classes)))
    out = _need_ledger(ledger).release(rr, y, label="label randomized response",
                                       rng=check_rng(rng))
    return np.asarray(out, dtype=np.int64)


def rr_with_prior(y: Any, prior: Any, epsilon: float, *, rng: Any = None) -> np.ndarray:
    """RRWithPrior of every label given its row of ``prior`` (n x K probabilities).

    Not charged here: the caller charges one pure ``epsilon`` event for all the labels it
    randomizes once (see :class:`~veil.fl.vertical.split.SplitTop`).
    """
    eps = check_epsilon(epsilon)
    p = check_array(prior, "prior", ndim=2)
    y = _codes(y, p.shape[1])
    if p.shape[0] != y.size or np.any(p < 0):
        raise DataError(f"prior must be {y.size} rows of non-negative class probabilities")
    rng = check_rng(rng)
    n, k = p.shape
    order = np.argsort(-p, axis=1, kind="stable")
    mass = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
    e = math.exp(min(eps, 700.0))
    sizes = np.arange(1, k + 1)
    best = np.argmax(e / (e + sizes - 1) * mass, axis=1) + 1            # k* per row
    rank = np.argsort(order, axis=1)[np.arange(n), y]                   # y's rank
    inside = rank < best
    keep = rng.random(n) < e / (e + best - 1)
    pick = np.floor(rng.random(n) * best).astype(np.int64)              # uniform in top-k*
    other = np.floor(rng.random(n) * np.maximum(best - 1, 1)).astype(np.int64)
    other = np.where(other >= rank, other + 1, other)                   # uniform, not y
    choice = np.where(inside, np.where(keep | (best == 1), rank, other), pick)
    return order[np.arange(n), choice]


def label_event(epsilon: float) -> de.DpEvent:
    """The event of an epsilon-DP randomization of every label once: binary randomized
    response with keep probability e^eps / (e^eps + 1), whose privacy-loss pair dominates
    every pure epsilon-DP mechanism (Kairouz, Oh & Viswanath 2015, Thm. 4)."""
    eps = check_epsilon(epsilon)
    return de.RandomizedResponseDpEvent(noise_parameter=2.0 / (math.exp(min(eps, 700.0)) + 1.0),
                                        num_buckets=2)
