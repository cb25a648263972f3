"""Secure federated transfer learning on secret shares: a step equals the plaintext twin's
(one layer and MLPs, dealer and Paillier triples), training transfers A's labels to B's
own people, bad inputs are refused before a session starts, and a party's bad bytes are
a ProtocolError naming it."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.vertical import secure_ftl_ss
from veil.fl.vertical._ftl import plain_gradients
from veil.fl.vertical.secure_ftl_ss import (
    SSFTLSource,
    SSFTLTarget,
    predict_ss_ftl,
    train_ss_ftl,
)
from veil.mpc.wire import pack_message, unpack_message
from veil.random import Generator


@pytest.fixture(scope="module")
def split(ftl_split):
    return ftl_split


def _parties(split, **kw):
    XA, yA, XB, ov_a, ov_b, _ = split
    return (SSFTLSource(XA, yA, ov_a, rng=1, **kw), SSFTLTarget(XB, ov_b, rng=2, **kw))


@pytest.mark.parametrize(("layers", "correlation", "batch"), [
    ((), "dealer", 64), ((6,), "dealer", 64), ((5, 4), "dealer", 64), ((3,), "paillier", 12)])
def test_one_shared_step_is_the_plaintext_step(split, layers, correlation, batch):
    source, target = _parties(split, layers=layers, dim=4, gamma=0.3, learning_rate=0.5)
    positions = Generator(3).permutation(200)[:batch]            # the runner's batch
    want_a, want_b = plain_gradients(source.net, source._X, source._y,
                                     source.overlap[positions], target.net,
                                     target._X[target.overlap[positions]], 0.3)
    before_a = [W.copy() for W in source.net.weights]
    before_b = [W.copy() for W in target.net.weights]
    stats = train_ss_ftl(source, target, 1, batch_size=batch, rng=3, session_rng=4,
                         correlation=correlation, paillier_bits=512, insecure_ok=True)
    assert stats.bytes[0]["source"] > 0 and stats.bytes[0]["target"] > 0
    assert (stats.bytes[0]["dealer"] > 0) == (correlation == "dealer")
    for before, net, want in ((before_a, source.net, want_a), (before_b, target.net, want_b)):
        for old, W, g in zip(before, net.weights, want):
            assert np.abs(g).max() > 1e-2                        # a real gradient
            np.testing.assert_allclose((old - W) / 0.5, g, atol=2e-4)


def test_training_transfers_the_labels_to_the_targets_own_people(split):
    _, _, XB, _, _, y_own = split
    source, target = _parties(split, layers=(8,), dim=4, gamma=0.1, learning_rate=1.0)
    untrained = np.mean((target.represent(XB[200:]) @ source.phi() > 0) == (y_own == 1))
    stats = train_ss_ftl(source, target, 15, batch_size=100, rng=4, session_rng=5)
    assert len(stats.seconds) == 15
    scores = predict_ss_ftl(source, target, XB[200:], session_rng=6)
    np.testing.assert_allclose(scores, target.represent(XB[200:]) @ source.phi(), atol=1e-3)
    accuracy = np.mean((scores > 0) == (y_own == 1))
    assert accuracy > 0.9 and accuracy > untrained


def test_bad_inputs_are_refused_before_a_session_starts(split, monkeypatch):
    XA, yA, XB, ov_a, ov_b, _ = split

    def no_session(*args, **kw):
        raise AssertionError("a session was started")

    monkeypatch.setattr(secure_ftl_ss, "_session", no_session)
    with pytest.raises(ConfigError, match="layers"):
        SSFTLSource(XA, yA, ov_a, layers="8")
    with pytest.raises(ConfigError, match=r"layers\[\]"):
        SSFTLTarget(XB, ov_b, layers=[4, 0])
    with pytest.raises(DataError, match="labels"):
        SSFTLSource(XA, yA + 2, ov_a)
    with pytest.raises(DataError, match="overlap of 'target'"):
        SSFTLTarget(XB, np.array([0, 0, 1]))
    source, target = _parties(split)
    weights = [W.copy() for W in source.net.weights + target.net.weights]
    for kw, error, what in [({"iterations": 0}, ConfigError, "iterations"),
                            ({"batch_size": 0}, ConfigError, "batch_size"),
                            ({"correlation": "ot"}, ConfigError, "correlation"),
                            ({"frac_bits": 40}, ConfigError, "frac_bits")]:
        args = {"iterations": 1, **kw}
        with pytest.raises(error, match=what):
            train_ss_ftl(source, target, args.pop("iterations"), **args)
    with pytest.raises(DataError, match="overlaps have 200 and 10"):
        train_ss_ftl(source, SSFTLTarget(XB, np.arange(10)), 1)
    with pytest.raises(ConfigError, match="gamma"):
        train_ss_ftl(source, SSFTLTarget(XB, ov_b, gamma=0.5), 1)
    with pytest.raises(DataError, match="X of .target. holds a value of magnitude 1.2"):
        train_ss_ftl(source, SSFTLTarget(XB * 1e5, ov_b), 1)
    with pytest.raises(ConfigError, match="SSFTLSource"):
        train_ss_ftl(target, source, 1)
    after = source.net.weights + target.net.weights
    assert all(np.array_equal(a, b) for a, b in zip(weights, after))


def test_a_partys_bad_bytes_are_named(split, monkeypatch):
    source, target = _parties(split)
    real = secure_ftl_ss._session

    def tampered(*args, **kw):
        s = real(*args, **kw)
        party = s._runtime.parties[1]

        def spoil(pairs):
            out = []
            for dest, msg in pairs:
                if dest == 0:
                    session, sender, seq, step, arrays = unpack_message(msg)
                    msg = pack_message(session, sender, seq, step,
                                       [*arrays, np.zeros(3, np.uint64)])
                out.append((dest, msg))
            return out

        begin, receive = party.begin, party.receive
        monkeypatch.setattr(party, "begin", lambda *a: spoil(begin(*a)))
        monkeypatch.setattr(party, "receive", lambda *a: spoil(receive(*a)))
        return s

    monkeypatch.setattr(secure_ftl_ss, "_session", tampered)
    with pytest.raises(ProtocolError, match=r"party 1 \('target'\)"):
        train_ss_ftl(source, target, 1, batch_size=16, rng=0, session_rng=0)
