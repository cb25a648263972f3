"""Yao's millionaires' problem: the original public-key protocol (Yao, FOCS 1982).

Alice is worth i and Bob j millions, 1 <= i, j <= N (N = 10 in the paper). They learn
whether i >= j and nothing else. Alice has an RSA key pair (E_a public, D_a private; a
permutation of Z_n, :mod:`veil.crypto.multiplicative`).

1. Bob picks a random x in Z_n, computes k = E_a(x) and sends ``m = k - j + 1``.
2. Alice computes ``y_u = D_a(m + u - 1)`` for u = 1..N (so ``y_j = D_a(k) = x``).
3. Alice picks a random prime p of half the key size and computes ``z_u = y_u mod p``,
   drawing another p until all z_u differ pairwise by at least 2 (mod p).
4. Alice sends p and the sequence ``z_1, ..., z_i, z_(i+1) + 1, ..., z_N + 1`` (mod p).
5. Bob looks at the j-th number: it equals ``x mod p`` iff j <= i, i.e. i >= j.
6. Bob tells Alice the conclusion.

Why it works: entry j is z_j = x mod p, shifted by one exactly when j > i; the gap of 2
keeps a shifted value from colliding with an unshifted one. Privacy (semi-honest): m is
uniform in Z_n whatever j is, because x is; Bob knows only y_j = x, and the other y_u look
random to him as long as he cannot invert RSA; the +1 pattern is therefore hidden except
at position j. The protocol is exponential in the number of bits of the wealth (N values);
it is of historical interest — :mod:`veil.mpc` compares secret-shared values of any size
in 8 rounds.

Threat model. Both parties are honest-but-curious about the *outcome*: Bob learns the
verdict first and may lie about it in step 6 (nothing in the protocol stops him), and Alice's
choice of p is not checked beyond primality. What each side defends against a malicious peer:

* **Bob against Alice's key.** Step 1 hides j only if x -> x^e is a permutation of Z_n. With
  a key where e divides p - 1 it is not: k = E_a(x) is an e-th power residue mod p while each
  m + u - 1 (u != j) is one only with probability 1/e, so Alice would find j by testing
  residuosity. Bob therefore accepts only a *certified permutation* key: e prime and e > n
  (then e cannot divide phi(n) < n, so gcd(e, phi(n)) = 1 without any proof from Alice —
  Catalano, Pointcheval & Pornin, "Trapdoor hard-to-invert group isomorphisms", the
  large-prime-exponent argument), n odd with no prime factor below 2^16 (Bob's x is then a
  unit except with negligible probability), and n of ``min_bits`` (2048) to 16384 bits.
  :func:`keygen` makes such a key.
* **Alice against Bob's message.** m must be an element of Z_n of the key's width. An honest
  m gives values y_u that are uniform and independent, so a random prime p separates them by
  2 at the first try except with probability about N^2 / p; Alice refuses outright a message
  whose y_u already differ by at most 1 as integers (no p can separate them) and gives up
  after a few primes, so one message costs her at most N decryptions and ``_MAX_TRIES``
  prime searches, never minutes.

Sans-I/O: :class:`Bob` makes the first message, :class:`Alice` answers, :class:`Bob`
concludes and makes the last message, :class:`Alice` reads it; messages are bytes.
"""

from __future__ import annotations

from typing import Any

import gmpy2

from veil._validation import check_int
from veil.crypto import _primes
from veil.crypto.multiplicative import RSAPrivateKey, RSAPublicKey, rsa_keygen
from veil.crypto.paillier import check_key_bits
from veil.errors import ConfigError, ProtocolError
from veil.random import check_rng

__all__ = ["Alice", "Bob", "compare", "keygen"]

_MAX_TRIES = 8
_MAX_BITS = 16384


def keygen(bits: int = 2048, *, insecure_ok: bool = False, rng=None) -> RSAPrivateKey:
    """Alice's RSA key for this protocol: a ``bits``-bit n and a prime e > n (see above)."""
    rng = check_rng(rng)
    bits = check_key_bits(bits, insecure_ok)
    e = _primes.random_prime(bits + 1, rng=rng)  # > 2^bits > n
    return rsa_keygen(bits, e=int(e), insecure_ok=insecure_ok, rng=rng)[1]


def _check_alice_key(key: RSAPublicKey, min_bits: int) -> None:
    """Bob's checks of Alice's public key (module docstring): raise ProtocolError if unfit."""
    n, e = int(key.n), int(key.e)
    if not min_bits <= key.bits <= _MAX_BITS:
        raise ProtocolError(f"Alice's key has {key.bits} bits; allowed: {min_bits} to "
                            f"{_MAX_BITS}")
    if e <= n or not gmpy2.is_prime(e, 40):
        raise ProtocolError("Alice's public exponent must be a prime larger than n (a "
                            "certified permutation; make the key with millionaires.keygen); "
                            f"got a {e.bit_length()}-bit e for a {key.bits}-bit n")
    factor = _primes.small_factor(n)
    if factor is not None:
        raise ProtocolError(f"Alice's modulus has the small factor {factor}")


def _width(n: int) -> int:
    return (int(n).bit_length() + 7) // 8


def _check_wealth(value: Any, name: str, values: int) -> int:
    return check_int(value, name, low=1, high=values)


class Alice:
    """The key owner, worth ``wealth`` (1..``values``)."""

    def __init__(self, wealth: int, private_key: RSAPrivateKey, *, values: int = 10,
                 rng=None) -> None:
        self.values = check_int(values, "values", low=2, high=10_000)
        self.wealth = _check_wealth(wealth, "wealth", self.values)
        if not isinstance(private_key, RSAPrivateKey):
            raise ConfigError("private_key must be a veil.crypto.multiplicative.RSAPrivateKey")
        self._key = private_key
        self._rng = check_rng(rng)
        self.result: bool | None = None

    @property
    def public_key(self) -> RSAPublicKey:
        return self._key.public_key

    def respond(self, message: bytes) -> bytes:
        """Steps 2-4: from Bob's ``m``, the prime p and the (partly shifted) sequence z."""
        n = int(self.public_key.n)
        width = _width(n)
        if len(message) != width:
            raise ProtocolError(f"Bob's message has {len(message)} bytes; expected {width}")
        m = int.from_bytes(message, "big")
        if m >= n:
            raise ProtocolError("Bob's value is outside Z_n")
        ys = [self._key.decrypt((m + u) % n) for u in range(self.values)]
        ordered = sorted(ys)
        if any(b - a <= 1 for a, b in zip(ordered, ordered[1:])):
            raise ProtocolError("Bob's value makes two of the decrypted values adjacent, so "
                                "no prime can separate them: refused")
        half = max(self.public_key.bits // 2, 16)
        for _ in range(_MAX_TRIES):
            p = int(_primes.random_prime(half, rng=self._rng))
            zs = [y % p for y in ys]
            ordered = sorted(zs)
            gaps = [b - a for a, b in zip(ordered, ordered[1:])] + [ordered[0] + p - ordered[-1]]
            if min(gaps) >= 2:
                break
        else:
            raise ProtocolError(f"no prime of {half} bits separated the values by 2 in "
                                f"{_MAX_TRIES} tries (an honest Bob fails with probability "
                                f"about {self.values}^2 / 2^{half}): Bob's value refused")
        sent = [z if u < self.wealth else (z + 1) % p for u, z in enumerate(zs)]
        pw = _width(p)
        return pw.to_bytes(2, "big") + p.to_bytes(pw, "big") + b"".join(
            z.to_bytes(pw, "big") for z in sent)

    def learn(self, message: bytes) -> bool:
        """Step 6, Alice's side: Bob's conclusion ``i >= j``."""
        if message not in (b"\x00", b"\x01"):
            raise ProtocolError("Bob's conclusion must be one byte, 0 or 1")
        self.result = message == b"\x01"
        return self.result


class Bob:
    """The other millionaire, worth ``wealth`` (1..``values``), with Alice's public key.

    Alice's key is checked before anything is sent (module docstring); ``insecure_ok=True``
    lowers the size floor from 2048 to 128 bits for tests and demos only.
    """

    def __init__(self, wealth: int, public_key: RSAPublicKey, *, values: int = 10,
                 insecure_ok: bool = False, rng=None) -> None:
        self.values = check_int(values, "values", low=2, high=10_000)
        self.wealth = _check_wealth(wealth, "wealth", self.values)
        if not isinstance(public_key, RSAPublicKey):
            raise ConfigError("public_key must be a veil.crypto.multiplicative.RSAPublicKey")
        _check_alice_key(public_key, 128 if insecure_ok else 2048)
        self._pk = public_key
        self._rng = check_rng(rng)
        self._x: int | None = None
        self.result: bool | None = None

    def start(self) -> bytes:
        """Step 1: ``m = E_a(x) - j + 1 (mod n)`` for a random x."""
        n = int(self._pk.n)
        self._x = self._rng.randbelow(n)
        k = int(self._pk.encrypt(self._x).value)
        return ((k - self.wealth + 1) % n).to_bytes(_width(n), "big")

    def finish(self, message: bytes) -> bytes:
        """Step 5: decide ``i >= j`` from Alice's sequence; returns the message for Alice."""
        if self._x is None:
            raise ProtocolError("finish() before start()")
        if len(message) < 2:
            raise ProtocolError("Alice's message is too short")
        pw = int.from_bytes(message[:2], "big")
        if pw == 0 or len(message) != 2 + pw * (self.values + 1):
            raise ProtocolError(f"Alice's message has {len(message)} bytes; expected "
                                f"{2 + pw * (self.values + 1)} for {self.values} values")
        p = int.from_bytes(message[2:2 + pw], "big")
        if p < 5 or not gmpy2.is_prime(p):
            raise ProtocolError("Alice's modulus p is not a prime")
        offset = 2 + pw * self.wealth  # the j-th number (1-based) after p
        z_j = int.from_bytes(message[offset:offset + pw], "big")
        self.result = z_j == self._x % p
        return b"\x01" if self.result else b"\x00"


def compare(alice_wealth: int, bob_wealth: int, *, private_key: RSAPrivateKey,
            values: int = 10, insecure_ok: bool = False, rng=None) -> bool:
    """Run the protocol in this process; returns ``alice_wealth >= bob_wealth``."""
    alice_rng, bob_rng = check_rng(rng).spawn(2)
    alice = Alice(alice_wealth, private_key, values=values, rng=alice_rng)
    bob = Bob(bob_wealth, private_key.public_key, values=values, insecure_ok=insecure_ok,
              rng=bob_rng)
    conclusion = bob.finish(alice.respond(bob.start()))
    return alice.learn(conclusion)
