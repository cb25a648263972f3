"""Noisy gradients for the secret-shared vertical logistic regression: the sensitivity
bound holds on shares, every party's ledger is charged the run (or none is), the noise is
real, and a generous budget on enough rows keeps the model useful."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score

from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError
from veil.fl.vertical import VerticalLogisticRegression
from veil.fl.vertical.gradient_noise import GradientNoise, clip_rows, sigmoid_bound


@pytest.fixture(scope="module")
def breast():
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    return [X[:, :10], X[:, 10:]], y.astype(np.float64)


def test_the_shared_gradient_moves_by_at_most_the_sensitivity(breast):
    from veil.mpc import Session
    from veil.mpc.models import share_columns

    blocks, y = breast
    noise = GradientNoise([10, 20], [1.0, 2.0], steps=1, epsilon=1.0, delta=1e-5,
                          frac_bits=16)
    assert noise.radius == pytest.approx(math.sqrt(1 + 1 + 4), rel=1e-3)
    assert 1.0 - 0.00775 < sigmoid_bound(16) < 1.0
    clipped = noise.clip_blocks(blocks)
    other = [b.copy() for b in clipped]
    other[0][0] = np.full(10, 1.0 / math.sqrt(10))                # norm c_0 = 1
    other[1][0] = np.full(20, -2.0 / math.sqrt(20))               # norm c_1 = 2
    y2 = y.copy()
    y2[0] = 1.0 - y[0]
    gaps = []
    for w in (np.zeros(31), np.linspace(-3.0, 3.0, 31)):
        grads = []
        with Session(parties=2) as session:
            for bl, labels in ((clipped, y), (other, y2)):
                X = share_columns(session, [*bl, np.ones((len(y), 1))], owners=[0, 1, 0])
                z = X @ session.public(w)
                g = X.T @ (z.sigmoid() - session.share(labels, owner=0))
                grads.append(g.reveal())
        gaps.append(np.linalg.norm(grads[0] - grads[1]))
    assert max(gaps) <= noise.sensitivity
    assert max(gaps) > 0.5 * noise.sensitivity        # the bound is not loose by much


def test_every_ledger_is_charged_the_run_or_none(breast):
    blocks, y = breast
    ledgers = [Ledger(2.0, 1e-5, accountant="rdp") for _ in range(2)]
    model = VerticalLogisticRegression("ss", epochs=3, batch_size=len(y), learning_rate=1.0,
                                       epsilon=2.0, clip=1.0, ledgers=ledgers)
    model.fit(blocks, y)
    for ledger in ledgers:
        assert 1.9 < ledger.spent()[0] <= 2.0 + 1e-9
    small = [Ledger(5.0, 1e-5, accountant="rdp"), Ledger(1.0, 1e-5, accountant="rdp")]
    with pytest.raises(BudgetExceededError, match="party 1"):
        VerticalLogisticRegression("ss", epochs=3, batch_size=len(y), epsilon=2.0,
                                   ledgers=small).fit(blocks, y)
    assert [ledger.spent()[0] for ledger in small] == [0.0, 0.0]
    with pytest.raises(ConfigError, match="one Ledger per party"):
        VerticalLogisticRegression("ss", epsilon=2.0, ledgers=small[:1]).fit(blocks, y)
    with pytest.raises(ConfigError, match="protocol='ss' logistic"):
        VerticalLogisticRegression("paillier", epsilon=2.0, ledgers=small).fit(blocks, y)
    with pytest.raises(ConfigError, match="clip"):
        VerticalLogisticRegression("ss", epsilon=2.0, clip=[1.0], ledgers=small).fit(blocks, y)


def test_the_noise_is_there_and_a_large_budget_keeps_the_model(breast):
    blocks, y = breast
    # 10 copies of breast: n ~ 5.7k rows, where the noise of a useful epsilon is small
    big = [np.tile(b, (10, 1)) for b in blocks]
    yy = np.tile(y, 10)
    plain = VerticalLogisticRegression("ss", epochs=6, batch_size=len(yy), learning_rate=1.0,
                                       random_state=0).fit([clip_rows(b, 1.0) for b in big], yy)

    def private(eps):
        ledgers = [Ledger(eps, 1e-5, accountant="rdp") for _ in range(2)]
        return VerticalLogisticRegression("ss", epochs=6, batch_size=len(yy),
                                          learning_rate=1.0, epsilon=eps, clip=1.0,
                                          ledgers=ledgers).fit(big, yy)

    loud, quiet = private(0.05), private(8.0)
    w_plain = np.concatenate(plain.coefs_)
    err = [np.linalg.norm(np.concatenate(m.coefs_) - w_plain) for m in (loud, quiet)]
    assert err[0] > 5 * err[1] > 0
    assert roc_auc_score(yy, quiet.decision_function(big)) > 0.98
