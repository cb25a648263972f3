"""Vertical linear / logistic regression: the Paillier protocol computes the plaintext
schedule, the secret-shared one trains, bad messages and bad input are refused."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from veil.crypto import paillier, threshold
from veil.dp import Ledger
from veil.errors import BudgetExceededError, ConfigError, DataError, ProtocolError
from veil.fl.messages import decode, encode
from veil.fl.vertical import (
    Arbiter,
    PaillierGuest,
    PaillierHost,
    Plan,
    VerticalLinearRegression,
    VerticalLogisticRegression,
    train_paillier,
)


@pytest.fixture(scope="module")
def keys():
    return paillier.keygen(384, insecure_ok=True, rng=11)


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:160]
    return [X[:, :6], X[:, 6:18], X[:, 18:]], y[:160]


def _parties(blocks, y, plan, keys, **guest_kwargs):
    hosts = [f"h{k}" for k in range(1, len(blocks))]
    guest = PaillierGuest(blocks[0], y, hosts, plan, insecure_ok=True, rng=1, **guest_kwargs)
    parties = [PaillierHost(h, b, plan, insecure_ok=True, rng=2 + k)
               for k, (h, b) in enumerate(zip(hosts, blocks[1:]))]
    arbiter = Arbiter({"guest": guest.coef_.size, **{h.name: h.coef_.size for h in parties}},
                      keys=keys)
    return guest, parties, arbiter


def _reference(blocks, y, task, epochs, lr, alpha):
    """The same schedule in floating point (one full batch per epoch)."""
    X = np.hstack([*blocks[:1], np.ones((len(y), 1)), *blocks[1:]])
    w = np.zeros(X.shape[1])
    pen = np.ones_like(w)
    pen[blocks[0].shape[1]] = 0.0
    for _ in range(epochs):
        z = X @ w
        r = z / 4 + 0.5 - y if task == "logistic" else z - y
        w = w - lr * (X.T @ r / len(y) + alpha * w * pen)
    return w


@pytest.mark.parametrize("task", ["logistic", "linear"])
def test_paillier_protocol_computes_the_plaintext_schedule(data, keys, task):
    blocks, y = data
    target = y.astype(float) if task == "logistic" else blocks[0][:, 0] * 2.0 - 1.0
    plan = Plan(task=task, epochs=3, batch_size=len(y), learning_rate=0.2, alpha=0.01)
    guest, hosts, arbiter = _parties(blocks, target, plan, keys)
    stats = train_paillier(guest, hosts, arbiter)
    w = np.concatenate([guest.coef_, *(h.coef_ for h in hosts)])
    ref = _reference(blocks, target, task, 3, 0.2, 0.01)
    assert np.max(np.abs(w - ref)) < 1e-3
    assert len(stats.seconds) == 3 and stats.bytes[0]["h1"] > 0


def test_worker_processes_and_noise_pools_compute_the_same_schedule(data, keys):
    """Gradient columns split among forked workers, noise taken from started pools: the
    weights are the plaintext schedule's, as with one process and noise on demand."""
    blocks, y = data
    plan = Plan(epochs=2, batch_size=len(y), learning_rate=0.2, alpha=0.01)
    hosts = [f"h{k}" for k in range(1, len(blocks))]
    guest = PaillierGuest(blocks[0], y.astype(float), hosts, plan, insecure_ok=True,
                          workers=2, rng=1)
    parties = [PaillierHost(h, b, plan, insecure_ok=True, workers=3, rng=2)
               for h, b in zip(hosts, blocks[1:])]
    arbiter = Arbiter({"guest": guest.coef_.size, **{h.name: h.coef_.size for h in parties}},
                      keys=keys)
    for party in (guest, *parties):
        party.receive_key(arbiter.key_message())
    pools = [party.noise_pool(len(y)).start() for party in (guest, *parties)]
    try:
        train_paillier(guest, parties, arbiter)
    finally:
        for pool in pools:
            pool.stop()
    w = np.concatenate([guest.coef_, *(h.coef_ for h in parties)])
    assert np.max(np.abs(w - _reference(blocks, y.astype(float), "logistic", 2, 0.2,
                                        0.01))) < 1e-3
    with pytest.raises(ConfigError, match="workers"):
        PaillierHost("h1", blocks[1], plan, workers=0)


def test_estimators_match_scikit_learn_on_breast_cancer(data):
    blocks, y = data
    ref = LogisticRegression(max_iter=1000).fit(np.hstack(blocks), y)
    auc_ref = roc_auc_score(y, ref.decision_function(np.hstack(blocks)))
    for protocol in ("paillier", "ss"):
        model = VerticalLogisticRegression(protocol, epochs=4, batch_size=64,
                                           learning_rate=0.3, key_bits=512,
                                           insecure_ok=True, random_state=0)
        model.fit(blocks[:2], y)
        auc = roc_auc_score(y, model.decision_function(blocks[:2]))
        assert auc > auc_ref - 0.03, protocol
        assert model.score(blocks[:2], y) > 0.9
        assert model.predict_proba(blocks[:2]).shape == (len(y), 2)
    lin = VerticalLinearRegression("ss", epochs=40, batch_size=len(y), learning_rate=0.05,
                                   random_state=0)
    target = blocks[0][:, 1] + 0.5 * blocks[1][:, 2]
    assert lin.fit(blocks[:2], target).score(blocks[:2], target) > 0.9


def test_bad_messages_raise_protocol_errors_naming_the_party(data, keys):
    blocks, y = data
    plan = Plan(epochs=2, batch_size=64)
    guest, (host, *_), arbiter = _parties(blocks[:2], y, plan, keys)
    with pytest.raises(ProtocolError, match="expects no decryption|no public key"):
        host.forward(encode({"stage": "batch"}))
    key = arbiter.key_message()
    guest.receive_key(key)
    host.receive_key(key)
    batch = guest.next_batch()
    scores = host.forward(batch)
    with pytest.raises(ProtocolError, match="replayed"):
        host.forward(batch)
    forged = decode(scores)
    forged["cts"] = forged["cts"][:-20] + bytes(20)
    with pytest.raises(ProtocolError, match="'h1'"):
        guest.residual({"h1": encode(forged)})
    with pytest.raises(ProtocolError, match="expects one message"):
        guest.residual({})
    residual = guest.residual({"h1": scores})
    tampered = decode(residual)
    tampered["batch"] = 5
    with pytest.raises(ProtocolError, match="residual for epoch"):
        host.backward(encode(tampered))
    gradient = host.backward(residual)
    wrong = decode(gradient)
    wrong["party"] = "mallory"
    with pytest.raises(ProtocolError, match="known party"):
        arbiter.decrypt(encode(wrong))
    answer = arbiter.decrypt(gradient)
    with pytest.raises(ProtocolError, match="replayed"):
        arbiter.decrypt(gradient)
    guest.gradient()
    with pytest.raises(ProtocolError, match="expects epoch"):
        guest.update(answer)                           # the host's decryption
    host.update(answer)
    strict = PaillierHost("h1", blocks[1], plan)       # requires 2048-bit keys
    with pytest.raises(ProtocolError, match="at least 2048"):
        strict.receive_key(key)


def test_label_dp_charges_the_guest_ledger_per_epoch(data, keys):
    blocks, y = data
    plan = Plan(epochs=2, batch_size=len(y))
    ledger = Ledger(epsilon=4.0, delta=1e-5, accountant="rdp")
    guest, hosts, arbiter = _parties(blocks[:2], y, plan, keys, label_epsilon=2.0,
                                     ledger=ledger)
    train_paillier(guest, hosts, arbiter)
    assert len(ledger.history()) == 2
    assert 0 < ledger.spent()[0] <= 2.0 + 1e-9
    poor = Ledger(epsilon=0.5, delta=1e-5, accountant="rdp")
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        _parties(blocks[:2], y, plan, keys, label_epsilon=2.0, ledger=poor)
    assert poor.spent()[0] == 0.0


def test_bad_input_is_refused_before_training(data):
    blocks, y = data
    model = VerticalLogisticRegression("paillier", key_bits=512, insecure_ok=True)
    with pytest.raises(DataError, match="same rows"):
        model.fit([blocks[0], blocks[1][:-1]], y)
    with pytest.raises(DataError, match="0/1"):
        model.fit(blocks[:2], y + 1)
    with pytest.raises(DataError, match="list of the parties"):
        model.fit(np.hstack(blocks), y)
    with pytest.raises(ConfigError, match="ledger"):
        VerticalLogisticRegression(label_epsilon=1.0).fit(blocks[:2], y)
    with pytest.raises(ConfigError, match="protocol"):
        VerticalLogisticRegression("fhe").fit(blocks[:2], y)
    with pytest.raises(ConfigError, match="not fitted"):
        model.predict(blocks[:2])


def test_threshold_decryption_gives_the_same_schedule_and_checks_proofs(data):
    from veil.fl.vertical.paillier_lr import ThresholdDecryption, combine

    blocks, y = data
    plan = Plan(epochs=2, batch_size=len(y), learning_rate=0.2)
    hosts = ["h1", "h2"]
    guest = PaillierGuest(blocks[0], y, hosts, plan, insecure_ok=True, rng=1)
    parties = [PaillierHost(h, b, plan, insecure_ok=True) for h, b in zip(hosts, blocks[1:])]
    sizes = {"guest": guest.coef_.size, **{h.name: h.coef_.size for h in parties}}
    keys = threshold.keygen(384, parties=3, threshold=3, insecure_ok=True, rng=12)
    group = ThresholdDecryption(sizes, keys=keys)
    stats = train_paillier(guest, parties, group)
    w = np.concatenate([guest.coef_, *(h.coef_ for h in parties)])
    assert np.max(np.abs(w - _reference(blocks, y.astype(float), "logistic", 2, 0.2, 0.0))) \
        < 1e-3
    assert stats.bytes[0]["arbiter"] > 0
    # a holder that sends a wrong partial decryption is named; two of three cannot decrypt
    guest2 = PaillierGuest(blocks[0], y, hosts, plan, insecure_ok=True, rng=1)
    guest2.receive_key(group.key_message())
    host_msgs = {}
    for h in parties:
        h._step = (-1, -1)
        h.receive_key(group.key_message())
    batch = guest2.next_batch()
    for h in parties:
        host_msgs[h.name] = h.forward(batch)
    guest2.residual(host_msgs)
    gradient = guest2.gradient()
    fresh = ThresholdDecryption(sizes, keys=keys)
    partials = {h.name: h.partial(gradient) for h in fresh.holders}
    forged = decode(partials["h2"])
    forged["partial"] = decode(partials["h1"])["partial"]
    with pytest.raises(ProtocolError):
        combine(fresh.public_key, gradient, {**partials, "h2": encode(forged)})
    del partials["h2"]
    with pytest.raises(ProtocolError, match="need 3"):
        combine(fresh.public_key, gradient, partials)


def test_the_cubic_link_computes_its_plaintext_schedule(data, keys):
    blocks, y = data
    two = [blocks[0], np.hstack(blocks[1:])]
    plan = Plan(epochs=3, batch_size=len(y), learning_rate=0.2, link="cubic")
    c1, c3 = plan.coefficients
    assert 0.8 < c1 < 1.0 and -0.03 < c3 < 0       # a flatter line, bent down at the ends
    guest, (host,), arbiter = _parties(two, y, plan, keys)
    train_paillier(guest, [host], arbiter)
    X = np.hstack([two[0], np.ones((len(y), 1)), two[1]])
    w = np.zeros(X.shape[1])
    for _ in range(3):
        z = X @ w
        w = w - 0.2 * X.T @ (c1 * z + c3 * z ** 3 - 2 * (2 * y - 1)) / (4 * len(y))
    got = np.concatenate([guest.coef_, host.coef_])
    assert np.max(np.abs(got - w)) < 1e-3 and np.max(np.abs(w)) > 0.05
    with pytest.raises(ConfigError, match="exactly one host"):
        _parties(blocks, y, plan, keys)
    with pytest.raises(ConfigError, match="for task='logistic' only"):
        Plan(task="linear", link="cubic")
