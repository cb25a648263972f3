"""Private LogisticRegression / LinearSVC (objective perturbation, DP-SGD), GaussianNB,
KMeans and private bound estimation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.naive_bayes import GaussianNB as SkGaussianNB

from veil.dp import Ledger
from veil.dp.accounting import calibrate_noise
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.learn.private import GaussianNB, KMeans, LinearSVC, LogisticRegression
from veil.learn.private._common import estimate_bounds, group_sums
from veil.learn.private.objective import LOGISTIC, huber_hinge, perturbation
from veil.learn.public import PublicFactWarning


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    lo, hi = X.min(0), X.max(0)  # the benchmark's declared (public) ranges
    return (X - lo) / (hi - lo), y


@pytest.mark.parametrize("loss", [LOGISTIC, huber_hinge(0.5), huber_hinge(0.1)])
@pytest.mark.parametrize("epsilon, alpha", [(0.1, 1.0), (1.0, 1.0), (5.0, 0.01), (3.0, 10.0)])
def test_objective_perturbation_density_ratio_is_bounded_by_epsilon(loss, epsilon, alpha):
    """The output density of w* on neighbouring datasets (one record added), computed by
    the change of variables of Chaudhuri et al.'s proof in one dimension, never differs by
    more than e^epsilon."""
    radius = 2.0
    lam, beta = perturbation(epsilon, alpha, loss.c, radius)
    g = np.random.default_rng(0)
    z = g.uniform(-radius, radius, 30)
    t = np.where(g.uniform(size=30) < 0.5, 1.0, -1.0)
    w = np.linspace(-6, 6, 4001)

    def log_density(zs, ts):
        m = ts[None] * zs[None] * w[:, None]
        eps = 1e-6  # l'' by a central difference of l'
        slope = loss.value_and_slope(m)[1]
        curve = (loss.value_and_slope(m + eps)[1] - loss.value_and_slope(m - eps)[1]) / (2 * eps)
        b = -((slope * ts[None] * zs[None]).sum(1) + lam * w)
        jac = (curve * zs[None] ** 2).sum(1) + lam
        return -beta * np.abs(b) + np.log(jac)  # 1-D: b ~ Laplace(1/beta)

    base = log_density(z, t)
    worst = 0.0
    for extra_z in (radius, -radius, 0.7 * radius):
        for extra_t in (1.0, -1.0):
            other = log_density(np.append(z, extra_z), np.append(t, extra_t))
            worst = max(worst, np.abs(other - base).max())
    assert worst <= epsilon * (1 + 1e-4)
    assert worst >= 0.4 * epsilon  # the bound is not vacuous


def test_logistic_regression_objective_is_accurate_and_charges_pure_epsilon(cancer):
    X, y = cancer
    ledger = Ledger(10.0)
    model = LogisticRegression(epsilon=10.0, data_norm=math.sqrt(30), ledger=ledger,
                               rng=0, classes=[0, 1]).fit(X, y)
    assert model.score(X, y) > 0.85
    assert ledger.spent()[0] == pytest.approx(10.0, rel=1e-6)
    assert model.predict_proba(X[:3]).shape == (3, 2)
    # as epsilon grows the model approaches scikit-learn's with the same C
    sharp = LogisticRegression(epsilon=500.0, data_norm=math.sqrt(30), rng=0,
                               classes=[0, 1]).fit(X, y)
    reference = SkLogistic(C=1.0).fit(X, y)
    agree = (sharp.predict(X) == reference.predict(X)).mean()
    assert agree > 0.97


def test_multiclass_is_one_vs_rest_with_the_budget_split():
    g = np.random.default_rng(2)
    centers = np.array([[0, 0], [3, 0], [0, 3]])
    y = np.repeat([0, 1, 2], 200)
    X = centers[y] + 0.5 * g.normal(size=(600, 2))
    model = LinearSVC(epsilon=30.0, data_norm=5.0, rng=1, classes=[0, 1, 2]).fit(X, y)
    assert model.coef_.shape == (3, 2)
    assert model.score(X, y) > 0.9


def test_dpsgd_method_uses_the_ledgers_calibration(cancer):
    X, y = cancer
    ledger = Ledger(2.0, 1e-5)
    model = LogisticRegression(epsilon=2.0, delta=1e-5, method="dpsgd", epochs=5,
                               batch_size=64, ledger=ledger, rng=0, classes=[0, 1],
                               n="public").fit(X, y)
    q = 64 / len(X)
    assert model.noise_multiplier_ == calibrate_noise(2.0, 1e-5, q, 5 * int(1 / q), "pld")
    assert ledger.spent()[0] <= 2.0
    assert model.score(X, y) > 0.85
    with pytest.raises(ConfigError, match="delta=0"):
        LogisticRegression(epsilon=1.0, method="dpsgd", classes=[0, 1]).fit(X, y)


def test_linear_models_need_a_declared_or_estimated_norm(cancer):
    X, y = cancer
    with pytest.raises(ConfigError, match="data_norm=None.*estimate"):
        LogisticRegression(epsilon=1.0, classes=[0, 1]).fit(X, y)
    ledger = Ledger(20.0)
    model = LinearSVC(epsilon=20.0, data_norm="estimate", ledger=ledger, rng=0,
                      classes=[0, 1]).fit(X, y)
    assert len(ledger.history()) == 2  # the norm histogram, then the model
    assert model.score(X, y) > 0.85


def test_group_statistics_sensitivity_by_neighbouring_datasets():
    g = np.random.default_rng(3)
    r = np.array([0.5, 2.0, 1.0])
    Z = g.uniform(-r, r, size=(50, 3))
    groups = g.integers(0, 4, 50)
    base = group_sums(Z, groups, 4)
    bounds = [1.0, r.sum(), (r ** 2).sum()]  # the L1 sensitivities GaussianNB uses
    for _ in range(100):
        z = g.uniform(-r, r) if g.uniform() < 0.8 else r * g.choice([-1, 1], 3)
        other = group_sums(np.vstack([Z, z]), np.append(groups, g.integers(0, 4)), 4)
        for a, b, bound in zip(base, other, bounds):
            assert np.abs(b - a).sum() <= bound * (1 + 1e-12)
    corner = group_sums(np.vstack([Z, r]), np.append(groups, 0), 4)
    assert [np.abs(b - a).sum() for a, b in zip(base, corner)] == pytest.approx(bounds)


def test_gaussian_nb_matches_scikit_learn_at_large_epsilon(cancer):
    X, y = cancer
    model = GaussianNB(epsilon=100.0, bounds=(0, 1), rng=0, classes=[0, 1]).fit(X, y)
    reference = SkGaussianNB().fit(X, y)
    assert np.allclose(model.theta_, reference.theta_, atol=0.01)
    assert (model.predict(X) == reference.predict(X)).mean() > 0.97
    assert model.predict_proba(X[:2]).sum(1) == pytest.approx([1, 1])
    assert GaussianNB(epsilon=1.0, bounds=(0, 1), rng=1, classes=[0, 1]).fit(X, y).score(X, y) > 0.6
    with pytest.raises(ConfigError, match="bounds=None"):
        GaussianNB(epsilon=1.0, classes=[0, 1]).fit(X, y)


def test_kmeans_finds_separated_clusters_and_releases_only_centres():
    g = np.random.default_rng(4)
    truth = np.array([[-2.0, -2.0], [2.0, 2.0], [2.0, -2.0]])
    X = truth[g.integers(0, 3, 3000)] + 0.3 * g.normal(size=(3000, 2))
    ledger = Ledger(30.0)
    model = KMeans(3, epsilon=30.0, bounds=(-4, 4), max_iter=5, ledger=ledger, rng=2).fit(X)
    found = model.cluster_centers_
    nearest = np.linalg.norm(found[:, None] - truth[None], axis=2).min(axis=0)
    assert np.all(nearest < 0.3)
    assert not hasattr(model, "labels_") and not hasattr(model, "inertia_")
    assert len(ledger.history()) == 2 * 5 and ledger.spent()[0] <= 30.0 * (1 + 1e-9)
    with pytest.raises(BudgetExceededError):
        KMeans(3, epsilon=31.0, bounds=(-4, 4), ledger=ledger).fit(X)
    assert len(ledger.history()) == 10


def test_estimate_bounds_covers_the_data_within_a_factor_two():
    g = np.random.default_rng(5)
    X = np.column_stack([g.uniform(3, 90, 5000), g.uniform(-0.02, 0.5, 5000)])
    lo, hi = estimate_bounds(X, 2.0, rng=0)
    assert lo[0] <= 3.0 and 90.0 <= hi[0] <= 256.0 and lo[0] >= 1.0
    assert lo[1] <= -0.02 and 0.5 <= hi[1] <= 1.0
    with pytest.raises(DataError, match="declare the bounds"):
        estimate_bounds(X[:10], 0.01, rng=0)


@pytest.mark.parametrize("make", [
    lambda **kw: LogisticRegression(epsilon=50.0, data_norm=3.0, rng=0, **kw),
    lambda **kw: LinearSVC(epsilon=50.0, data_norm=3.0, rng=0, **kw),
    lambda **kw: GaussianNB(epsilon=50.0, bounds=(-3, 3), rng=0, **kw),
])
def test_the_label_set_is_declared_not_read_from_the_data(make):
    g = np.random.default_rng(5)
    X = g.normal(size=(300, 2))
    y = (X[:, 0] > 0).astype(int)
    relabelled = y.copy()
    relabelled[0] = 2  # one record with a new label
    with pytest.raises(ConfigError, match="classes=None.*from_data"):
        make().fit(X, y)
    # declared: one relabelled record cannot change the shape of the release
    a, b = make(classes=[0, 1, 2]).fit(X, y), make(classes=[0, 1, 2]).fit(X, relabelled)
    assert list(a.classes_) == list(b.classes_) == [0, 1, 2]
    with pytest.raises(DataError, match="outside the declared classes$"):
        make(classes=[0, 1]).fit(X, relabelled)
    with pytest.warns(PublicFactWarning, match="read from the data"):
        assert list(make(classes="from_data").fit(X, relabelled).classes_) == [0, 1, 2]


def test_dpsgd_takes_the_declared_size_not_len_x(cancer):
    X, y = cancer

    def sigma(rows, **kw):
        return LogisticRegression(epsilon=2.0, delta=1e-5, method="dpsgd", epochs=2,
                                  batch_size=64, rng=0, classes=[0, 1], **kw).fit(
            X[:rows], y[:rows]).noise_multiplier_

    # a declared public size: one record more or less changes nothing released
    assert sigma(len(X), n=500) == sigma(len(X) - 1, n=500)
    with pytest.warns(PublicFactWarning, match="dataset size is treated as public"):
        sigma(len(X))
    with pytest.raises(ConfigError, match=r"batch_size=64 .*declared dataset size n"):
        sigma(len(X), n=10)
