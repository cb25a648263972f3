"""Yao's 1982 millionaires' protocol: correct for every (i, j) in 1..10, messages checked."""

from __future__ import annotations

import pytest

from veil.crypto import millionaires, multiplicative
from veil.errors import ConfigError, ProtocolError


@pytest.fixture(scope="module")
def key():
    # A small textbook RSA key keeps 100 runs fast; the protocol does not depend on its size.
    return multiplicative.rsa_keygen(256, insecure_ok=True, rng=1)[1]


def test_all_pairs(key):
    for i in range(1, 11):
        for j in range(1, 11):
            assert millionaires.compare(i, j, private_key=key, rng=100 * i + j) == (i >= j), \
                (i, j)


def test_messages_and_views(key):
    alice = millionaires.Alice(7, key, rng=1)
    bob = millionaires.Bob(4, key.public_key, rng=2)
    first = bob.start()
    assert len(first) == 32  # one element of Z_n
    reply = alice.respond(first)
    width = int.from_bytes(reply[:2], "big")
    p = int.from_bytes(reply[2:2 + width], "big")
    zs = [int.from_bytes(reply[2 + width * (u + 1): 2 + width * (u + 2)], "big")
          for u in range(10)]
    assert p.bit_length() == 128 and all(0 <= z < p for z in zs)
    # Alice's sequence: D(m + u - 1) mod p, shifted by one after position i = 7
    m = int.from_bytes(first, "big")
    n = int(key.public_key.n)
    plain = [key.decrypt((m + u) % n) % p for u in range(10)]
    assert zs == plain[:7] + [(z + 1) % p for z in plain[7:]]
    assert alice.learn(bob.finish(reply)) is True and bob.result is True


def test_bad_input(key):
    with pytest.raises(ConfigError, match="wealth=11"):
        millionaires.Bob(11, key.public_key)
    with pytest.raises(ConfigError, match="wealth=0"):
        millionaires.Alice(0, key)
    alice = millionaires.Alice(3, key, rng=3)
    with pytest.raises(ProtocolError, match="expected 32"):
        alice.respond(b"\x01" * 31)
    with pytest.raises(ProtocolError, match="outside Z_n"):
        alice.respond(b"\xff" * 32)
    bob = millionaires.Bob(3, key.public_key, rng=4)
    with pytest.raises(ProtocolError, match="before start"):
        bob.finish(b"")
    bob.start()
    with pytest.raises(ProtocolError, match="expected"):
        bob.finish(b"\x00\x10" + b"\x00" * 20)
    with pytest.raises(ProtocolError, match="one byte"):
        alice.learn(b"yes")
