"""Secure linear and logistic regression against the same schedule in floating point.

The plaintext references run the identical full-batch gradient descent (same learning rate,
iterations, intercept column) in float64 with the same piecewise-linear sigmoid
(veil.mpc.protocols.sigmoid_reference), so the only differences are fixed-point rounding:
inputs are encoded to 2^-17, every product is truncated to within 2^-16 with mean zero, and
the 1e-3 tolerance of the issue is about 60 units of 2^-16.
"""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import DataError
from veil.mpc import Session
from veil.mpc.models import LinearRegression, LogisticRegression, share_columns, share_rows
from veil.mpc.protocols import sigmoid_reference


def _reference(X, y, lr, iters, link, alpha=0.0):
    n = X.shape[0]
    Xb = np.c_[X, np.ones(n)]
    w = np.zeros(Xb.shape[1])
    for _ in range(iters):
        penalty = alpha * n * np.r_[w[:-1], 0.0]  # no penalty on the intercept
        w = w - lr / n * (Xb.T @ (link(Xb @ w) - y) + penalty)
    return w


@pytest.fixture(scope="module")
def breast_cancer():
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y.astype(np.float64)


def test_logistic_regression_horizontal_matches_plaintext(breast_cancer):
    X, y = breast_cancer
    expected = _reference(X, y, 1.0, 15, sigmoid_reference)
    with Session(parties=2, rng=1) as s:
        Xs = share_rows(s, [X[:250], X[250:]])
        ys = share_rows(s, [y[:250], y[250:]])
        model = LogisticRegression(learning_rate=1.0, max_iter=15).fit(Xs, ys)
        weights = np.r_[model.coef_.reveal(), model.intercept_.reveal()]
        assert np.max(np.abs(weights - expected)) <= 1e-3
        accuracy = model.score(Xs, y)
        proba = model.predict_proba(Xs[:5]).reveal()
    assert accuracy >= 0.95
    z = np.c_[X[:5], np.ones(5)] @ expected
    assert np.all(np.abs(proba - sigmoid_reference(z)) <= 1e-3)


def test_logistic_regression_vertical_three_parties(breast_cancer):
    X, y = breast_cancer
    expected = _reference(X, y, 1.0, 8, sigmoid_reference)
    with Session(parties=3, rng=2) as s:
        Xs = share_columns(s, [X[:, :10], X[:, 10:20], X[:, 20:]])  # each party 10 features
        ys = s.share(y, owner=0)                                    # the label holder
        model = LogisticRegression(learning_rate=1.0, max_iter=8).fit(Xs, ys)
        weights = np.r_[model.coef_.reveal(), model.intercept_.reveal()]
        labels = model.predict(Xs).reveal()
    assert np.max(np.abs(weights - expected)) <= 1e-3
    plain = (np.c_[X, np.ones(len(y))] @ expected >= 0).astype(int)
    assert np.mean(labels == plain) >= 0.99  # only rows with |z| < 1e-3 could differ


def test_linear_regression_matches_plaintext_and_least_squares():
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import LinearRegression as OLS

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    y = (y - y.mean()) / y.std()
    expected = _reference(X, y, 0.3, 60, lambda z: z)
    with Session(parties=3, rng=3) as s:
        Xs, ys = share_rows(s, [X[:200], X[200:]]), share_rows(s, [y[:200], y[200:]])
        model = LinearRegression(learning_rate=0.3, max_iter=60).fit(Xs, ys)
        weights = np.r_[model.coef_.reveal(), model.intercept_.reveal()]
        r2 = model.score(Xs, y)
    assert np.max(np.abs(weights - expected)) <= 1e-3
    ols = OLS().fit(X, y)
    assert abs(r2 - ols.score(X, y)) <= 0.01  # gradient descent is near the optimum
    ridge = _reference(X, y, 0.3, 20, lambda z: z, alpha=0.5)
    with Session(parties=2, rng=4) as s:
        model = LinearRegression(learning_rate=0.3, max_iter=20, alpha=0.5)
        model.fit(s.share(X, owner=0), s.share(y, owner=1))
        weights = np.r_[model.coef_.reveal(), model.intercept_.reveal()]
    assert np.max(np.abs(weights - ridge)) <= 1e-3
    assert np.linalg.norm(ridge[:-1]) < np.linalg.norm(expected[:-1])  # shrunk


def test_model_bad_input():
    with Session(parties=2, rng=0) as s:
        X = s.share(np.ones((4, 2)), owner=0)
        with pytest.raises(DataError, match="shape \\(4,\\)"):
            LogisticRegression().fit(X, s.share(np.ones(3), owner=1))
        with pytest.raises(DataError, match="2-d SharedTensor"):
            LinearRegression().fit(np.ones((4, 2)), s.share(np.ones(4), owner=1))
        with pytest.raises(DataError, match="not fitted"):
            LinearRegression().predict(X)
        model = LinearRegression(max_iter=1).fit(X, s.share(np.ones(4), owner=1))
        with pytest.raises(DataError, match="3 features"):
            model.predict(s.share(np.ones((2, 3)), owner=0))
