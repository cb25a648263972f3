"""veil.learn's numpy linear models: gradients, the flat-parameter API, scikit-learn parity."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from threadpoolctl import threadpool_limits

from veil.datasets import load_xy
from veil.errors import ConfigError, DataError
from veil.learn import LinearSVC, LogisticRegression, SoftmaxRegression


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # the matrices here are small: BLAS threads only contend on the shared 2-core machine
    with threadpool_limits(1):
        yield


def _data(k: int, n: int = 120, d: int = 5, seed: int = 0):
    gen = np.random.default_rng(seed)
    X = gen.normal(size=(n, d))
    W = gen.normal(size=(d, k))
    y = np.argmax(X @ W + 0.5 * gen.normal(size=(n, k)), axis=1) if k > 1 else \
        (X[:, 0] + 0.3 * gen.normal(size=n) > 0).astype(int)
    return X, y


MODELS = [
    (LogisticRegression, {}, 1),
    (SoftmaxRegression, {}, 3),
    (LinearSVC, {"loss": "squared_hinge"}, 3),
    (LinearSVC, {"loss": "squared_hinge"}, 1),
    (LinearSVC, {"loss": "hinge", "solver": "sgd", "max_iter": 5}, 3),
]


@pytest.mark.parametrize("cls, kwargs, k", MODELS)
def test_gradient_matches_finite_differences(cls, kwargs, k):
    X, y = _data(k)
    model = cls(alpha=0.1, **kwargs).fit(X, y)
    w = model.get_params_vector()
    w = w + np.random.default_rng(1).normal(scale=0.3, size=w.size)  # off the optimum
    model.set_params_vector(w)
    g = model.gradient(X, y)
    h = 1e-6
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = h
        up = model.set_params_vector(w + e).objective(X, y)
        down = model.set_params_vector(w - e).objective(X, y)
        # central differences: O(h^2) truncation + O(eps/h) rounding; the hinge is
        # piecewise linear, so a kink inside [w - h, w + h] would show: none at this seed
        assert abs((up - down) / (2 * h) - g[i]) < 1e-6
    model.set_params_vector(w)


@pytest.mark.parametrize("cls, kwargs, k", MODELS)
def test_per_example_gradients_average_to_the_gradient(cls, kwargs, k):
    X, y = _data(k, n=40)
    model = cls(alpha=0.05, **kwargs).fit(X, y)
    G = model.per_example_gradients(X, y)
    assert G.shape == (40, model.n_params_)
    reg = 0.05 * model.get_params_vector() * model._regularized()
    np.testing.assert_allclose(G.mean(axis=0) + reg, model.gradient(X, y), atol=1e-12)
    # each row is the gradient of that example alone
    np.testing.assert_allclose(G[3] + reg, model.gradient(X[3:4], y[3:4]), atol=1e-12)


def test_logistic_regression_matches_scikit_learn():
    X, y = load_xy("breast_cancer")
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    alpha = 1e-2
    ours = LogisticRegression(alpha=alpha, max_iter=2000).fit(X, y)
    # scikit-learn minimises C sum_i l_i + ||w||^2 / 2, i.e. ours with alpha = 1 / (C n)
    theirs = SkLogisticRegression(C=1.0 / (alpha * len(y)), tol=1e-10, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ours.coef_[:, 0], theirs.coef_[0], atol=2e-3)
    assert abs(ours.intercept_[0] - theirs.intercept_[0]) < 2e-3
    assert ours.score(X, y) == pytest.approx(theirs.score(X, y), abs=0.005)


def test_softmax_and_svm_learn_digits():
    X, y = load_xy("digits")
    X = X / 16.0
    assert SoftmaxRegression(alpha=1e-3).fit(X, y).score(X, y) > 0.97
    assert LinearSVC(alpha=1e-3).fit(X, y).score(X, y) > 0.97


def test_labels_keep_their_values_and_probabilities_sum_to_one():
    X, y = _data(3)
    names = np.array(["ant", "bee", "cat"])[y]
    model = SoftmaxRegression().fit(X, names)
    assert set(model.predict(X)) <= set(names)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)
    binary = LogisticRegression().fit(X, names == "bee")
    assert binary.predict_proba(X).shape == (len(X), 2)


def test_params_vector_round_trip_and_checks():
    X, y = _data(3)
    model = SoftmaxRegression().fit(X, y)
    w = model.get_params_vector()
    assert w.shape == ((5 + 1) * 3,)
    other = SoftmaxRegression().initialize(5, [0, 1, 2]).set_params_vector(w)
    np.testing.assert_array_equal(other.predict(X), model.predict(X))
    with pytest.raises(DataError, match="18 parameters"):
        model.set_params_vector(w[:-1])
    with pytest.raises(DataError, match="NaN"):
        model.set_params_vector(np.full_like(w, np.nan))


def test_bad_input_is_named():
    X, y = _data(3)
    with pytest.raises(ConfigError, match="binary"):
        LogisticRegression().fit(X, y)
    model = SoftmaxRegression().fit(X, y)
    with pytest.raises(DataError, match="outside classes_"):
        model.per_example_gradients(X, np.full(len(y), 7))
    with pytest.raises(DataError, match="features"):
        model.predict(X[:, :2])
    with pytest.raises(ConfigError, match="not fitted"):
        SoftmaxRegression().predict(X)
    with pytest.raises(ConfigError, match="solver"):
        SoftmaxRegression(solver="newton").fit(X, y)


def test_scikit_learn_estimator_api_and_seeded_sgd():
    X, y = _data(1)
    model = LogisticRegression(solver="sgd", batch_size=16, max_iter=3, rng=5)
    assert clone(model).get_params() == model.get_params()
    a = clone(model).fit(X, y).get_params_vector()
    b = clone(model).fit(X, y).get_params_vector()
    np.testing.assert_array_equal(a, b)  # the same seed shuffles the same way
    c = LogisticRegression(solver="sgd", batch_size=16, max_iter=3, rng=6).fit(X, y)
    assert not np.array_equal(a, c.get_params_vector())
