"""Paillier key generation: safe primes and the fixed-base noise base h_s (see
:mod:`veil.crypto.paillier`, "Noise")."""

from __future__ import annotations

from typing import Any

import gmpy2
from gmpy2 import mpz

from veil.crypto import _primes
from veil.crypto.paillier.keys import PrivateKey, PublicKey, check_key_bits
from veil.errors import ConfigError
from veil.random import RngLike, check_rng

__all__ = ["check_safe_primes", "generate_safe_primes", "keygen", "make_noise_base"]


def generate_safe_primes(bits: int = 2048, *, insecure_ok: bool = False,
                         rng: RngLike = None) -> tuple[mpz, mpz]:
    """Two distinct random safe primes of ``bits / 2`` bits each, for a ``bits``-bit key.

    This is the slow part of key generation (about a second for a 2048-bit key on one
    core, with high variance). A dealer may generate them once, keep them as secret as a
    private key -- e.g. as the p, q of a Paillier private key stored with
    :mod:`veil.crypto.serialization` -- and pass them to ``keygen(primes=...)`` of this
    module or of :mod:`veil.crypto.threshold`.
    """
    bits = check_key_bits(bits, insecure_ok)
    rng = check_rng(rng)
    p = _primes.safe_prime(bits // 2, rng=rng)
    while True:
        q = _primes.safe_prime(bits // 2, rng=rng)
        if q != p:
            return p, q


def check_safe_primes(primes: Any, bits: int) -> tuple[mpz, mpz]:
    """Two distinct safe primes of ``bits / 2`` bits each (ConfigError otherwise)."""
    try:
        p, q = (mpz(x) for x in primes)
    except (TypeError, ValueError):
        raise ConfigError("primes is not allowed: expected a pair of integers") from None
    for name, x in (("primes[0]", p), ("primes[1]", q)):
        if x.bit_length() != bits // 2 or not _primes.is_safe_prime(x):
            raise ConfigError(f"{name} is not allowed: need a safe prime of {bits // 2} bits")
    if p == q:
        raise ConfigError("primes is not allowed: the two safe primes must differ")
    return p, q


def make_noise_base(p: mpz, q: mpz, rng: RngLike) -> mpz:
    """h_s = h^n mod n^2 for h = -y^2 mod n generating J_n (safe primes p, q; see module)."""
    n = p * q
    order = (p - 1) // 2 * ((q - 1) // 2)                    # p' q': J_n has order 2 p' q'
    while True:
        y = mpz(rng.randbelow(n - 2) + 2)
        h = -y * y % n
        # h^(p'q') = -1 always; h generates J_n unless it lies in a subgroup of index p', q'
        if gmpy2.gcd(y, n) == 1 and all(gmpy2.powmod(h, 2 * order // r, n) != 1
                                        for r in ((p - 1) // 2, (q - 1) // 2)):
            return gmpy2.powmod(h, n, n * n)


def keygen(bits: int = 2048, *, insecure_ok: bool = False, short_exponents: bool = False,
           primes: tuple[int, int] | None = None,
           rng: RngLike = None) -> tuple[PublicKey, PrivateKey]:
    """A Paillier key pair on a ``bits``-bit modulus of two safe primes, with noise base h_s.

    ``short_exponents=True`` selects DJN's short noise exponents (faster encryption under
    an extra assumption, see the module docstring). ``primes``: pre-generated safe primes
    (:func:`generate_safe_primes`). Keys under 2048 bits need ``insecure_ok=True``.
    """
    bits = check_key_bits(bits, insecure_ok)
    rng = check_rng(rng)
    if primes is None:
        p, q = generate_safe_primes(bits, insecure_ok=insecure_ok, rng=rng)
    else:
        p, q = check_safe_primes(primes, bits)
    pk = PublicKey(p * q, noise_base=make_noise_base(p, q, rng),
                   short_exponents=short_exponents)
    return pk, PrivateKey(p, q, pk)
