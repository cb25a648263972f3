"""Membership-inference attacks and their metrics."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from veil.audit import (
    advantage,
    attack_metrics,
    auc,
    label_flip_canaries,
    membership_inference,
    sample_model_mi,
    tpr_at_fpr,
)
from veil.datasets import load_sklearn
from veil.errors import ConfigError, DataError
from veil.random import default_rng


def test_metrics_on_a_hand_computed_example():
    ins, outs = [3.0, 2.0, 1.0], [0.0, 1.5, -1.0]
    assert auc(ins, outs) == pytest.approx(8 / 9)  # 8 of the 9 pairs ranked right
    assert advantage(ins, outs) == pytest.approx(2 / 3)
    assert tpr_at_fpr(ins, outs, 0.0) == pytest.approx(2 / 3)
    assert tpr_at_fpr(ins, outs, 0.4) == pytest.approx(1.0)
    m = attack_metrics(ins, outs)
    assert m["tpr_at_fpr_0.001"] == pytest.approx(2 / 3) and m["n_nonmembers"] == 3


def split(X, y, seed):
    """Audit records: each is a member by a fair coin (what the one-run audit assumes)."""
    inside = default_rng(seed).random(len(y)) < 0.5
    return (X[inside], y[inside]), (X[~inside], y[~inside])


@pytest.fixture(scope="module")
def noisy_task():
    X, y = make_classification(n_samples=2400, n_features=20, n_informative=8, flip_y=0.15,
                               random_state=0)
    members, nonmembers = split(X[:1200], y[:1200], seed=1)
    return members, nonmembers, (X[1200:], y[1200:])


def test_overfit_model_leaks_more_than_a_regularised_one(noisy_task):
    members, nonmembers, _ = noisy_task
    forest = RandomForestClassifier(n_estimators=30, random_state=0).fit(*members)
    linear = LogisticRegression(C=0.01, max_iter=2000).fit(*members)
    leaky = membership_inference(forest, members, nonmembers, attack="loss")
    tight = membership_inference(linear, members, nonmembers, attack="loss")
    # measured: 0.79 against 0.50 (600 members: the AUC's sd is ~0.015)
    assert leaky.metrics()["auc"] > 0.7
    assert abs(tight.metrics()["auc"] - 0.5) < 0.06
    assert membership_inference(forest, members, nonmembers,
                                attack="confidence").metrics()["auc"] > 0.7
    mi_leaky = sample_model_mi(leaky.member_scores, leaky.nonmember_scores, rng=1)
    mi_tight = sample_model_mi(tight.member_scores, tight.nonmember_scores, rng=1)
    assert mi_leaky.lower > mi_tight.upper


def test_shadow_model_attack(noisy_task):
    members, nonmembers, population = noisy_task
    forest = RandomForestClassifier(n_estimators=30, random_state=0).fit(*members)
    result = membership_inference(forest, members, nonmembers, attack="shadow",
                                  population=population, n_shadow=4, rng=2)
    assert result.metrics()["auc"] > 0.7  # measured 0.79


def test_lira_beats_the_loss_attack_on_an_overfit_linear_model():
    # 60 features, 200 members: logistic regression overfits (train 0.94, test 0.69). LiRA's
    # per-record calibration (Carlini et al. 2022) lifts the AUC from ~0.59 to ~0.67 and
    # finds members at 1% FPR where the global loss threshold finds none.
    X, y = make_classification(n_samples=800, n_features=60, n_informative=10, flip_y=0.1,
                               random_state=1)
    members, nonmembers = split(X[:400], y[:400], seed=3)
    model = LogisticRegression(C=1.0, max_iter=2000).fit(*members)
    loss = membership_inference(model, members, nonmembers).metrics()
    online = membership_inference(model, members, nonmembers, attack="lira", n_shadow=16,
                                  rng=4).metrics()
    offline = membership_inference(model, members, nonmembers, attack="lira-offline",
                                   n_shadow=8, rng=4).metrics()
    assert online["auc"] > loss["auc"] + 0.03
    assert offline["auc"] > loss["auc"] + 0.02
    assert online["tpr_at_fpr_0.01"] > loss["tpr_at_fpr_0.01"]


def test_callable_targets_and_binary_probabilities(noisy_task):
    members, nonmembers, _ = noisy_task
    forest = RandomForestClassifier(n_estimators=10, random_state=0).fit(*members)
    reference = membership_inference(forest, members, nonmembers)
    as_matrix = membership_inference(lambda X: forest.predict_proba(X), members, nonmembers)
    as_vector = membership_inference(lambda X: forest.predict_proba(X)[:, 1], members,
                                     nonmembers)
    np.testing.assert_allclose(as_matrix.member_scores, reference.member_scores)
    np.testing.assert_allclose(as_vector.nonmember_scores, reference.nonmember_scores,
                               atol=1e-12)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_non_private_overfit_model_has_a_clearly_positive_epsilon_lower_bound():
    # Mislabelled canaries (one-run audit): a nearly unregularised model memorises the
    # canaries it saw and misclassifies the others; a regularised one cannot fit them.
    # (The nearly unregularised fit never fully converges; 500 iterations memorise enough.)
    d = load_sklearn("digits")
    X, y = d.X / 16.0, d.y
    order = default_rng(5).permutation(len(y))
    train, pool = order[:500], order[500:]
    canaries = label_flip_canaries(X[pool], y[pool], 150, rng=6)
    Xt, yt = canaries.training_set(X[train], y[train])
    overfit = LogisticRegression(C=1e4, max_iter=500).fit(Xt, yt)
    regular = LogisticRegression(C=0.05, max_iter=500).fit(Xt, yt)
    leaky = canaries.audit(overfit, rng=1)
    tight = canaries.audit(regular, rng=1)
    assert leaky.epsilon > 1.5  # measured ~2.3 of the 3.2 that 150 canaries can show
    assert tight.epsilon < 0.7 < leaky.epsilon


def test_bad_inputs_are_clear(noisy_task):
    members, nonmembers, population = noisy_task
    forest = RandomForestClassifier(n_estimators=5, random_state=0).fit(*members)
    with pytest.raises(DataError, match="features"):
        membership_inference(forest, members, (nonmembers[0][:, :5], nonmembers[1]))
    with pytest.raises(DataError, match="one label per row"):
        membership_inference(forest, (members[0], members[1][:-1]), nonmembers)
    with pytest.raises(DataError, match="labels the model does not know"):
        membership_inference(forest, members, (nonmembers[0], nonmembers[1] + 5))
    with pytest.raises(DataError, match="outside \\[0, 1\\]"):
        membership_inference(lambda X: 5 * forest.predict_proba(X), members, nonmembers)
    with pytest.raises(ConfigError, match="shadow="):
        membership_inference(lambda X: forest.predict_proba(X), members, nonmembers,
                             attack="lira")
    with pytest.raises(ConfigError, match="even"):
        membership_inference(forest, members, nonmembers, attack="lira", n_shadow=5)
    with pytest.raises(ConfigError, match="population"):
        membership_inference(forest, members, nonmembers, attack="shadow")
    with pytest.raises(ConfigError, match="attack"):
        membership_inference(forest, members, nonmembers, attack="guess")
