"""Paillier encryption with g = n + 1, CRT decryption, noise pools and a vector API.

The scheme (Paillier, "Public-key cryptosystems based on composite degree residuosity
classes", EUROCRYPT 1999)
------------------------------------------------------------------------------------
Key: n = p q for primes p, q of ``bits / 2`` bits each (so gcd(n, phi(n)) = 1); veil's
:func:`keygen` uses safe primes p = 2p' + 1, q = 2q' + 1 (see "Noise" below).
Encryption of m in Z_n with randomness r uniform in Z_n^*::

    E(m) = g^m r^n mod n^2,  g = n + 1,  so  g^m = (1 + n)^m = 1 + m n  (mod n^2)

by the binomial theorem: the "exponentiation" g^m is one multiplication. Everything that
makes a ciphertext random is the *noise* r^n, an element of the subgroup of n-th residues.

Decryption with the Chinese remainder theorem (as Paillier 1999 suggests): the order of
r^n mod p^2 divides p - 1 and (1 + n)^(p-1) = 1 + (p - 1) n  (mod p^2), so with
L_p(x) = (x - 1) / p::

    m_p = L_p(c^(p-1) mod p^2) * h_p mod p,   h_p = L_p(g^(p-1) mod p^2)^(-1) = (-q)^(-1) mod p

and the same mod q; m = m_p + p ((m_q - m_p) p^(-1) mod q). Two exponentiations with
``bits/2``-bit exponents modulo ``bits``-bit moduli instead of one with a ``bits``-bit
exponent modulo n^2: about 3.5 times faster than the textbook L(c^lambda) mu.

Homomorphism: E(a) E(b) = E(a + b), E(a)^k = E(k a), E(a) (1 + b n) = E(a + b),
E(a)^(-1) = E(-a), all mod n^2, plaintexts mod n.

Signed plaintexts: an integer m is encrypted as m mod n, and a decryption d in [0, n) is
read as d if d <= (n - 1) / 2 and as d - n otherwise. The representable range is the
symmetric interval [-(n-1)/2, (n-1)/2] ("(-n/2, n/2]" for odd n); encrypting a value
outside it raises :class:`~veil.errors.CryptoError`. Results of homomorphic operations are
computed mod n: overflow detection is the job of :mod:`veil.crypto.encoding`.

Noise
-----
Reusing a noise value leaks: E(a) / E(b) = g^(a - b) when both use the same r^n. Noise is
therefore only ever *drawn*: fresh from the CSPRNG, or popped from a :class:`NoisePool`
(a deque that hands out each value once; there is no way to index it). Sources:

* **Fixed-base noise** (keys from :func:`keygen`, the default): following Damgard, Jurik &
  Nielsen ("A generalization of Paillier's public-key system with applications to
  electronic voting", IJIS 2010), the public key carries h_s = h^n mod n^2
  for h = -y^2 mod n, y random, and the noise is h_s^a = (h^a)^n, computed with a
  fixed-base table (no squarings). With safe primes, Z_n^* = Z_2 x Z_2 x Z_(p'q') and the
  Jacobi-symbol-1 subgroup J_n = {+-1} x QR_n is cyclic of order 2p'q'; the key owner
  checks that h generates it. With a uniform in [0, 2^(bits + 128)) (full length), a mod
  2p'q' is within 2^-128 of uniform, so the noise is statistically close to uniform over
  {r^n : r in J_n}: IND-CPA under DCR alone, because DCR restricted to Jacobi symbol 1 is
  equivalent to DCR (Jacobi symbols are public, and multiplying by w^n for a public w of
  symbol -1 moves any instance into J_n). About 5x faster than r^n (~12 MB table at 2048
  bits, built on first use).
* **DJN short exponents** (``keygen(short_exponents=True)``): the same h_s with a uniform
  ``ceil(bits/2)``-bit a, DJN's original proposal, about 14x faster than r^n (~17 MB
  table). *Security assumption*: besides DCR, that h^a for such a short a is
  computationally indistinguishable from a uniform element of <h> (a short-exponent
  indistinguishability assumption in the hidden-order group J_n, under which DJN prove
  semantic security). Use it when that extra assumption is acceptable.
* **CRT noise** for the key owner (a pool given the private key, for keys without h_s):
  r^n mod p^2 is the unique element of order dividing p - 1 congruent to r^n mod p, i.e.
  ``a^p mod p^2`` for a uniform in Z_p^* (a -> a^n mod p is a bijection because
  gcd(n, p - 1) = 1), and the same mod q; CRT gives r^n mod n^2 with two ``bits/2``-bit
  exponentiations mod p^2, q^2: the standard distribution, about 3.5x faster. Only the key
  owner may use it, for data it encrypts itself.
* **Standard**: r^n mod n^2 with r uniform in [1, n), for public keys given as a bare n
  (e.g. from python-paillier). A non-unit r has probability about 2^(1 - bits/2).

With a filled pool, online encryption is one multiplication: (1 + m n) * r^n mod n^2.

Validation: a ciphertext built from outside integers (``EncryptedNumber(pk, c)``,
``EncryptedArray(pk, cs)``, deserialization) must satisfy 0 < c < n^2 and gcd(c, n) = 1;
ciphertexts combined by an operation must be under the same key. Violations raise
:class:`~veil.errors.CryptoError`. Results of operations are valid by construction.
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil.crypto import _primes
from veil.crypto._fastexp import FixedBase
from veil.errors import ConfigError, CryptoError
from veil.random import check_rng

__all__ = [
    "PublicKey",
    "PrivateKey",
    "EncryptedNumber",
    "EncryptedArray",
    "NoisePool",
    "keygen",
    "generate_safe_primes",
    "MIN_SECURE_BITS",
]

logger = logging.getLogger(__name__)

MIN_SECURE_BITS = 2048
_MIN_INSECURE_BITS = 128
_POWMOD = np.frompyfunc(gmpy2.powmod, 3, 1)
_INVERT = np.frompyfunc(gmpy2.invert, 2, 1)


def check_key_bits(bits: Any, insecure_ok: bool) -> int:
    """A modulus size: even, >= 2048 (>= 128 with ``insecure_ok=True`` for tests and demos)."""
    minimum = _MIN_INSECURE_BITS if insecure_ok else MIN_SECURE_BITS
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or bits % 2:
        raise ConfigError(f"bits={bits!r} is not allowed: must be an even integer")
    if bits < minimum:
        hint = "" if insecure_ok else " (smaller keys only with insecure_ok=True, for tests)"
        raise ConfigError(f"bits={bits!r} is not allowed: must be >= {minimum}{hint}")
    return int(bits)


def _is_int(x: Any) -> bool:
    """Python/numpy/gmpy2 integers (mpz registers as numbers.Integral), not bools."""
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def as_int_array(values: Any, name: str) -> np.ndarray:
    """Integers (int, numpy int array, nested lists, object array of ints) as an object array.

    Floats, bools and anything else raise CryptoError: Paillier works on integers, floats go
    through :mod:`veil.crypto.encoding` first.
    """
    arr = np.asarray(values, dtype=object if isinstance(values, list) else None)
    if arr.dtype != object:
        if np.issubdtype(arr.dtype, np.integer):
            return arr.astype(object)
        raise CryptoError(f"{name} has dtype {arr.dtype}; Paillier encrypts integers only "
                          "(encode floats with veil.crypto.encoding.FixedPoint)")
    flat = arr.ravel()
    for i, x in enumerate(flat):
        if not _is_int(x):
            raise CryptoError(f"{name}[{i}]={x!r} is not an integer; Paillier encrypts "
                              "integers only (encode floats with veil.crypto.encoding)")
    return np.array([int(x) for x in flat], dtype=object).reshape(arr.shape)


def _fingerprint(*fields: int) -> bytes:
    h = hashlib.sha256(b"veil.crypto key")
    for f in fields:
        raw = int(f).to_bytes((int(f).bit_length() + 7) // 8 or 1, "big")
        h.update(len(raw).to_bytes(4, "big") + raw)
    return h.digest()[:16]


# ----------------------------------------------------------------------------- keys

class PublicKey:
    """A Paillier public key: modulus ``n`` (g = n + 1) and optionally the noise base h_s.

    ``noise_base``: h_s = (-y^2)^n mod n^2 made by the key owner (see module docstring);
    ``short_exponents``: draw DJN's short exponents for it instead of full-length ones.
    Without ``noise_base`` the noise is the standard r^n.
    """

    def __init__(self, n: int, *, noise_base: int | None = None,
                 short_exponents: bool = False) -> None:
        n = mpz(n)
        if n < 2 ** (_MIN_INSECURE_BITS - 1) or n % 2 == 0:
            raise CryptoError(f"n={int(n)} is not allowed: a Paillier modulus is an odd "
                              f"integer of at least {_MIN_INSECURE_BITS} bits")
        self.n = n
        self.n2 = n * n
        self.half = (n - 1) // 2
        self.noise_base = None
        if noise_base is not None:
            h = mpz(noise_base)
            if not (1 < h < self.n2 and gmpy2.gcd(h, n) == 1):
                raise CryptoError("noise_base is not allowed: must be a unit modulo n^2 "
                                  "other than 1")
            self.noise_base = h
        elif short_exponents:
            raise CryptoError("short_exponents needs a noise_base")
        self.short_exponents = bool(short_exponents)
        self._fp: bytes | None = None
        self._init_caches()

    #: attributes rebuilt, not pickled (:meth:`__getstate__`)
    _CACHES: tuple[str, ...] = ("_table", "_lock")

    def _init_caches(self) -> None:
        """No fixed-base table yet (it is built on first use, under the lock)."""
        self._table: FixedBase | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # A copy carries the key's numbers only: locks cannot be pickled, and the tables
        # (megabytes) are rebuilt on first use in the receiving process.
        state = self.__dict__.copy()
        for name in self._CACHES:
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_caches()

    @property
    def bits(self) -> int:
        """Bit length of n."""
        return int(self.n.bit_length())

    @property
    def fingerprint(self) -> bytes:
        """16 bytes that identify the key (SHA-256 of its fields)."""
        if self._fp is None:
            self._fp = _fingerprint(*self._identity())
        return self._fp

    def _identity(self) -> tuple[int, ...]:
        return (self.n,)

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, PublicKey) and type(other) is type(self)
                                 and self.fingerprint == other.fingerprint)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        mode = ("r^n" if self.noise_base is None else
                "short-exponent h_s^a" if self.short_exponents else "h_s^a")
        return (f"paillier.PublicKey(bits={self.bits}, noise={mode}, "
                f"fingerprint={self.fingerprint.hex()})")

    # -- plaintexts --------------------------------------------------------------
    def _plaintext(self, values: Any, name: str = "plaintext") -> Any:
        """Signed plaintext(s) in [-(n-1)/2, (n-1)/2]: an int or an object array of ints."""
        if _is_int(values):
            m = int(values)
            if -self.half <= m <= self.half:
                return m
            raise CryptoError(f"{name}={m} is outside the plaintext range "
                              f"[-(n-1)/2, (n-1)/2] of this {self.bits}-bit key")
        arr = as_int_array(values, name)
        bad = np.flatnonzero(((arr < -self.half) | (arr > self.half)).ravel())
        if bad.size:
            i = int(bad[0])
            raise CryptoError(f"{name}[{i}]={arr.ravel()[i]} is outside the plaintext range "
                              f"[-(n-1)/2, (n-1)/2] of this {self.bits}-bit key")
        return arr

    def _scalar(self, k: Any) -> Any:
        """A plaintext multiplier reduced to the symmetric range (k and k mod n act alike)."""
        if _is_int(k):
            k = int(k) % self.n
            return k - self.n if k > self.half else k
        arr = as_int_array(k, "multiplier")
        red = arr % self.n
        return np.where(red > self.half, red - self.n, red)

    # -- noise -------------------------------------------------------------------
    @property
    def _noise_bits(self) -> int:
        """Exponent length for h_s^a: ceil(bits/2) (DJN) or bits + 128 (full length)."""
        return (self.bits + 1) // 2 if self.short_exponents else self.bits + 128

    def _noise_table(self) -> FixedBase:
        with self._lock:
            if self._table is None:
                window = 8 if self.short_exponents else 6
                self._table = FixedBase(self.noise_base, self.n2, self._noise_bits, window)
            return self._table

    def noise(self, count: int, *, rng: Any = None) -> list[mpz]:
        """``count`` fresh noise values: h_s^a with the key's noise base, else r^n mod n^2."""
        rng = check_rng(rng)
        if self.noise_base is not None:
            table, bits = self._noise_table(), self._noise_bits
            return [table.pow(rng.randbits(bits)) for _ in range(count)]
        rs = [mpz(rng.randbelow(self.n - 1) + 1) for _ in range(count)]
        return gmpy2.powmod_base_list(rs, self.n, self.n2)

    def _draw_noise(self, count: int, pool: NoisePool | None, rng: Any) -> list[mpz]:
        if pool is None:
            return self.noise(count, rng=rng)
        if pool.public_key != self:
            raise CryptoError("pool is for a different public key "
                              f"({pool.public_key.fingerprint.hex()} != {self.fingerprint.hex()})")
        return pool.take(count)

    # -- encryption ----------------------------------------------------------------
    def encrypt(self, values: Any, *, pool: NoisePool | None = None,
                rng: Any = None) -> EncryptedNumber | EncryptedArray:
        """E(m) = (1 + m n) r^n mod n^2 for an int or an integer array (elementwise).

        ``pool``: a :class:`NoisePool` for this key (online encryption is then one
        multiplication per value); otherwise noise is computed now from ``rng``.
        """
        m = self._plaintext(values)
        n, n2 = self.n, self.n2
        if isinstance(m, int):
            r = self._draw_noise(1, pool, rng)[0]
            return EncryptedNumber._trusted(self, (m * n + 1) * r % n2)
        flat = m.ravel()
        noise = self._draw_noise(flat.size, pool, rng)
        out = np.empty(flat.size, dtype=object)
        out[:] = [(x * n + 1) * r % n2 for x, r in zip(flat.tolist(), noise)]
        return _wrap(self, out.reshape(m.shape))

    def _check_ciphertext(self, c: Any, where: str) -> mpz:
        if not _is_int(c):
            raise CryptoError(f"{where}={c!r} is not an integer ciphertext")
        c = mpz(c)
        if not 0 < c < self.n2:
            raise CryptoError(f"{where} is not a ciphertext of this key: must satisfy "
                              f"0 < c < n^2 for the {self.bits}-bit modulus")
        if gmpy2.gcd(c, self.n) != 1:
            raise CryptoError(f"{where} is not a ciphertext: gcd(c, n) != 1")
        return c


class PrivateKey:
    """A Paillier private key: the primes p, q, with CRT decryption constants."""

    def __init__(self, p: int, q: int, public_key: PublicKey | None = None) -> None:
        p, q = mpz(p), mpz(q)
        if p == q or p < 3 or q < 3 or not (gmpy2.is_prime(p, 30) and gmpy2.is_prime(q, 30)):
            raise CryptoError("p, q are not allowed: need two distinct odd primes")
        n = p * q
        if gmpy2.gcd(n, (p - 1) * (q - 1)) != 1:
            raise CryptoError("p, q are not allowed: gcd(n, (p-1)(q-1)) must be 1")
        if public_key is None:
            public_key = PublicKey(n)
        elif public_key.n != n:
            raise CryptoError("the private key does not match the public key (n != p q)")
        self.public_key = public_key
        self.p, self.q = p, q
        self.p2, self.q2 = p * p, q * q
        self.hp = gmpy2.invert(-q % p, p)          # L_p(g^(p-1) mod p^2)^-1 = (-q)^-1 mod p
        self.hq = gmpy2.invert(-p % q, q)
        self.p_inv_q = gmpy2.invert(p, q)
        self.p2_inv_q2 = gmpy2.invert(self.p2, self.q2)

    def __repr__(self) -> str:
        return f"paillier.PrivateKey(bits={self.public_key.bits})"

    def _crt(self, mp: mpz, mq: mpz) -> mpz:
        return mp + self.p * ((mq - mp) * self.p_inv_q % self.q)

    def _signed(self, m: mpz) -> int:
        pk = self.public_key
        return int(m - pk.n) if m > pk.half else int(m)

    def decrypt(self, c: EncryptedNumber | EncryptedArray) -> Any:
        """The signed plaintext: an int, or an object array of ints of the same shape."""
        if not isinstance(c, (EncryptedNumber, EncryptedArray)):
            raise CryptoError(f"cannot decrypt {type(c).__name__}: pass an EncryptedNumber "
                              "or EncryptedArray (wrap raw integers with EncryptedNumber(pk, c))")
        _check_same_key(self.public_key, c.public_key)
        p, q = self.p, self.q
        if isinstance(c, EncryptedNumber):
            xp = gmpy2.powmod(c._raw, p - 1, self.p2)
            xq = gmpy2.powmod(c._raw, q - 1, self.q2)
            return self._signed(self._crt((xp - 1) // p * self.hp % p,
                                          (xq - 1) // q * self.hq % q))
        flat = c._raw.ravel().tolist()
        xps = gmpy2.powmod_base_list(flat, p - 1, self.p2)
        xqs = gmpy2.powmod_base_list(flat, q - 1, self.q2)
        out = np.empty(len(flat), dtype=object)
        out[:] = [self._signed(self._crt((xp - 1) // p * self.hp % p,
                                         (xq - 1) // q * self.hq % q))
                  for xp, xq in zip(xps, xqs)]
        return out.reshape(c.shape)

    def noise(self, count: int, *, rng: Any = None) -> list[mpz]:
        """``count`` noise values: by CRT for a bare-n key (see module), else the key's h_s^a."""
        pk = self.public_key
        if pk.noise_base is not None:
            return pk.noise(count, rng=rng)
        rng = check_rng(rng)
        ap = [mpz(rng.randbelow(self.p - 1) + 1) for _ in range(count)]
        aq = [mpz(rng.randbelow(self.q - 1) + 1) for _ in range(count)]
        xps = gmpy2.powmod_base_list(ap, self.p, self.p2)
        xqs = gmpy2.powmod_base_list(aq, self.q, self.q2)
        p2, q2, inv = self.p2, self.q2, self.p2_inv_q2
        return [xp + p2 * ((xq - xp) * inv % q2) for xp, xq in zip(xps, xqs)]


def generate_safe_primes(bits: int = 2048, *, insecure_ok: bool = False,
                         rng: Any = None) -> tuple[mpz, mpz]:
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


def make_noise_base(p: mpz, q: mpz, rng: Any) -> mpz:
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
           rng: Any = None) -> tuple[PublicKey, PrivateKey]:
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


# ----------------------------------------------------------------------------- pool

class NoisePool:
    """Precomputed noise values for one key, each handed out exactly once.

    Fill it offline (:meth:`fill`) or keep it topped up by a background thread
    (:meth:`start` / :meth:`stop`, or ``with pool:``); ``pk.encrypt(x, pool=pool)`` then
    costs one multiplication per value. Values are popped from a deque, never indexed, so
    no value can be used twice; when the pool runs dry, fresh noise is computed on demand.
    ``private_key``: for a bare-n key the key owner may pass its private key to fill by
    CRT (about 3.5x faster than r^n), for data it encrypts itself only. The background
    thread runs in parallel with the encrypting thread for r^n and CRT noise (GMP's
    batched exponentiation releases the GIL); fixed-base noise is computed in Python and
    shares the interpreter with it. Pickling a pool (e.g. with its owner, to another
    process) gives a new, empty pool for the same key with its own OS-seeded generator:
    values are never copied, so none can be used in two places.
    """

    def __init__(self, public_key: PublicKey, *, capacity: int = 4096,
                 private_key: PrivateKey | None = None, rng: Any = None) -> None:
        if not isinstance(public_key, PublicKey):
            raise ConfigError(f"public_key={public_key!r} is not allowed: expected a "
                              "paillier.PublicKey")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"capacity={capacity!r} is not allowed: must be an integer >= 1")
        if private_key is not None and private_key.public_key != public_key:
            raise CryptoError("private_key does not belong to public_key")
        self.public_key = public_key
        self.capacity = capacity
        self._private_key = private_key
        self._source: Callable[..., list[mpz]] = (
            private_key.noise if private_key is not None else public_key.noise)
        self._rng = check_rng(rng)
        self._values: deque[mpz] = deque()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._values)

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled pool is a new, empty pool for the same key: the unused values stay in
        # this one, and the copy computes its own with its own OS-seeded generator, so no
        # noise value -- nor a generator state that would repeat one -- is in two places.
        return (_empty_pool, (self.public_key, self.capacity, self._private_key))

    def __repr__(self) -> str:
        state = "running" if self._thread is not None else "idle"
        return f"paillier.NoisePool({len(self)}/{self.capacity}, {state})"

    def fill(self, count: int | None = None) -> None:
        """Compute noise now: ``count`` more values, or up to capacity when None."""
        need = self.capacity - len(self._values) if count is None else count
        if need > 0:
            self._values.extend(self._source(need, rng=self._rng))

    def take(self, count: int) -> list[mpz]:
        """Pop ``count`` values (computing any shortfall fresh)."""
        out = []
        pop = self._values.popleft
        try:
            for _ in range(count):
                out.append(pop())
        except IndexError:
            short = count - len(out)
            logger.debug("noise pool ran dry: computing %d values online", short)
            out.extend(self._source(short, rng=self._rng))
        self._wake.set()
        return out

    def start(self) -> NoisePool:
        """Start a daemon thread that keeps the pool filled to capacity."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="veil-noise-pool",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread (values already computed stay in the pool)."""
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join()
            self._thread = None

    def __enter__(self) -> NoisePool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            missing = self.capacity - len(self._values)
            if missing <= 0:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            self._values.extend(self._source(min(missing, 16), rng=self._rng))


def _empty_pool(public_key: PublicKey, capacity: int,
                private_key: PrivateKey | None) -> NoisePool:
    """What a pickled :class:`NoisePool` becomes: an empty pool with a secure generator."""
    return NoisePool(public_key, capacity=capacity, private_key=private_key)


# ----------------------------------------------------------------------------- ciphertexts

def _check_same_key(a: PublicKey, b: PublicKey) -> None:
    if a is not b and a != b:
        raise CryptoError("the ciphertexts are under different public keys "
                          f"({a.fingerprint.hex()} and {b.fingerprint.hex()})")


def _wrap(pk: PublicKey, raw: Any) -> EncryptedNumber | EncryptedArray:
    if isinstance(raw, np.ndarray):
        if raw.ndim == 0:
            return EncryptedNumber._trusted(pk, raw.item())
        return EncryptedArray._trusted(pk, raw)
    return EncryptedNumber._trusted(pk, raw)


def _power(raw: Any, k: Any, n2: mpz) -> Any:
    if isinstance(raw, np.ndarray) or isinstance(k, np.ndarray):
        return _POWMOD(raw, k, n2)
    return gmpy2.powmod(raw, k, n2)


class _Encrypted:
    """Arithmetic shared by EncryptedNumber and EncryptedArray (numpy broadcasting rules)."""

    __slots__ = ("public_key", "_raw")
    __array_ufunc__ = None      # make numpy defer to our reflected operators

    def __add__(self, other: Any) -> EncryptedNumber | EncryptedArray:
        pk = self.public_key
        if isinstance(other, _Encrypted):
            _check_same_key(pk, other.public_key)
            return _wrap(pk, self._raw * other._raw % pk.n2)
        m = pk._plaintext(other, "addend")
        return _wrap(pk, self._raw * (m * pk.n + 1) % pk.n2)

    __radd__ = __add__

    def __neg__(self) -> EncryptedNumber | EncryptedArray:
        pk = self.public_key
        inv = _INVERT(self._raw, pk.n2) if isinstance(self._raw, np.ndarray) else \
            gmpy2.invert(self._raw, pk.n2)
        return _wrap(pk, inv)

    def __sub__(self, other: Any) -> EncryptedNumber | EncryptedArray:
        if isinstance(other, _Encrypted):
            return self + (-other)
        m = self.public_key._plaintext(other, "subtrahend")
        return self + (-m)

    def __rsub__(self, other: Any) -> EncryptedNumber | EncryptedArray:
        return (-self) + other

    def __mul__(self, other: Any) -> EncryptedNumber | EncryptedArray:
        if isinstance(other, _Encrypted):
            raise CryptoError("cannot multiply two Paillier ciphertexts: the scheme is "
                              "additively homomorphic (multiply by plaintext integers only)")
        pk = self.public_key
        return _wrap(pk, _power(self._raw, pk._scalar(other), pk.n2))

    __rmul__ = __mul__

    def rerandomize(self, *, pool: NoisePool | None = None,
                    rng: Any = None) -> EncryptedNumber | EncryptedArray:
        """The same plaintext under fresh noise (unlinkable to this ciphertext)."""
        pk = self.public_key
        size = self._raw.size if isinstance(self._raw, np.ndarray) else 1
        noise = pk._draw_noise(size, pool, rng)
        if isinstance(self._raw, np.ndarray):
            r = np.empty(size, dtype=object)
            r[:] = noise
            return _wrap(pk, self._raw * r.reshape(self._raw.shape) % pk.n2)
        return _wrap(pk, self._raw * noise[0] % pk.n2)


class EncryptedNumber(_Encrypted):
    """One Paillier ciphertext. ``EncryptedNumber(pk, c)`` validates an outside integer c."""

    __slots__ = ()

    def __init__(self, public_key: PublicKey, ciphertext: int) -> None:
        self.public_key = public_key
        self._raw = public_key._check_ciphertext(ciphertext, "ciphertext")

    @classmethod
    def _trusted(cls, public_key: PublicKey, raw: mpz) -> EncryptedNumber:
        obj = object.__new__(cls)
        obj.public_key = public_key
        obj._raw = raw
        return obj

    @property
    def ciphertext(self) -> int:
        """The ciphertext as a Python int in (0, n^2)."""
        return int(self._raw)

    def __repr__(self) -> str:
        return f"EncryptedNumber(key={self.public_key.fingerprint.hex()[:8]})"


class EncryptedArray(_Encrypted):
    """An array of Paillier ciphertexts under one key, with numpy shape semantics.

    Supports ``+``/``-`` with ciphertexts or integer plaintexts (broadcast), ``*`` by integer
    scalars or arrays, ``sum(axis)``, ``dot`` / ``@`` with an integer plaintext matrix,
    indexing, ``reshape``, ``ravel`` and ``T``. ``EncryptedArray(pk, cs)`` validates outside
    integers.
    """

    __slots__ = ()

    def __init__(self, public_key: PublicKey, ciphertexts: Any) -> None:
        arr = np.asarray(ciphertexts, dtype=object)
        flat = np.empty(arr.size, dtype=object)
        flat[:] = [public_key._check_ciphertext(c, f"ciphertexts[{i}]")
                   for i, c in enumerate(arr.ravel().tolist())]
        self.public_key = public_key
        self._raw = flat.reshape(arr.shape)
        self._raw.flags.writeable = False

    @classmethod
    def _trusted(cls, public_key: PublicKey, raw: np.ndarray) -> EncryptedArray:
        obj = object.__new__(cls)
        obj.public_key = public_key
        raw.flags.writeable = False
        obj._raw = raw
        return obj

    @property
    def ciphertexts(self) -> np.ndarray:
        """The ciphertexts, a read-only object array of ints in (0, n^2)."""
        return self._raw

    @property
    def shape(self) -> tuple[int, ...]:
        return self._raw.shape

    @property
    def ndim(self) -> int:
        return self._raw.ndim

    @property
    def size(self) -> int:
        return self._raw.size

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return f"EncryptedArray(shape={self.shape}, key={self.public_key.fingerprint.hex()[:8]})"

    def __getitem__(self, index: Any) -> EncryptedNumber | EncryptedArray:
        return _wrap(self.public_key, self._raw[index])

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def reshape(self, *shape: Any) -> EncryptedArray:
        return EncryptedArray._trusted(self.public_key, self._raw.reshape(*shape))

    def ravel(self) -> EncryptedArray:
        return EncryptedArray._trusted(self.public_key, self._raw.ravel())

    @property
    def T(self) -> EncryptedArray:  # noqa: N802 - numpy's name
        return EncryptedArray._trusted(self.public_key, self._raw.T)

    def sum(self, axis: int | None = None) -> EncryptedNumber | EncryptedArray:
        """Encrypted sum (product of ciphertexts mod n^2) over ``axis`` (all when None)."""
        raw = self._raw.ravel() if axis is None else np.moveaxis(self._raw, axis, 0)
        n2 = self.public_key.n2
        if raw.shape[0] == 0:
            return _wrap(self.public_key, np.full(raw.shape[1:], mpz(1), dtype=object))
        while raw.shape[0] > 1:               # pairwise products: log2(N) vectorised passes
            half = raw.shape[0] // 2
            head = raw[:half] * raw[half:2 * half] % n2
            raw = np.concatenate([head, raw[2 * half:]]) if raw.shape[0] % 2 else head
        return _wrap(self.public_key, raw[0])

    def dot(self, matrix: Any) -> EncryptedNumber | EncryptedArray:
        """E(x) . W for an integer plaintext W: contracts the last axis of x with W's first.

        out[..., k] = prod_i c[..., i]^W[i, k] mod n^2 = E(sum_i x_i W_ik).
        """
        pk = self.public_key
        w = pk._scalar(np.asarray(matrix))
        if self.ndim == 0 or w.ndim == 0 or w.ndim > 2 or w.shape[0] != self.shape[-1]:
            raise CryptoError(f"cannot dot an EncryptedArray of shape {self.shape} with a "
                              f"matrix of shape {np.shape(matrix)}: need W.shape[0] == "
                              f"{self.shape[-1] if self.ndim else '?'} and W 1-D or 2-D")
        c = self._raw[..., None] if w.ndim == 2 else self._raw
        powers = _POWMOD(c, w, pk.n2)                      # (..., n, k) or (..., n)
        axis = powers.ndim - (2 if w.ndim == 2 else 1)
        return EncryptedArray._trusted(pk, powers).sum(axis=axis)

    def __matmul__(self, matrix: Any) -> EncryptedNumber | EncryptedArray:
        return self.dot(matrix)

    def __rmatmul__(self, matrix: Any) -> EncryptedNumber | EncryptedArray:
        """W @ E(x): contracts W's last axis with the first axis of x."""
        w = np.asarray(matrix)
        if w.ndim == 1:
            return self.T.dot(w) if self.ndim > 1 else self.dot(w)
        result = self.T.dot(w.T)
        return result.T if isinstance(result, EncryptedArray) else result

