"""Shared set-up for the federated-learning tests."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from veil.fl.protocol import ClientUpdate
from veil.fl.strategies import FedAvg


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # small matrices: BLAS threads only contend on the shared 2-core machine
    with threadpool_limits(1):
        yield


class KnownUpdates(FedAvg):
    """A FedAvg whose clients send a known function of their data instead of training:
    delta = scale * [mean of X's columns, mean of y]. Tests recompute it exactly."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def client_update(self, trainer, params, config, rng):
        return ClientUpdate(self.delta(trainer.X, trainer.y), self._weight(trainer.n_examples))

    def delta(self, X, y):
        return self.scale * np.append(X.mean(axis=0), y.mean())


def make_clients(n_clients: int, d: int = 6, rows: int = 30, seed: int = 0):
    """Synthetic binary-classification clients (different sizes) for LogisticRegression."""
    gen = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        n = rows + 3 * k
        X = gen.normal(size=(n, d))
        y = (X[:, 0] + 0.5 * gen.normal(size=n) > 0).astype(int)
        y[:2] = [0, 1]  # both classes everywhere
        out.append((X, y))
    return out


@pytest.fixture
def known_updates():
    return KnownUpdates


@pytest.fixture
def clients():
    return make_clients
