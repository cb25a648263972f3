"""Secure federated transfer learning (Liu et al.): one HE step equals the plaintext
gradient step of the Taylor loss, training transfers A's labels to B's own people, and bad
peer messages are ProtocolErrors."""

from __future__ import annotations

import numpy as np
import pytest

from veil.errors import ProtocolError
from veil.fl.vertical._ftl import plain_gradients
from veil.fl.vertical.secure_ftl import (
    FTLSource,
    FTLTarget,
    predict_secure_ftl,
    train_secure_ftl,
)
from veil.random import Generator

KEY = {"key_bits": 512, "insecure_ok": True}


@pytest.fixture(scope="module")
def split(ftl_split):
    return ftl_split


def _parties(split, **kw):
    XA, yA, XB, ov_a, ov_b, _ = split
    source = FTLSource(XA, yA, ov_a, peer_features=XB.shape[1], rng=1, **KEY, **kw)
    target = FTLTarget(XB, ov_b, peer_features=XA.shape[1], rng=2, **KEY, **kw)
    return source, target


def _plain_gradients(source, target, batch, gamma):
    """The shared plaintext twin (veil.fl.vertical._ftl) for the one-layer networks."""
    (wA,), (wB,) = plain_gradients(source.net, source._X, source._y, source.overlap[batch],
                                   target.net, target._X[target.overlap[batch]], gamma)
    return wA, wB


def test_one_encrypted_step_is_the_plaintext_step(split):
    source, target = _parties(split, gamma=0.3, learning_rate=0.5)
    batch = Generator(3).permutation(200)[:64]             # the runner's batch
    wA, wB = _plain_gradients(source, target, batch, 0.3)
    before = source.W.copy(), target.W.copy()
    train_secure_ftl(source, target, 1, batch_size=64, rng=3)
    np.testing.assert_allclose((before[0] - source.W) / 0.5, wA, atol=2e-4)
    np.testing.assert_allclose((before[1] - target.W) / 0.5, wB, atol=2e-4)


def test_training_transfers_the_labels_to_the_targets_own_people(split):
    _, _, XB, _, _, y_own = split
    source, target = _parties(split, gamma=0.1, learning_rate=1.0, dim=4)
    stats = train_secure_ftl(source, target, 8, batch_size=100, rng=4)
    assert len(stats.seconds) == 8 and stats.bytes[0]["source"] > 0
    scores = predict_secure_ftl(source, target, XB[200:])
    np.testing.assert_allclose(scores, target.represent(XB[200:]) @ source.phi(), atol=1e-3)
    accuracy = np.mean((scores > 0) == (y_own == 1))
    assert accuracy > 0.9


def test_bad_messages_are_protocol_errors(split):
    from veil.fl.messages import encode

    source, target = _parties(split)
    target.receive_key(source.key_message())
    source.receive_key(target.key_message())
    with pytest.raises(ProtocolError, match="from 'target'"):
        source.receive_key(b"junk")
    message = source.forward(0, np.arange(10))
    other, _ = _parties(split)
    other.receive_key(target.key_message())
    with pytest.raises(ProtocolError, match="bad ciphertexts"):
        target.forward(other.forward(0, np.arange(10)))          # under another key
    reply = target.forward(message)
    with pytest.raises(ProtocolError, match="replayed"):
        target.forward(message)
    grad = source.gradient(reply)
    with pytest.raises(ProtocolError, match="not a 'ftl-decrypted'"):
        source.update(grad)
    with pytest.raises(ProtocolError, match="step 7"):
        source.update(encode({"stage": "ftl-decrypted", "step": 7, "values": [1, 2]}))
    with pytest.raises(ProtocolError, match="2 values"):
        source.update(encode({"stage": "ftl-decrypted", "step": 0, "values": [1, 2]}))
    source.update(target.decrypt_for_peer(grad))                 # the honest answer works
