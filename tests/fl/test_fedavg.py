"""FedAvg and FedProx: exact aggregation, equivalence with centralized gradient descent."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ConfigError
from veil.fl import Federation
from veil.fl.strategies import FedAvg, FedProx
from veil.learn import LogisticRegression, SoftmaxRegression


def test_one_full_batch_local_step_is_centralized_gradient_descent(clients):
    data = clients(5)
    lr, rounds = 0.3, 4
    fed = Federation(data, LogisticRegression(alpha=0.01),
                     FedAvg(local_epochs=1, learning_rate=lr, batch_size=None), rounds, rng=0)
    history = fed.run()
    # centralized: w <- w - lr grad F(w) on the union, F the mean loss + (alpha/2)||W||^2
    X = np.vstack([X for X, _ in data])
    y = np.concatenate([y for _, y in data])
    central = LogisticRegression(alpha=0.01).initialize(X.shape[1], [0, 1])
    for _ in range(rounds):
        w = central.get_params_vector()
        central.set_params_vector(w - lr * central.gradient(X, y))
    # sum_k (n_k/n) grad F_k = grad F exactly; only float rounding differs
    np.testing.assert_allclose(history.params, central.get_params_vector(), rtol=0, atol=1e-12)


def test_weighted_averaging_is_exact(clients, known_updates):
    data = clients(4)
    strategy = known_updates(scale=0.5)
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    params = fed.run().params
    n = np.array([len(y) for _, y in data], dtype=float)
    deltas = np.array([strategy.delta(X, y) for X, y in data])
    expected = fed.initial_params + (n[:, None] * deltas).sum(axis=0) / n.sum()
    np.testing.assert_allclose(params, expected, rtol=0, atol=1e-15)
    # unweighted and capped weights
    for kwargs, w in [({"weighted": False}, np.ones(4)),
                      ({"max_weight": 33.0}, np.minimum(n, 33.0) / 33.0)]:
        fed = Federation(data, LogisticRegression(), known_updates(scale=0.5, **kwargs), 1,
                         rng=0)
        expected = fed.initial_params + (w[:, None] * deltas).sum(axis=0) / w.sum()
        np.testing.assert_allclose(fed.run().params, expected, rtol=0, atol=1e-15)


def test_client_sampling_per_round(clients, known_updates):
    data = clients(10)
    seen = []
    fed = Federation(data, LogisticRegression(), known_updates(fraction=0.3), 6, rng=3,
                     on_progress=lambda r: seen.append(r["sampled"]))
    history = fed.run()
    assert seen == [3] * 6
    assert all(r["aggregated"] == 3 for r in history.rounds)
    strategy = FedAvg(fraction=0.3)
    from veil.random import Generator

    picks = {tuple(strategy.sample(0, list(range(10)), Generator(s))) for s in range(30)}
    assert len(picks) > 20  # different subsets in different rounds
    assert FedAvg(fraction=0.01, min_clients=2).sample(0, list(range(10)), Generator(0)) \
        .__len__() == 2


def test_fedprox_pulls_towards_the_global_model(clients):
    data = clients(3, rows=60)
    base = dict(local_epochs=5, learning_rate=0.5, batch_size=8)
    fedavg = Federation(data, SoftmaxRegression(), FedAvg(**base), 1, rng=1).run().params
    same = Federation(data, SoftmaxRegression(), FedProx(mu=0.0, **base), 1, rng=1).run().params
    np.testing.assert_array_equal(same, fedavg)  # mu = 0 is FedAvg
    prox = Federation(data, SoftmaxRegression(), FedProx(mu=1.0, **base), 1, rng=1).run().params
    assert np.linalg.norm(prox) < 0.8 * np.linalg.norm(fedavg)  # started from 0


def test_bad_parameters_are_config_errors(clients):
    with pytest.raises(ConfigError, match="fraction"):
        FedAvg(fraction=0)
    with pytest.raises(ConfigError, match="mu"):
        FedProx(mu=-1)
    with pytest.raises(ConfigError, match="strategy"):
        Federation(clients(2), LogisticRegression(), "fedavg", 1)
    with pytest.raises(ConfigError, match="rounds"):
        Federation(clients(2), LogisticRegression(), FedAvg(), 0)
