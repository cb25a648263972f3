"""Canary clients in a federated run: the one-run audit and party-aggregate MI."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from veil.audit import label_flip_canaries, make_canaries, mi_ceiling, party_aggregate_mi
from veil.dp import Ledger
from veil.dp.accounting import calibrate_noise
from veil.errors import ConfigError, DataError
from veil.random import default_rng

DIM, CLIENTS, ROUNDS, CLIP = 5000, 40, 4, 1.0


def federated_aggregates(canaries, noise_multiplier: float, seed: int) -> np.ndarray:
    """DP-FedAvg aggregates (McMahan et al. 2018): every round each client sends an update
    clipped to L2 norm CLIP, included canary clients send their crafted update of norm CLIP,
    and the server releases the sum plus N(0, (noise_multiplier * CLIP)^2 I)."""
    g = default_rng(seed)
    out = np.empty((ROUNDS, DIM))
    for t in range(ROUNDS):
        updates = g.standard_normal((CLIENTS, DIM)) + 0.1
        updates *= CLIP / np.linalg.norm(updates, axis=1, keepdims=True)
        noise = noise_multiplier * CLIP * g.standard_normal(DIM)
        out[t] = updates.sum(axis=0) + canaries.included_sum(CLIP) + noise
    return out


def test_canary_clients_audit_dp_fedavg_within_its_certified_epsilon():
    epsilon, delta = 2.0, 1e-5
    sigma = calibrate_noise(epsilon, delta, steps=ROUNDS, accountant="pld")
    ledger = Ledger(epsilon, delta)  # one client's add/remove moves each round's sum by CLIP
    ledger.charge(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma),
                                                    ROUNDS))
    certified, _ = ledger.spent()
    bounds = []
    for seed in range(5):
        canaries = make_canaries(400, DIM, rng=seed)
        bound = canaries.audit(federated_aggregates(canaries, sigma, seed + 100),
                               delta=delta, rng=seed)
        bounds.append(bound.epsilon)
    assert max(bounds) <= certified
    assert np.mean(bounds) > 0.2  # the canaries do see the leak


def test_canary_clients_expose_non_private_fedavg():
    canaries = make_canaries(400, DIM, rng=7)
    aggregates = federated_aggregates(canaries, 0.0, 8)
    bound = canaries.audit(aggregates, rng=1)
    # without noise the canary's own projection (ROUNDS * CLIP = 4) towers over the
    # cross-talk of 160 other unit vectors (sd ~ sqrt(160 * ROUNDS / DIM) ~ 0.36)
    assert bound.correct == bound.guesses
    assert bound.epsilon > 0.85 * bound.max_certifiable  # ~200 included: (200, 200) may not fit
    mi = party_aggregate_mi(canaries, aggregates, rng=1)
    assert mi.value > 0.6  # close to log 2 = 0.693: presence is fully visible


def test_party_aggregate_mi_respects_the_dp_ceiling():
    epsilon, delta = 1.0, 1e-5
    sigma = calibrate_noise(epsilon, delta, steps=ROUNDS, accountant="pld")
    canaries = make_canaries(2000, DIM, rng=9)
    mi = party_aggregate_mi(canaries, federated_aggregates(canaries, sigma, 10), rng=2)
    ceiling = mi_ceiling(epsilon, delta)  # 0.12 nats at epsilon = 1
    assert mi.lower <= ceiling
    assert mi.value < ceiling + 0.05  # the estimate's sd at 2000 canaries is ~0.02


def test_mi_ceiling_formula():
    assert mi_ceiling(0.0) == pytest.approx(0.0, abs=1e-15)
    assert mi_ceiling(50.0) == pytest.approx(math.log(2), rel=1e-9)
    p = 1 / (1 + math.e)
    h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert mi_ceiling(1.0, 0.1) == pytest.approx(math.log(2) - 0.9 * h)


def test_dirac_and_gaussian_canaries():
    dirac = make_canaries(50, 200, kind="dirac", rng=3)
    assert np.unique(dirac.coordinates).size == 50
    v = dirac.update(7, norm=2.5)
    assert v[dirac.coordinates[7]] == 2.5 and np.count_nonzero(v) == 1
    total = dirac.included_sum(1.0)
    np.testing.assert_array_equal(dirac.scores(total), dirac.included.astype(float))
    gauss = make_canaries(20, 300, rng=4)
    np.testing.assert_allclose(np.linalg.norm(gauss.directions, axis=1), 1.0)
    rounds = np.vstack([gauss.update(0), gauss.update(1)])
    np.testing.assert_allclose(gauss.scores(rounds), gauss.scores(rounds.sum(axis=0)))
    with pytest.raises(DataError, match="dimension"):
        gauss.scores(np.zeros(10))
    with pytest.raises(DataError, match="distinct coordinates"):
        make_canaries(300, 200, kind="dirac")
    with pytest.raises(ConfigError, match="kind"):
        make_canaries(3, 10, kind="uniform")


def test_label_flip_canaries_change_every_label():
    y = np.repeat(np.arange(4), 50)
    X = np.arange(400.0).reshape(200, 2)
    canaries = label_flip_canaries(X, y, 120, rng=5)
    original = y[(canaries.X[:, 0] / 2).astype(int)]
    assert np.all(canaries.y != original)
    assert 0.3 < canaries.included.mean() < 0.7
    Xt, yt = canaries.training_set(X[:10], y[:10])
    assert len(yt) == 10 + canaries.included.sum()
