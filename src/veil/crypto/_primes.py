"""Random primes and safe primes for veil's public-key schemes.

Both generators search incrementally from a uniformly random odd start (the method of
Brandt & Damgard, CRYPTO 1992, used by most RSA key generators) and sieve a whole window
of candidates with numpy before any big-integer test:

* For a **random prime** of ``bits`` bits, candidates ``x = x0 + 2k`` are struck out when
  a small odd prime l <= ``_SIEVE_BOUND`` divides them.
* For a **safe prime** ``p = 2q + 1`` (q prime, as the threshold schemes of Shoup 2000 and
  Damgard & Jurik 2001 need) the candidates are ``q = q0 + 2k`` and each small prime l
  strikes out both residues ``k = -q0/2 mod l`` (l | q) and ``k = -(2 q0 + 1)/4 mod l``
  (l | 2q + 1). Only about 0.7% of the window survives (l up to 2^18), so a 1024-bit safe
  prime costs roughly a thousand cheap base-2 Fermat tests on q instead of ~10^5.

A survivor passes a base-2 Fermat test on q (and on p = 2q + 1), then GMP's
``is_prime`` (Baillie-PSW plus Miller-Rabin rounds with random bases) on every number
that is returned. The top two bits of every prime are set, so the product of two of them
has exactly twice as many bits.
"""

from __future__ import annotations

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil.errors import ConfigError
from veil.random import check_rng

__all__ = ["random_prime", "safe_prime", "is_safe_prime", "small_factor"]

_SIEVE_BOUND = 1 << 18
_WINDOW = 1 << 18          # odd candidates sieved at a time
_MR_ROUNDS = 40            # is_prime(x, 40): BPSW + 16 random-base Miller-Rabin rounds


def _small_primes(bound: int) -> np.ndarray:
    """Odd primes below ``bound`` (sieve of Eratosthenes)."""
    mark = np.ones(bound, dtype=bool)
    mark[:2] = False
    for i in range(2, int(bound ** 0.5) + 1):
        if mark[i]:
            mark[i * i::i] = False
    primes = np.flatnonzero(mark)
    return primes[primes > 2].astype(np.int64)


_PRIMES = _small_primes(_SIEVE_BOUND)
_INV2 = (_PRIMES + 1) // 2                 # 2^-1 mod l
_INV4 = (_INV2 * _INV2) % _PRIMES          # 4^-1 mod l


_SMALL_PRODUCT = mpz(2)
for _l in _PRIMES[_PRIMES < 1 << 16].tolist():
    _SMALL_PRODUCT *= _l


def small_factor(n: int) -> int | None:
    """A prime factor of ``n`` below 2^16, or None (one gcd with their product)."""
    g = gmpy2.gcd(mpz(n), _SMALL_PRODUCT)
    if g == 1:
        return None
    return next(int(l) for l in [2, *_PRIMES.tolist()] if g % l == 0)


def _residues(x0: mpz) -> np.ndarray:
    return np.array([int(x0 % int(l)) for l in _PRIMES], dtype=np.int64)


def _sieve(x0: mpz, safe: bool) -> np.ndarray:
    """Offsets k (ascending) of candidates x0 + 2k with no small factor (nor 2(x0+2k)+1)."""
    keep = np.ones(_WINDOW, dtype=bool)
    r = _residues(x0)
    first = (-r * _INV2) % _PRIMES                       # l | x0 + 2k
    starts = [first]
    if safe:
        starts.append((-(2 * r + 1) % _PRIMES) * _INV4 % _PRIMES)   # l | 2(x0 + 2k) + 1
    for column in starts:
        for l, k in zip(_PRIMES.tolist(), column.tolist()):
            keep[k::l] = False
    return np.flatnonzero(keep)


def _fermat(x: mpz) -> bool:
    return gmpy2.powmod(2, x - 1, x) == 1


def _start(bits: int, rng) -> mpz:
    """A uniform odd ``bits``-bit number with its two top bits set."""
    x = mpz(rng.randbits(bits)) | (mpz(3) << (bits - 2)) | 1
    return x


def _search(bits: int, safe: bool, rng) -> mpz:
    top = mpz(1) << bits
    while True:
        x0 = _start(bits, rng)
        for k in _sieve(x0, safe).tolist():
            x = x0 + 2 * k
            if x >= top:
                break
            if not _fermat(x):
                continue
            if safe and not _fermat(2 * x + 1):
                continue
            if gmpy2.is_prime(x, _MR_ROUNDS) and (not safe or gmpy2.is_prime(2 * x + 1,
                                                                               _MR_ROUNDS)):
                return 2 * x + 1 if safe else x


def _check_bits(bits: int, minimum: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < minimum:
        raise ConfigError(f"bits={bits!r} is not allowed: must be an integer >= {minimum}")
    return bits


def random_prime(bits: int, *, rng=None) -> mpz:
    """A random prime of exactly ``bits`` bits whose two top bits are set."""
    _check_bits(bits, 32)
    return _search(bits, False, check_rng(rng))


def safe_prime(bits: int, *, rng=None) -> mpz:
    """A random safe prime p = 2q + 1 (q prime) of exactly ``bits`` bits, top two bits set."""
    _check_bits(bits, 32)
    return _search(bits - 1, True, check_rng(rng))


def is_safe_prime(p: int) -> bool:
    """Whether ``p`` = 2q + 1 with p and q both (probable) primes."""
    p = mpz(p)
    return (p > 7 and p % 2 == 1 and gmpy2.is_prime(p, _MR_ROUNDS)
            and gmpy2.is_prime((p - 1) // 2, _MR_ROUNDS))
