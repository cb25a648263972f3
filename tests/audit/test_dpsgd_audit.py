"""Auditing veil's own DP-SGD with white-box coordinate canaries (one training run each)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification

from veil.audit import coordinate_canaries
from veil.dp import PrivacyBudget
from veil.errors import DataError

DELTA = 1e-5


def train(epsilon, seed, *, private=True):
    """Full-batch DP-SGD of a bias-free logistic regression on data + 300 canaries."""
    torch = pytest.importorskip("torch")
    from veil.learn.dpsgd import make_private

    X, y = make_classification(n_samples=400, n_features=10, random_state=seed)
    X = np.hstack([X / 4.0, np.ones((400, 1))])
    canaries = coordinate_canaries(X.shape[1], 300, rng=seed)
    Xt, yt = canaries.training_set(X, y)
    model = torch.nn.Linear(Xt.shape[1], 2, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    sgd = torch.optim.SGD(model.parameters(), lr=5.0)
    data = (torch.from_numpy(Xt.astype(np.float32)), torch.from_numpy(yt))
    steps, certified, loader = 10, None, [data]
    loss_fn = torch.nn.CrossEntropyLoss()
    if private:
        model, sgd, loader = make_private(model, sgd, data,
                                          budget=PrivacyBudget(epsilon, DELTA),
                                          max_grad_norm=0.5, epochs=steps, sample_rate=1.0,
                                          rng=seed)
        certified = sgd.plan.epsilon
    for _ in range(steps):
        for xb, yb in loader:
            sgd.zero_grad()
            loss_fn(model(xb), yb).backward()
            sgd.step()
    weights = (model.module if private else model).weight.detach().numpy().astype(float)
    return canaries, weights, certified


def test_dpsgd_audit_stays_below_the_certified_epsilon():
    bounds = []
    for seed in range(3):
        canaries, w, certified = train(2.0, seed)
        bounds.append(canaries.audit(w, delta=DELTA, rng=seed).epsilon)
        assert certified == pytest.approx(2.0, rel=0.02)
        assert bounds[-1] <= certified
    assert max(bounds) > 0.2  # and the canaries do register the leak (measured 0.43)


def test_non_private_sgd_is_caught():
    canaries, w, _ = train(None, 0, private=False)
    bound = canaries.audit(w, rng=1)
    # no noise: every canary's column moved only if it was trained on -> all guesses right
    assert bound.correct == bound.guesses
    assert bound.epsilon > 0.85 * bound.max_certifiable


def test_coordinate_canaries_layout():
    canaries = coordinate_canaries(3, 5, label=1, rng=2)
    X, y = canaries.training_set(np.ones((4, 3)), np.zeros(4, dtype=int))
    k = int(canaries.included.sum())
    assert X.shape == (4 + k, 8) and np.all(y[4:] == 1)
    np.testing.assert_array_equal(X[4:, 3:].sum(axis=0), canaries.included)
    w = np.zeros((2, 8))
    w[1, 3:] = np.arange(5)
    np.testing.assert_array_equal(canaries.scores(w), np.arange(5))
    with pytest.raises(DataError, match="columns"):
        canaries.pad(np.ones((2, 4)))
    with pytest.raises(DataError, match="shape"):
        canaries.scores(np.zeros((2, 7)))
