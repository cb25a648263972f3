"""Paillier keys: :class:`PublicKey` (encryption, with its noise) and :class:`PrivateKey`
(CRT decryption); see :mod:`veil.crypto.paillier` for the math."""

from __future__ import annotations

import hashlib
import numbers
import threading
from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil.crypto.fastexp import FixedBase
from veil.crypto.paillier.ciphertexts import (
    EncryptedArray,
    EncryptedNumber,
    check_same_key,
    wrap,
)
from veil.errors import ConfigError, CryptoError
from veil.random import RngLike, check_rng

if TYPE_CHECKING:
    from veil.crypto.paillier.pool import NoisePool

__all__ = ["MIN_INSECURE_BITS", "MIN_SECURE_BITS", "PrivateKey", "PublicKey", "as_int_array",
           "check_key_bits", "is_int", "key_fingerprint"]

MIN_SECURE_BITS = 2048
MIN_INSECURE_BITS = 128
#: the most memory one key's fixed-base noise table may take (:meth:`PublicKey._noise_table`)
TABLE_BYTES = 100 << 20


def check_key_bits(bits: Any, insecure_ok: bool) -> int:
    """A modulus size: even, >= 2048 (>= 128 with ``insecure_ok=True`` for tests and demos)."""
    minimum = MIN_INSECURE_BITS if insecure_ok else MIN_SECURE_BITS
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or bits % 2:
        raise ConfigError(f"bits={bits!r} is not allowed: must be an even integer")
    if bits < minimum:
        hint = "" if insecure_ok else " (smaller keys only with insecure_ok=True, for tests)"
        raise ConfigError(f"bits={bits!r} is not allowed: must be >= {minimum}{hint}")
    return int(bits)


def is_int(x: Any) -> bool:
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
        if not is_int(x):
            raise CryptoError(f"{name}[{i}]={x!r} is not an integer; Paillier encrypts "
                              "integers only (encode floats with veil.crypto.encoding)")
    return np.array([int(x) for x in flat], dtype=object).reshape(arr.shape)


def key_fingerprint(*fields: int) -> bytes:
    """16 bytes of SHA-256 over length-prefixed big-endian integers: a key's identity."""
    h = hashlib.sha256(b"veil.crypto key")
    for f in fields:
        raw = int(f).to_bytes((int(f).bit_length() + 7) // 8 or 1, "big")
        h.update(len(raw).to_bytes(4, "big") + raw)
    return h.digest()[:16]


class PublicKey:
    """A Paillier public key: modulus ``n`` (g = n + 1) and optionally the noise base h_s.

    ``noise_base``: h_s = (-y^2)^n mod n^2 made by the key owner (see module docstring);
    ``short_exponents``: draw DJN's short exponents for it instead of full-length ones.
    Without ``noise_base`` the noise is the standard r^n.
    """

    def __init__(self, n: int, *, noise_base: int | None = None,
                 short_exponents: bool = False) -> None:
        n = mpz(n)
        if n < 2 ** (MIN_INSECURE_BITS - 1) or n % 2 == 0:
            raise CryptoError(f"n={int(n)} is not allowed: a Paillier modulus is an odd "
                              f"integer of at least {MIN_INSECURE_BITS} bits")
        self.n = n
        self.n2 = n * n
        self.half = (n - 1) // 2
        self.noise_base = None
        if noise_base is not None:
            h = mpz(noise_base)
            # A unit whose square is 1 (such as n^2 - 1) gives noise +-1: its ciphertexts
            # +-(1 + m n) decrypt without the key. For n = p q with safe primes the other
            # orders in Z_{n^2}^* are multiples of p' or q' or n, so no other noise base of
            # small order exists.
            if not (1 < h < self.n2 and gmpy2.gcd(h, n) == 1 and h * h % self.n2 != 1):
                raise CryptoError("noise_base is not allowed: must be a unit modulo n^2 of "
                                  "order above 2")
            self.noise_base = h
        elif short_exponents:
            raise CryptoError("short_exponents needs a noise_base")
        self.short_exponents = bool(short_exponents)
        self._fp: bytes | None = None
        self._init_caches()

    #: attributes rebuilt, not pickled (:meth:`__getstate__`)
    _CACHES: tuple[str, ...] = ("_table", "_lock", "_drawn")

    def _init_caches(self) -> None:
        """No fixed-base table yet (it is built on first use, under the lock)."""
        self._table: FixedBase | None = None
        self._lock = threading.Lock()
        self._drawn = 0         # noise values drawn with this copy: sizes the table

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
            self._fp = key_fingerprint(*self._identity())
        return self._fp

    def _identity(self) -> tuple[int, ...]:
        """Every public parameter: a key relayed with another noise base or exponent mode
        is another key (it could otherwise make ciphertexts anyone can read)."""
        return (self.n, self.noise_base or 0, int(self.short_exponents))

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
        if is_int(values):
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
        if is_int(k):
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

    def _noise_table(self, count: int) -> FixedBase:
        """The fixed-base table of the noise base, its window sized for every value this
        copy of the key has drawn, ``count`` more included: with ``N`` values in all and a
        window of ``w`` bits the table costs ``2^w`` multiplications per digit and each
        value one per digit, ``(N + 2^w) ceil(E / w)`` in all (``E``: exponent bits), so
        the best ``w`` grows like ``log2 N``; the table is rebuilt wider when the count
        calls for it (at most ~10 times, each cheaper than the values drawn since), and
        kept under :data:`TABLE_BYTES` (one encryption: w = 4, a few kB; the 100k values
        of a vertical epoch at 2048 bits: w = 11 with short exponents, 99 MB)."""
        with self._lock:
            self._drawn += count
            bits, size = self._noise_bits, (self.n2.bit_length() + 7) // 8
            fits = [w for w in range(2, 13) if -(-bits // w) << w <= TABLE_BYTES // size]
            window = min(fits, key=lambda w: (self._drawn + (1 << w)) * -(-bits // w))
            if self._table is None or window > self._table.window:
                self._table = FixedBase(self.noise_base, self.n2, bits, window)
            return self._table

    def noise(self, count: int, *, rng: RngLike = None) -> list[mpz]:
        """``count`` fresh noise values: h_s^a with the key's noise base, else r^n mod n^2."""
        rng = check_rng(rng)
        if self.noise_base is not None:
            table, bits = self._noise_table(count), self._noise_bits
            width, mask = (bits + 7) // 8, (1 << bits) - 1
            raw = rng.bytes(width * count)      # one draw: uniform exponents below 2^bits
            return [table.pow(int.from_bytes(raw[i:i + width], "little") & mask)
                    for i in range(0, width * count, width)]
        rs = [mpz(rng.randbelow(self.n - 1) + 1) for _ in range(count)]
        return gmpy2.powmod_base_list(rs, self.n, self.n2)

    def _draw_noise(self, count: int, pool: NoisePool | None, rng: RngLike) -> list[mpz]:
        if pool is None:
            return self.noise(count, rng=rng)
        if pool.public_key != self:
            raise CryptoError("pool is for a different public key "
                              f"({pool.public_key.fingerprint.hex()} != {self.fingerprint.hex()})")
        return pool.take(count)

    # -- encryption ----------------------------------------------------------------
    def encrypt(self, values: Any, *, pool: NoisePool | None = None,
                rng: RngLike = None) -> EncryptedNumber | EncryptedArray:
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
        return wrap(self, out.reshape(m.shape))

    def _check_ciphertext(self, c: Any, where: str) -> mpz:
        if not is_int(c):
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
        check_same_key(self.public_key, c.public_key)
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

    def noise(self, count: int, *, rng: RngLike = None) -> list[mpz]:
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
