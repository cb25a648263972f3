"""One small interface over homomorphic encryption schemes, and its two implementations.

A :class:`Backend` encrypts vectors of reals and computes on them slot-wise:

=================  ==========================================  ===============================
operation          Paillier (:class:`PaillierBackend`)         CKKS (:class:`CKKSBackend`)
=================  ==========================================  ===============================
encode             fixed point round(x 2^f) (exact)            scale 2^s, error ~2^-s per op
add                exact (ciphertext product mod n^2)          approximate, no level
multiply_plain     exact (exponentiation); adds f bits         one level
multiply           CryptoError: additive only                  ciphertexts, one level
rotate / sum       permutes / multiplies independent           Galois rotations, log2 steps
                   ciphertexts (one per value)                 (all values in one ciphertext)
to_bytes           veil.crypto.serialization                   SEAL's format in veil framing
security_bits      128 for n >= 3072 bits (NIST SP 800-57      128 within the HE standard
                   Part 1 Rev. 5, Table 2)                     (:mod:`veil.he.ckks`)
=================  ==========================================  ===============================

Keys weaker than 128 bits are refused (:class:`~veil.errors.ConfigError` naming the
parameter) unless ``insecure_ok=True``, which tests use for speed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil._validation import check_array
from veil.crypto import paillier, serialization
from veil.crypto.encoding import FixedPoint
from veil.errors import ConfigError, CryptoError

__all__ = ["Backend", "PaillierBackend", "CKKSBackend", "PaillierVector",
           "PAILLIER_SECURITY_BITS"]

#: Paillier / RSA modulus size -> classical security bits (NIST SP 800-57 Part 1, Table 2).
PAILLIER_SECURITY_BITS = {2048: 112, 3072: 128, 7680: 192, 15360: 256}


class Backend(ABC):
    """Encrypt, compute slot-wise, decrypt, serialize. ``decrypt`` needs the secret key."""

    scheme: str
    security_bits: int

    @abstractmethod
    def encrypt(self, values: Any) -> Any:
        """A ciphertext of a 1-d vector of reals."""

    @abstractmethod
    def decrypt(self, ct: Any) -> np.ndarray:
        """The vector of reals (secret key needed)."""

    @abstractmethod
    def add(self, a: Any, b: Any) -> Any:
        """a + b slot-wise (b a ciphertext or a plaintext vector)."""

    @abstractmethod
    def multiply_plain(self, a: Any, b: Any) -> Any:
        """a * b slot-wise for a plaintext vector or scalar b."""

    @abstractmethod
    def multiply(self, a: Any, b: Any) -> Any:
        """a * b slot-wise for two ciphertexts (CryptoError where the scheme cannot)."""

    @abstractmethod
    def rotate(self, a: Any, steps: int) -> Any:
        """Slot i of the result holds slot (i + steps) mod size of a."""

    @abstractmethod
    def sum(self, a: Any) -> Any:
        """A ciphertext whose slot 0 holds the sum of the slots of a."""

    @abstractmethod
    def to_bytes(self, ct: Any) -> bytes:
        """A ciphertext as bytes."""

    @abstractmethod
    def from_bytes(self, data: bytes) -> Any:
        """A ciphertext from :meth:`to_bytes`; another key's or malformed bytes: CryptoError."""


@dataclass(frozen=True)
class PaillierVector:
    """Paillier ciphertexts of fixed-point values: the integers carry ``factors`` times the
    fractional bits and are sums of at most ``summands`` such products (for overflow checks)."""

    ct: paillier.EncryptedArray
    factors: int = 1
    summands: int = 1


class PaillierBackend(Backend):
    """Paillier (:mod:`veil.crypto.paillier`) on fixed-point reals (:mod:`veil.crypto.encoding`).

    Exact: decryption returns the fixed-point result of the integer computation, and an
    overflow of the plaintext space is detected by :meth:`FixedPoint.decode`, never returned.
    """

    scheme = "paillier"

    def __init__(self, public_key: paillier.PublicKey, private_key: paillier.PrivateKey | None
                 = None, *, encoding: FixedPoint | None = None, insecure_ok: bool = False) -> None:
        if not isinstance(public_key, paillier.PublicKey):
            raise ConfigError("public_key is not allowed: expected a veil.crypto.paillier key")
        self.security_bits = max((s for b, s in PAILLIER_SECURITY_BITS.items()
                                  if public_key.bits >= b), default=0)
        if self.security_bits < 128 and not insecure_ok:
            raise ConfigError(f"bits={public_key.bits} is not allowed: a Paillier modulus needs "
                              ">= 3072 bits for 128-bit security (NIST SP 800-57); smaller "
                              "keys only with insecure_ok=True, for tests")
        if private_key is not None and private_key.public_key != public_key:
            raise CryptoError("private_key does not belong to public_key")
        self.public_key, self.private_key = public_key, private_key
        self.encoding = encoding or FixedPoint()

    @classmethod
    def keygen(cls, bits: int = 3072, *, encoding: FixedPoint | None = None,
               insecure_ok: bool = False, rng: Any = None) -> PaillierBackend:
        if bits < 3072 and not insecure_ok:
            raise ConfigError(f"bits={bits} is not allowed: a Paillier modulus needs >= 3072 "
                              "bits for 128-bit security (NIST SP 800-57); smaller keys only "
                              "with insecure_ok=True, for tests")
        pk, sk = paillier.keygen(bits, insecure_ok=insecure_ok, rng=rng)
        return cls(pk, sk, encoding=encoding, insecure_ok=insecure_ok)

    def public(self) -> PaillierBackend:
        """The same backend without the private key."""
        return PaillierBackend(self.public_key, encoding=self.encoding, insecure_ok=True)

    def encrypt(self, values: Any, *, rng: Any = None) -> PaillierVector:
        v = check_array(values, "values", ndim=1)
        return PaillierVector(self.public_key.encrypt(self.encoding.encode(v), rng=rng))

    def decrypt(self, ct: PaillierVector) -> np.ndarray:
        if self.private_key is None:
            raise CryptoError("decrypt needs the private key; this backend is public")
        self._check(ct, "ct")
        return np.atleast_1d(self.encoding.decode(self.private_key.decrypt(ct.ct),
                                                  summands=ct.summands, factors=ct.factors))

    def _check(self, ct: Any, name: str) -> None:
        if not isinstance(ct, PaillierVector):
            raise CryptoError(f"{name} is a {type(ct).__name__}, not a PaillierVector")
        if ct.ct.public_key != self.public_key:
            raise CryptoError(f"{name} was encrypted under another key "
                              f"({ct.ct.public_key.fingerprint.hex()[:8]} != "
                              f"{self.public_key.fingerprint.hex()[:8]})")

    def add(self, a: PaillierVector, b: Any) -> PaillierVector:
        self._check(a, "a")
        if isinstance(b, PaillierVector):
            self._check(b, "b")
            if a.factors != b.factors:
                raise CryptoError(f"cannot add values with {a.factors} and {b.factors} "
                                  "fixed-point factors")
            return PaillierVector(a.ct + b.ct, a.factors, a.summands + b.summands)
        plain = self.encoding.encode(b).astype(object) << (self.encoding.frac_bits *
                                                           (a.factors - 1))
        return PaillierVector(a.ct + plain, a.factors, a.summands + 1)

    def multiply_plain(self, a: PaillierVector, b: Any) -> PaillierVector:
        self._check(a, "a")
        return PaillierVector(a.ct * self.encoding.encode(b), a.factors + 1, a.summands)

    def multiply(self, a: Any, b: Any) -> Any:
        raise CryptoError("Paillier is additively homomorphic: it cannot multiply two "
                          "ciphertexts (use multiply_plain, or the CKKS backend)")

    def rotate(self, a: PaillierVector, steps: int) -> PaillierVector:
        self._check(a, "a")
        raw = np.roll(a.ct.ciphertexts, -int(steps))
        return PaillierVector(paillier.EncryptedArray._trusted(self.public_key, raw),
                              a.factors, a.summands)

    def sum(self, a: PaillierVector) -> PaillierVector:
        self._check(a, "a")
        total = a.ct.sum()
        raw = np.empty(1, dtype=object)
        raw[0] = total.ciphertext
        return PaillierVector(paillier.EncryptedArray._trusted(self.public_key, raw),
                              a.factors, a.summands * a.ct.size)

    def to_bytes(self, ct: PaillierVector) -> bytes:
        self._check(ct, "ct")
        return bytes([ct.factors]) + ct.summands.to_bytes(8, "big") + serialization.dumps(ct.ct)

    def from_bytes(self, data: bytes) -> PaillierVector:
        if not isinstance(data, (bytes, bytearray)) or len(data) < 10 or data[0] < 1:
            raise CryptoError("not a veil Paillier vector blob")
        arr = serialization.loads(bytes(data[9:]), public_key=self.public_key)
        if not isinstance(arr, paillier.EncryptedArray) or arr.ndim != 1:
            raise CryptoError("not a veil Paillier vector blob")
        return PaillierVector(arr, data[0], int.from_bytes(data[1:9], "big"))


class CKKSBackend(Backend):
    """CKKS (:class:`veil.he.ckks.CKKSContext`) behind the :class:`Backend` interface."""

    scheme = "ckks"

    def __init__(self, context: Any) -> None:
        from veil.he.ckks import CKKSContext
        if not isinstance(context, CKKSContext):
            raise ConfigError("context is not allowed: expected a veil.he.ckks.CKKSContext")
        self.context = context
        self.security_bits = context.security_bits

    @classmethod
    def keygen(cls, *args: Any, **kwargs: Any) -> CKKSBackend:
        """:meth:`CKKSContext.keygen` with the same arguments."""
        from veil.he.ckks import CKKSContext
        return cls(CKKSContext.keygen(*args, **kwargs))

    def public(self) -> CKKSBackend:
        return CKKSBackend(self.context.public())

    def encrypt(self, values: Any) -> Any:
        return self.context.encrypt(values)

    def decrypt(self, ct: Any) -> np.ndarray:
        return self.context.decrypt(ct)

    def add(self, a: Any, b: Any) -> Any:
        return self.context.add(a, b)

    def multiply_plain(self, a: Any, b: Any) -> Any:
        from veil.he.ckks import Ciphertext
        if isinstance(b, Ciphertext):
            raise CryptoError("multiply_plain takes a plaintext; use multiply for ciphertexts")
        return self.context.multiply(a, b)

    def multiply(self, a: Any, b: Any) -> Any:
        return self.context.multiply(a, b)

    def rotate(self, a: Any, steps: int) -> Any:
        return self.context.rotate(a, steps)

    def sum(self, a: Any) -> Any:
        return self.context.sum_blocks(a, 1, self.context.slots)

    def to_bytes(self, ct: Any) -> bytes:
        self.context._check(ct, "ct")
        return ct.to_bytes()

    def from_bytes(self, data: bytes) -> Any:
        return self.context.ciphertext_from_bytes(data)
