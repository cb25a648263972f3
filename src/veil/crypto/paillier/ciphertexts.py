"""Paillier ciphertexts: :class:`EncryptedNumber` and :class:`EncryptedArray`.

Homomorphism (mod n^2, plaintexts mod n): E(a) E(b) = E(a + b), E(a)^k = E(k a),
E(a) (1 + b n) = E(a + b), E(a)^(-1) = E(-a). ``EncryptedArray`` follows numpy's
broadcasting and shape rules. A ciphertext built from outside integers is validated by its
key (0 < c < n^2, gcd(c, n) = 1); ciphertexts combined by an operation must be under the
same key (:class:`~veil.errors.CryptoError` otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from veil.errors import CryptoError
from veil.random import RngLike

if TYPE_CHECKING:
    from veil.crypto.paillier.keys import PublicKey
    from veil.crypto.paillier.pool import NoisePool

__all__ = ["EncryptedArray", "EncryptedNumber", "POWMOD", "check_same_key", "wrap"]

#: gmpy2.powmod over numpy object arrays (broadcast)
POWMOD = np.frompyfunc(gmpy2.powmod, 3, 1)
INVERT = np.frompyfunc(gmpy2.invert, 2, 1)


def check_same_key(a: PublicKey, b: PublicKey) -> None:
    if a is not b and a != b:
        raise CryptoError("the ciphertexts are under different public keys "
                          f"({a.fingerprint.hex()} and {b.fingerprint.hex()})")


def wrap(pk: PublicKey, raw: Any) -> EncryptedNumber | EncryptedArray:
    if isinstance(raw, np.ndarray):
        if raw.ndim == 0:
            return EncryptedNumber._trusted(pk, raw.item())
        return EncryptedArray._trusted(pk, raw)
    return EncryptedNumber._trusted(pk, raw)


def _power(raw: Any, k: Any, n2: mpz) -> Any:
    if isinstance(raw, np.ndarray) or isinstance(k, np.ndarray):
        return POWMOD(raw, k, n2)
    return gmpy2.powmod(raw, k, n2)


class _Encrypted:
    """Arithmetic shared by EncryptedNumber and EncryptedArray (numpy broadcasting rules)."""

    __slots__ = ("public_key", "_raw")
    __array_ufunc__ = None      # make numpy defer to our reflected operators

    def __add__(self, other: Any) -> EncryptedNumber | EncryptedArray:
        pk = self.public_key
        if isinstance(other, _Encrypted):
            check_same_key(pk, other.public_key)
            return wrap(pk, self._raw * other._raw % pk.n2)
        m = pk._plaintext(other, "addend")
        return wrap(pk, self._raw * (m * pk.n + 1) % pk.n2)

    __radd__ = __add__

    def __neg__(self) -> EncryptedNumber | EncryptedArray:
        pk = self.public_key
        inv = INVERT(self._raw, pk.n2) if isinstance(self._raw, np.ndarray) else \
            gmpy2.invert(self._raw, pk.n2)
        return wrap(pk, inv)

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
        return wrap(pk, _power(self._raw, pk._scalar(other), pk.n2))

    __rmul__ = __mul__

    def rerandomize(self, *, pool: NoisePool | None = None,
                    rng: RngLike = None) -> EncryptedNumber | EncryptedArray:
        """The same plaintext under fresh noise (unlinkable to this ciphertext)."""
        pk = self.public_key
        size = self._raw.size if isinstance(self._raw, np.ndarray) else 1
        noise = pk._draw_noise(size, pool, rng)
        if isinstance(self._raw, np.ndarray):
            r = np.empty(size, dtype=object)
            r[:] = noise
            return wrap(pk, self._raw * r.reshape(self._raw.shape) % pk.n2)
        return wrap(pk, self._raw * noise[0] % pk.n2)


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
        return wrap(self.public_key, self._raw[index])

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
            return wrap(self.public_key, np.full(raw.shape[1:], mpz(1), dtype=object))
        while raw.shape[0] > 1:               # pairwise products: log2(N) vectorised passes
            half = raw.shape[0] // 2
            head = raw[:half] * raw[half:2 * half] % n2
            raw = np.concatenate([head, raw[2 * half:]]) if raw.shape[0] % 2 else head
        return wrap(self.public_key, raw[0])

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
        powers = POWMOD(c, w, pk.n2)                      # (..., n, k) or (..., n)
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
