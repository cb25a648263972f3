"""CKKS (Cheon, Kim, Kim & Song, "Homomorphic encryption for arithmetic of approximate
numbers", ASIACRYPT 2017) over Microsoft SEAL 4, through the ``sealapi`` bindings that ship
with TenSEAL (extra ``fhe``: ``pip install veil[fhe]``).

The scheme
----------
A plaintext is a vector of ``slots = N / 2`` reals, encoded at scale Delta = 2^scale_bits
into a polynomial of Z[X]/(X^N + 1); a ciphertext lives modulo Q_l = q_0 q_1 ... q_l, the
product of the first l + 1 primes of the coefficient-modulus chain (the last, "special"
prime is only used for key switching). Homomorphic operations act slot-wise:

* ``a + b``, ``a - b``: no level is used;
* ``a * b`` (ciphertexts or a plaintext vector/scalar): relinearized (ciphertexts) and
  rescaled by the next prime q_l, which drops one level. Scales are tracked exactly, never
  reset: a plaintext factor is encoded at scale q_l, so that s q_l / q_l = s keeps the
  ciphertext's scale; two ciphertexts give s_a s_b / q_l, which stays within
  ``max_prime_drift`` = max |q_i / Delta - 1| of Delta per level (about 1e-6 here) and is
  used as such at decryption (forcing it back to Delta would add that drift as an error);
* ``rotate(a, k)``: slot i of the result holds slot (i + k) mod slots of ``a`` (Galois
  automorphism with a key-switching key for step k; no level is used).

Depth: a context with coefficient moduli [q_0, q_1, ..., q_L, special] allows L levels of
multiplication. A fresh ciphertext is at level L; multiplying a level-0 ciphertext raises
:class:`~veil.errors.CryptoError` naming the level (it would otherwise decrypt to garbage).
Operands at different levels are brought to the lower level by modulus switching first.

Encodable range: decryption at level 0 is correct while |value| Delta < q_0 / 2, so every
value encrypted or computed must stay below ``max_abs = 2^(bits(q_0) - scale_bits - 2)``
(one bit of margin). :meth:`CKKSContext.encrypt` refuses larger inputs; a computation's own
bound is its caller's to plan (see :mod:`veil.he.linear`).

Security (HE standard: Albrecht et al., "Homomorphic encryption security standard",
HomomorphicEncryption.org, 2018, Table 1, ternary secrets, classical 128-bit): the total
coefficient-modulus size log2(Q P) may be at most 27, 54, 109, 218, 438, 881 bits for
N = 1024 ... 32768 (SEAL's ``CoeffModulus.MaxBitCount(N, tc128)``). A larger modulus (or a
smaller N) raises :class:`~veil.errors.ConfigError` naming the parameter, unless
``insecure_ok=True`` (tests only; the context then reports ``security_bits = 0``).

Randomness: SEAL's samplers (secret key, encryption noise) are driven by a Blake2xb PRNG
seeded with 512 bits from :mod:`veil.random` (the OS CSPRNG unless a test passes a seed).

Serialization: SEAL's own binary format (validated against the context by SEAL on load)
inside veil's framing (:mod:`veil.crypto.serialization`: magic, version, lengths, checksum),
with the 16-byte fingerprint of the public key, so that a ciphertext loads only into the
context of its key.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._codec import Format
from veil._optional import require
from veil._validation import check_array, check_int
from veil.errors import ConfigError, CryptoError
from veil.random import check_rng

__all__ = ["CKKSContext", "Ciphertext", "HE_STANDARD_MAX_BITS", "SECURE_PRESETS"]

#: Largest log2(Q P) for 128-bit classical security with ternary secrets (HE standard, Table 1).
HE_STANDARD_MAX_BITS = {1024: 27, 2048: 54, 4096: 109, 8192: 218, 16384: 438, 32768: 881}

#: Parameter sets within the standard: (N, coefficient-modulus bit sizes, scale bits).
SECURE_PRESETS = {
    "depth2": (8192, (60, 40, 40, 60), 40),            # 200 <= 218 bits
    "depth7": (16384, (60,) + (40,) * 7 + (60,), 40),  # 400 <= 438 bits
    "depth18": (32768, (60,) + (40,) * 18 + (60,), 40),  # 840 <= 881 bits
}

#: the framing of every veil.he blob and file (contexts, ciphertexts, encrypted data sets and
#: models); its type tags are registered where each kind is written
FORMAT = Format(b"VHEN", 1, error=CryptoError, checksum=True, name="HE blob")
_TAG_CONTEXT = FORMAT.tag(1, "CKKS context")
_TAG_CIPHERTEXT = FORMAT.tag(2, "CKKS ciphertext")


def _seal() -> Any:
    return require("tenseal.sealapi", "fhe", "CKKS")


def _save(obj: Any) -> bytes:
    """SEAL objects save to files only: through a private temporary file."""
    with tempfile.TemporaryDirectory(prefix="veil-he-") as tmp:
        path = os.path.join(tmp, "obj")
        obj.save(path)
        with open(path, "rb") as fh:
            return fh.read()


def _load(obj: Any, context: Any, data: bytes, what: str) -> Any:
    with tempfile.TemporaryDirectory(prefix="veil-he-") as tmp:
        path = os.path.join(tmp, "obj")
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            if context is None:
                obj.load(path)
            else:
                obj.load(context, path)
        except (ValueError, RuntimeError) as exc:
            raise CryptoError(f"malformed {what}: SEAL refused it ({exc})") from None
    return obj


class CKKSContext:
    """CKKS parameters and keys. The key owner's context holds the secret key; the
    :meth:`public` copy (for the server) holds the public, relinearization and rotation keys.

    Build one with :meth:`keygen`.
    """

    scheme = "ckks"

    def __init__(self, *, _parms: Any, _seal_ctx: Any, coeff_mod_bit_sizes: tuple[int, ...],
                 scale_bits: int, insecure: bool, public_key: Any, relin_keys: Any,
                 galois_keys: Any, rotations: tuple[int, ...], secret_key: Any = None) -> None:
        s = _seal()
        self._parms, self._ctx = _parms, _seal_ctx
        self.poly_modulus_degree = int(_parms.poly_modulus_degree())
        self.coeff_mod_bit_sizes = coeff_mod_bit_sizes
        self.scale_bits = scale_bits
        self.scale = 2.0 ** scale_bits
        self.insecure = insecure
        self.rotations = rotations
        self._pk, self._rk, self._gk, self._sk = public_key, relin_keys, galois_keys, secret_key
        self._encoder = s.CKKSEncoder(_seal_ctx)
        self._evaluator = s.Evaluator(_seal_ctx)
        self._encryptor = s.Encryptor(_seal_ctx, public_key)
        self._decryptor = None if secret_key is None else s.Decryptor(_seal_ctx, secret_key)
        self.fingerprint = hashlib.sha256(b"veil.he ckks" + _save(public_key)).digest()[:16]
        primes = [q.value() for q in _seal_ctx.first_context_data().parms().coeff_modulus()]
        self.max_prime_drift = max(abs(q / self.scale - 1.0) for q in primes[1:]) \
            if len(primes) > 1 else 0.0
        self.max_abs = 2.0 ** (coeff_mod_bit_sizes[0] - scale_bits - 2)

    # -- construction ------------------------------------------------------------
    @classmethod
    def keygen(cls, poly_modulus_degree: int = 8192,
               coeff_mod_bit_sizes: Sequence[int] = (60, 40, 40, 60), scale_bits: int = 40, *,
               rotations: Sequence[int] = (), insecure_ok: bool = False,
               rng: Any = None) -> CKKSContext:
        """A key pair with relinearization keys and rotation keys for every power of two
        below ``slots`` plus the extra ``rotations`` steps.

        ``coeff_mod_bit_sizes``: [q_0, q_1..q_L, special]; L = len - 2 levels of
        multiplication. 128-bit security per the HE standard is enforced unless
        ``insecure_ok=True``.
        """
        s = _seal()
        n = check_int(poly_modulus_degree, "poly_modulus_degree", low=1024, high=32768)
        if n & (n - 1):
            raise ConfigError(f"poly_modulus_degree={n} is not allowed: must be a power of two "
                              "in [1024, 32768]")
        bits = tuple(check_int(b, "coeff_mod_bit_sizes[i]", low=20, high=60)
                     for b in coeff_mod_bit_sizes)
        if len(bits) < 3:
            raise ConfigError(f"coeff_mod_bit_sizes={list(bits)} is not allowed: need at least "
                              "[q_0, q_1, special] (one level of multiplication)")
        scale_bits = check_int(scale_bits, "scale_bits", low=20, high=59)
        if scale_bits >= bits[0]:
            raise ConfigError(f"scale_bits={scale_bits} is not allowed: must be below the "
                              f"first modulus' {bits[0]} bits (no room for the integer part)")
        limit = HE_STANDARD_MAX_BITS[n]
        if sum(bits) > limit and not insecure_ok:
            raise ConfigError(
                f"coeff_mod_bit_sizes={list(bits)} is not allowed with poly_modulus_degree={n}:"
                f" log2(QP) = {sum(bits)} exceeds {limit} bits, the HE standard's bound for "
                "128-bit security (use a larger poly_modulus_degree or fewer levels; "
                "insecure_ok=True only for tests)")
        rng = check_rng(rng)
        parms = s.EncryptionParameters(s.SCHEME_TYPE.CKKS)
        parms.set_poly_modulus_degree(n)
        try:
            parms.set_coeff_modulus(s.CoeffModulus.Create(n, list(bits)))
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"coeff_mod_bit_sizes={list(bits)} is not allowed with "
                              f"poly_modulus_degree={n}: {exc}") from None
        seed = [int(x) for x in rng.integers(0, 2 ** 63, size=8)]
        parms.set_random_generator(s.Blake2xbPRNGFactory(seed))
        level = s.SEC_LEVEL_TYPE.NONE if sum(bits) > limit else s.SEC_LEVEL_TYPE.TC128
        ctx = s.SEALContext(parms, True, level)
        keygen = s.KeyGenerator(ctx)
        pk, rk, gk = s.PublicKey(), s.RelinKeys(), s.GaloisKeys()
        keygen.create_public_key(pk)
        keygen.create_relin_keys(rk)
        slots = n // 2
        steps = sorted({1 << k for k in range(slots.bit_length() - 1)}
                       | {int(r) % slots for r in rotations} - {0})
        # Galois elements 3^k mod 2N (SEAL's rotation by k slots); given as elements, not
        # steps, because the bindings' overloads cannot tell a list of steps from one of elements
        keygen.create_galois_keys([pow(3, st, 2 * n) for st in steps], gk)
        return cls(_parms=parms, _seal_ctx=ctx, coeff_mod_bit_sizes=bits, scale_bits=scale_bits,
                   insecure=sum(bits) > limit, public_key=pk, relin_keys=rk, galois_keys=gk,
                   rotations=tuple(steps), secret_key=keygen.secret_key())

    @classmethod
    def preset(cls, name: str, *, rotations: Sequence[int] = (), rng: Any = None) -> CKKSContext:
        """A 128-bit-secure parameter set from :data:`SECURE_PRESETS` by name."""
        if name not in SECURE_PRESETS:
            raise ConfigError(f"preset={name!r} is not allowed: choose one of "
                              f"{', '.join(map(repr, SECURE_PRESETS))}")
        n, bits, scale = SECURE_PRESETS[name]
        return cls.keygen(n, bits, scale, rotations=rotations, rng=rng)

    # -- facts -------------------------------------------------------------------
    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2

    @property
    def depth(self) -> int:
        """Levels of multiplication a fresh ciphertext allows."""
        return len(self.coeff_mod_bit_sizes) - 2

    @property
    def security_bits(self) -> int:
        """128 for parameters within the HE standard's bound, 0 for ``insecure_ok`` ones."""
        return 0 if self.insecure else 128

    @property
    def has_secret_key(self) -> bool:
        return self._sk is not None

    def __repr__(self) -> str:
        return (f"CKKSContext(N={self.poly_modulus_degree}, moduli={list(self.coeff_mod_bit_sizes)}"
                f", scale=2^{self.scale_bits}, depth={self.depth}, security={self.security_bits} "
                f"bits, {'secret' if self.has_secret_key else 'public'}, "
                f"key={self.fingerprint.hex()[:8]})")

    def public(self) -> CKKSContext:
        """The same context without the secret key (what the server receives)."""
        obj = object.__new__(CKKSContext)
        obj.__dict__.update(self.__dict__)
        obj._sk = obj._decryptor = None
        return obj

    def _require_secret(self, what: str) -> None:
        if self._sk is None:
            raise CryptoError(f"{what} needs the secret key; this context is public "
                              f"(key {self.fingerprint.hex()[:8]})")

    # -- encryption --------------------------------------------------------------
    def _vector(self, values: Any, name: str) -> np.ndarray:
        v = check_array(values, name, ndim=1)
        if v.size > self.slots:
            raise CryptoError(f"{name} has {v.size} values; a ciphertext holds {self.slots} "
                              f"slots (poly_modulus_degree={self.poly_modulus_degree})")
        big = np.flatnonzero(np.abs(v) > self.max_abs)
        if big.size:
            i = int(big[0])
            raise CryptoError(f"{name}[{i}]={v[i]!r} is outside the encodable range "
                              f"+-{self.max_abs:g} of {self!r} (2^(bits(q_0) - scale_bits - 2))")
        return v

    def _encode(self, values: Any, parms_id: Any = None, scale: float | None = None) -> Any:
        pt = _seal().Plaintext()
        vec = np.zeros(self.slots)
        vec[:len(values)] = values
        scale = self.scale if scale is None else scale
        if parms_id is None:
            self._encoder.encode(vec.tolist(), scale, pt)
        else:
            self._encoder.encode(vec.tolist(), parms_id, scale, pt)
        return pt

    def encrypt(self, values: Any) -> Ciphertext:
        """A fresh ciphertext of ``values`` (<= ``slots`` reals; the rest of the slots 0)."""
        v = self._vector(values, "values")
        ct = _seal().Ciphertext()
        self._encryptor.encrypt(self._encode(v), ct)
        return Ciphertext(self, ct)

    def decrypt(self, ct: Ciphertext, count: int | None = None) -> np.ndarray:
        """The first ``count`` slots (all when None) of a ciphertext of this key."""
        self._require_secret("decrypt")
        self._check(ct, "ct")
        pt = _seal().Plaintext()
        self._decryptor.decrypt(ct._ct, pt)
        out = np.asarray(self._encoder.decode_double(pt))
        return out if count is None else out[:count]

    def _check(self, ct: Any, name: str) -> None:
        if not isinstance(ct, Ciphertext):
            raise CryptoError(f"{name} is a {type(ct).__name__}, not a CKKS Ciphertext")
        if ct.context.fingerprint != self.fingerprint:
            raise CryptoError(f"{name} was encrypted under another key or context (key "
                              f"{ct.context.fingerprint.hex()[:8]} != "
                              f"{self.fingerprint.hex()[:8]})")

    # -- evaluation --------------------------------------------------------------
    def level(self, ct: Ciphertext) -> int:
        """Levels of multiplication left in ``ct`` (0: none)."""
        return int(self._ctx.get_context_data(ct._ct.parms_id()).chain_index())

    def _aligned(self, a: Ciphertext, b: Ciphertext) -> tuple[Any, Any]:
        self._check(a, "a")
        self._check(b, "b")
        la, lb = self.level(a), self.level(b)
        x, y = a._ct, b._ct
        if la != lb:
            low = _seal().Ciphertext()
            src, target = (x, y) if la > lb else (y, x)
            self._evaluator.mod_switch_to(src, target.parms_id(), low)
            x, y = (low, y) if la > lb else (x, low)
        return x, y

    def add(self, a: Ciphertext, b: Ciphertext | Any) -> Ciphertext:
        """a + b for a ciphertext or a plaintext vector/scalar b."""
        out = _seal().Ciphertext()
        if isinstance(b, Ciphertext):
            x, y = self._aligned(a, b)
            if not math.isclose(x.scale, y.scale, rel_tol=1e-9):
                raise CryptoError(f"cannot add ciphertexts at scales {x.scale:.6g} and "
                                  f"{y.scale:.6g}: they went through different primes")
            self._evaluator.add(x, y, out)
        else:
            self._check(a, "a")
            self._evaluator.add_plain(a._ct, self._plain(b, a, a._ct.scale), out)
        return Ciphertext(self, out)

    def negate(self, a: Ciphertext) -> Ciphertext:
        self._check(a, "a")
        out = _seal().Ciphertext()
        self._evaluator.negate(a._ct, out)
        return Ciphertext(self, out)

    def _plain(self, b: Any, like: Ciphertext, scale: float | None = None) -> Any:
        vec = np.full(self.slots, float(b)) if np.ndim(b) == 0 else np.asarray(b, dtype=float)
        if vec.size > self.slots:
            raise CryptoError(f"a plaintext of {vec.size} values does not fit {self.slots} slots")
        if not np.all(np.isfinite(vec)):
            raise CryptoError("a plaintext operand holds NaN or infinite values")
        return self._encode(vec, like._ct.parms_id(), scale)

    def _spend_level(self, ct: Any, what: str) -> None:
        level = int(self._ctx.get_context_data(ct.parms_id()).chain_index())
        if level == 0:
            raise CryptoError(f"depth exhausted: {what} needs a multiplicative level and the "
                              f"ciphertext is at level 0 of {self.depth} (plan fewer "
                              "multiplications, a larger modulus chain, or an owner refresh)")

    def multiply(self, a: Ciphertext, b: Ciphertext | Any) -> Ciphertext:
        """a * b slot-wise (ciphertext or plaintext b): relinearized, rescaled, one level."""
        s = _seal()
        out = s.Ciphertext()
        if isinstance(b, Ciphertext):
            x, y = self._aligned(a, b)
            self._spend_level(x, "multiply")
            self._evaluator.multiply(x, y, out)
            self._evaluator.relinearize_inplace(out, self._rk)
        else:
            self._check(a, "a")
            self._spend_level(a._ct, "multiply by a plaintext")
            prime = self._ctx.get_context_data(a._ct.parms_id()).parms().coeff_modulus()[-1]
            self._evaluator.multiply_plain(a._ct, self._plain(b, a, float(prime.value())), out)
        self._evaluator.rescale_to_next_inplace(out)
        return Ciphertext(self, out)

    def rotate(self, a: Ciphertext, steps: int) -> Ciphertext:
        """Slot i of the result holds slot (i + steps) mod slots of ``a``."""
        self._check(a, "a")
        k = int(steps) % self.slots
        if k == 0:
            return a
        if k not in self.rotations:
            raise CryptoError(f"steps={steps} is not allowed: this context has rotation keys "
                              "for powers of two and the steps given to keygen(rotations=...)")
        out = _seal().Ciphertext()
        self._evaluator.rotate_vector(a._ct, k if k <= self.slots // 2 else k - self.slots,
                                      self._gk, out)
        return Ciphertext(self, out)

    def sum_blocks(self, a: Ciphertext, stride: int, count: int) -> Ciphertext:
        """sum_{t < count} rotate(a, t * stride) by log2(count) rotations (count a power of 2).

        With data periodic in ``stride * count`` slots this is an all-reduce: every slot i
        then holds the sum of the ``count`` slots i + t * stride.
        """
        if count & (count - 1) or count < 1:
            raise ConfigError(f"count={count} is not allowed: must be a power of two")
        shift = stride
        while shift < stride * count:
            a = self.add(a, self.rotate(a, shift))
            shift *= 2
        return a

    # -- bytes -------------------------------------------------------------------
    def to_bytes(self, *, secret: bool = False) -> bytes:
        """Parameters and keys (the secret key only with ``secret=True``)."""
        if secret:
            self._require_secret("to_bytes(secret=True)")
        meta = bytes([self.scale_bits, int(self.insecure)]) + bytes(self.coeff_mod_bit_sizes)
        rot = b"".join(int(r).to_bytes(4, "big") for r in self.rotations)
        fields = [meta, rot, _save(self._parms), _save(self._pk), _save(self._rk),
                  _save(self._gk), _save(self._sk) if secret else b""]
        return FORMAT.frame(_TAG_CONTEXT, fields)

    @classmethod
    def from_bytes(cls, data: bytes) -> CKKSContext:
        """A context from :meth:`to_bytes`; parameters are checked against the HE standard
        again (a stored insecure context loads only as insecure)."""
        s = _seal()
        tag, f = FORMAT.unframe(data)
        if tag != _TAG_CONTEXT or len(f) != 7 or len(f[0]) < 5 or len(f[1]) % 4:
            raise CryptoError("not a veil CKKS context blob")
        scale_bits, insecure, bits = f[0][0], bool(f[0][1]), tuple(f[0][2:])
        parms = _load(s.EncryptionParameters(s.SCHEME_TYPE.CKKS), None, f[2], "parameters")
        n = int(parms.poly_modulus_degree())
        got = tuple(int(q.bit_count()) for q in parms.coeff_modulus())
        if n not in HE_STANDARD_MAX_BITS or got != bits or scale_bits >= bits[0]:
            raise CryptoError("malformed CKKS context: parameters disagree with their header")
        if sum(bits) > HE_STANDARD_MAX_BITS[n] and not insecure:
            raise CryptoError("CKKS context claims 128-bit security with log2(QP) = "
                              f"{sum(bits)} > {HE_STANDARD_MAX_BITS[n]} at N={n}")
        parms.set_random_generator(s.Blake2xbPRNGFactory(
            [int(x) for x in check_rng(None).integers(0, 2 ** 63, size=8)]))
        level = s.SEC_LEVEL_TYPE.NONE if insecure else s.SEC_LEVEL_TYPE.TC128
        ctx = s.SEALContext(parms, True, level)
        if not ctx.parameters_set():
            raise CryptoError("malformed CKKS context: SEAL rejects its parameters")
        keys = [_load(k, ctx, b, w) for k, b, w in (
            (s.PublicKey(), f[3], "public key"), (s.RelinKeys(), f[4], "relinearization keys"),
            (s.GaloisKeys(), f[5], "rotation keys"))]
        sk = _load(s.SecretKey(), ctx, f[6], "secret key") if f[6] else None
        rot = tuple(int.from_bytes(f[1][i:i + 4], "big") for i in range(0, len(f[1]), 4))
        return cls(_parms=parms, _seal_ctx=ctx, coeff_mod_bit_sizes=bits,
                   scale_bits=scale_bits, insecure=insecure, public_key=keys[0],
                   relin_keys=keys[1], galois_keys=keys[2], rotations=rot, secret_key=sk)

    def ciphertext_from_bytes(self, data: bytes) -> Ciphertext:
        """A ciphertext from :meth:`Ciphertext.to_bytes`, only if made under this key."""
        tag, f = FORMAT.unframe(data)
        if tag != _TAG_CIPHERTEXT or len(f) != 2:
            raise CryptoError("not a veil CKKS ciphertext blob")
        if f[0] != self.fingerprint:
            raise CryptoError(f"the ciphertext was made under another key (fingerprint "
                              f"{f[0].hex()[:8]} != {self.fingerprint.hex()[:8]})")
        ct = _load(_seal().Ciphertext(), self._ctx, f[1], "ciphertext")
        if not math.isclose(ct.scale, self.scale, rel_tol=1e-3) or ct.size() != 2:
            raise CryptoError("malformed ciphertext: unexpected scale or size")
        return Ciphertext(self, ct)


class Ciphertext:
    """A CKKS ciphertext bound to its :class:`CKKSContext` (operators ``+ - *``)."""

    __array_ufunc__ = None

    def __init__(self, context: CKKSContext, ct: Any) -> None:
        self.context = context
        self._ct = ct

    @property
    def level(self) -> int:
        return self.context.level(self)

    def __repr__(self) -> str:
        return f"ckks.Ciphertext(level={self.level}, key={self.context.fingerprint.hex()[:8]})"

    def __add__(self, other: Any) -> Ciphertext:
        return self.context.add(self, other)

    __radd__ = __add__

    def __neg__(self) -> Ciphertext:
        return self.context.negate(self)

    def __sub__(self, other: Any) -> Ciphertext:
        if isinstance(other, Ciphertext):
            return self.context.add(self, other.context.negate(other))
        return self.context.add(self, -np.asarray(other, dtype=float))

    def __mul__(self, other: Any) -> Ciphertext:
        return self.context.multiply(self, other)

    __rmul__ = __mul__

    def to_bytes(self) -> bytes:
        return FORMAT.frame(_TAG_CIPHERTEXT, [self.context.fingerprint, _save(self._ct)])

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())
