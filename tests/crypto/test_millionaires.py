"""Yao's 1982 millionaires' protocol: correct for every (i, j) in 1..10, messages checked."""

from __future__ import annotations

import gmpy2
import numpy as np
import pytest

from veil.crypto import millionaires, multiplicative
from veil.errors import ConfigError, ProtocolError


@pytest.fixture(scope="module")
def key():
    # A small textbook RSA key keeps 100 runs fast; the protocol does not depend on its size.
    return millionaires.keygen(256, insecure_ok=True, rng=1)


def test_all_pairs(key):
    for i in range(1, 11):
        for j in range(1, 11):
            assert millionaires.compare(i, j, private_key=key, insecure_ok=True,
                                      rng=100 * i + j) == (i >= j), \
                (i, j)


def test_messages_and_views(key):
    alice = millionaires.Alice(7, key, rng=1)
    bob = millionaires.Bob(4, key.public_key, insecure_ok=True, rng=2)
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
        millionaires.Bob(11, key.public_key, insecure_ok=True)
    with pytest.raises(ConfigError, match="wealth=0"):
        millionaires.Alice(0, key)
    alice = millionaires.Alice(3, key, rng=3)
    with pytest.raises(ProtocolError, match="expected 32"):
        alice.respond(b"\x01" * 31)
    with pytest.raises(ProtocolError, match="outside Z_n"):
        alice.respond(b"\xff" * 32)
    bob = millionaires.Bob(3, key.public_key, insecure_ok=True, rng=4)
    with pytest.raises(ProtocolError, match="before start"):
        bob.finish(b"")
    bob.start()
    with pytest.raises(ProtocolError, match="expected"):
        bob.finish(b"\x00\x10" + b"\x00" * 20)
    with pytest.raises(ProtocolError, match="one byte"):
        alice.learn(b"yes")


def _key_with_e_dividing_p_minus_1(bits: int = 256):
    """A malicious Alice's modulus: 65537 | p - 1, so x -> x^65537 is not a permutation."""
    rng = np.random.default_rng(5)
    e = 65537
    while True:
        k = int(rng.integers(1 << 60, 1 << 61)) << (bits // 2 - 80)
        p = 2 * e * k + 1
        if gmpy2.is_prime(p):
            break
    q = int(gmpy2.next_prime(p + (1 << 40)))
    return p, multiplicative.RSAPublicKey(p * q, e)


def test_bob_refuses_a_key_that_would_reveal_his_wealth():
    p, bad = _key_with_e_dividing_p_minus_1()
    n, e = int(bad.n), int(bad.e)
    # The attack the check prevents: Bob's k = x^e is an e-th power residue mod p, while the
    # other m + u - 1 almost never are, so Alice reads j off residuosity.
    x, j = 123456789 ** 3 % n, 6
    m = (pow(x, e, n) - j + 1) % n
    residues = [u for u in range(1, 11) if pow((m + u - 1) % p, (p - 1) // e, p) == 1]
    assert residues == [j]
    with pytest.raises(ProtocolError, match="prime larger than n"):
        millionaires.Bob(j, bad, insecure_ok=True, rng=7)
    with pytest.raises(ProtocolError, match="prime larger than n"):  # e = 65537, even honest
        millionaires.Bob(j, multiplicative.rsa_keygen(256, insecure_ok=True, rng=2)[0],
                         insecure_ok=True)


def test_bob_refuses_small_or_smooth_keys(key):
    with pytest.raises(ProtocolError, match="allowed: 2048"):
        millionaires.Bob(3, key.public_key)  # 256 bits without insecure_ok
    smooth = multiplicative.RSAPublicKey(int(key.public_key.n) * 3,
                                         int(gmpy2.next_prime(1 << 300)))
    with pytest.raises(ProtocolError, match="small factor 3"):
        millionaires.Bob(3, smooth, insecure_ok=True)


def test_a_malformed_value_costs_alice_no_prime_search(key, monkeypatch):
    from veil.crypto import _primes
    calls = []
    real = _primes.random_prime
    monkeypatch.setattr(_primes, "random_prime", lambda *a, **k: calls.append(1) or real(*a, **k))
    alice = millionaires.Alice(3, key, rng=3)
    n = int(key.public_key.n)
    # m = n - 1: D(n - 1) = n - 1, D(0) = 0, D(1) = 1 — 0 and 1 can never be separated by 2
    with pytest.raises(ProtocolError, match="adjacent"):
        alice.respond((n - 1).to_bytes(32, "big"))
    assert calls == []
