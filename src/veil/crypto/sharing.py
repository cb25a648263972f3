"""Secret sharing: additive over the ring Z_2^64 and Shamir t-of-n over GF(2^61 - 1).

Additive sharing (the arithmetic of ``veil.mpc``)
-------------------------------------------------
A secret ``s`` in Z_2^64 is split among ``n`` parties as ``s = s_1 + ... + s_n (mod 2^64)``:
``s_1 .. s_{n-1}`` are uniform 64-bit words and ``s_n = s - sum(s_1 .. s_{n-1})``. Any
``n - 1`` shares are uniform and independent of ``s`` (perfect privacy); all ``n`` are needed.
numpy's ``uint64`` arithmetic wraps modulo 2^64, so sharing and reconstruction are plain
vectorised additions. Signed integers are read in two's complement.

Shamir sharing (Shamir, "How to share a secret", CACM 1979)
-----------------------------------------------------------
For a threshold ``t`` the dealer draws a polynomial ``f(X) = s + a_1 X + ... + a_{t-1} X^{t-1}``
with uniform coefficients in GF(p) and gives party ``i`` the point ``(i, f(i))``. Any ``t``
points determine ``f`` and ``s = f(0) = sum_j lambda_j f(x_j)`` with the Lagrange coefficients
``lambda_j = prod_{m != j} x_m / (x_m - x_j)``; any ``t - 1`` points are uniform and independent
of ``s``. With more than ``t`` points the extra ones must lie on the polynomial through the
first ``t``; :func:`shamir_reconstruct` checks that and raises :class:`CryptoError` when a share
disagrees (a corrupted share, or shares of different secrets): all extra shares at once by a
random linear combination (a bad share passes with probability 2^-61), then share by share
to name the bad one. With exactly ``t`` shares no
check is possible (any ``t`` points fit some polynomial), so every dealing also carries a
random 16-byte tag that reconstruction compares: mixing shares of different dealings by
mistake is caught even then (a forger can copy a tag: the tag is no authentication).

The field is GF(p) with the Mersenne prime ``p = 2^61 - 1``: elements fit in ``uint64`` and
``2^61 = 1 (mod p)`` makes the reduction a shift and an add, so the 122-bit products are
computed exactly with 32-bit limbs in numpy, with no 128-bit integers (:func:`_mul`).
Byte strings are cut into 7-byte limbs (56 bits < 61), each shared as a field element
(:func:`split_bytes` / :func:`combine_bytes`); a 32-byte seed or X25519 key is 5 limbs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from veil._codec import Format
from veil._validation import check_int
from veil.errors import CryptoError, DataError
from veil.random import check_rng, secure_rng

__all__ = [
    "PRIME",
    "additive_share",
    "additive_reconstruct",
    "ShamirShare",
    "shamir_share",
    "shamir_reconstruct",
    "split_bytes",
    "combine_bytes",
    "combine_bytes_many",
    "shares_from_bytes",
]

PRIME = 2**61 - 1
_P = np.uint64(PRIME)
_M29 = np.uint64((1 << 29) - 1)
_M32 = np.uint64((1 << 32) - 1)
_LIMB_BYTES = 7
_TAG_BYTES = 16
#: the wire format of a Shamir share (:meth:`ShamirShare.to_bytes`)
SHARE_FORMAT = Format(b"VSHR", 1, error=CryptoError, name="Shamir share")
#: where x and the tag sit in a share's frame (:meth:`ShamirShare.to_bytes`; the values are
#: its last bytes)
_X_AT = len(SHARE_FORMAT.magic) + 1
_TAG_AT = _X_AT + 9


# --- additive sharing over Z_2^64 ---------------------------------------------------------
def _as_ring(secret: Any, name: str = "secret") -> np.ndarray:
    arr = np.asarray(secret)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"{name} has dtype {arr.dtype}; expected integers (ring elements of "
                        "Z_2^64); encode real numbers first (veil.mpc.fixedpoint.encode)")
    if np.issubdtype(arr.dtype, np.signedinteger):
        return arr.astype(np.int64).view(np.uint64)
    return arr.astype(np.uint64)


def additive_share(secret: Any, parties: int, *, rng=None) -> list[np.ndarray]:
    """Split integers (read modulo 2^64) into ``parties`` additive shares (uint64 arrays)."""
    parties = check_int(parties, "parties", low=2)
    s = _as_ring(secret)
    rng = check_rng(rng)
    shares = [np.asarray(rng.random_raw(s.shape), dtype=np.uint64) for _ in range(parties - 1)]
    last = s.copy()
    for r in shares:
        last -= r
    shares.append(last)
    return shares


def additive_reconstruct(shares: Sequence[Any], *, signed: bool = False) -> np.ndarray:
    """The sum of the shares modulo 2^64 (``signed=True``: read as int64)."""
    if len(shares) < 2:
        raise CryptoError(f"got {len(shares)} additive share(s); all shares (at least 2) "
                          "are needed to reconstruct")
    arrays = [_as_ring(s, f"shares[{i}]") for i, s in enumerate(shares)]
    shape = arrays[0].shape
    for i, a in enumerate(arrays):
        if a.shape != shape:
            raise DataError(f"shares[{i}] has shape {a.shape}, shares[0] has {shape}; "
                            "shares of one secret have one shape")
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return total.view(np.int64) if signed else total


# --- arithmetic in GF(2^61 - 1) ------------------------------------------------------------
def _reduce(s: np.ndarray) -> np.ndarray:
    """s mod p for 0 <= s < 2^63 (2^61 = 1 mod p)."""
    s = (s & _P) + (s >> np.uint64(61))
    return _sub_p(s)


def _sub_p(s: np.ndarray) -> np.ndarray:
    """s mod p for 0 <= s < 2p (without wrapping below zero)."""
    return np.asarray(s - np.where(s >= _P, _P, np.uint64(0)), dtype=np.uint64)


def _mul(a: np.ndarray, b: Any) -> np.ndarray:
    """a * b mod p for field elements, exactly, with 32-bit limbs.

    With ``a = a1 2^32 + a0`` (a1 < 2^29) and ``b`` alike,
    ``ab = a1 b1 2^64 + (a1 b0 + a0 b1) 2^32 + a0 b0`` and, modulo p, ``2^64 = 8`` and
    ``m 2^32 = (m >> 29) + (m mod 2^29) 2^32``; every partial term is below 2^62.
    """
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    a1, a0 = a >> np.uint64(32), a & _M32
    b1, b0 = b >> np.uint64(32), b & _M32
    low = a0 * b0
    mid = a1 * b0 + a0 * b1
    s = ((a1 * b1) << np.uint64(3)) + (mid >> np.uint64(29)) + ((mid & _M29) << np.uint64(32))
    s = s + (low & _P) + (low >> np.uint64(61))
    return _reduce(s)


def _add(a: np.ndarray, b: Any) -> np.ndarray:
    return _sub_p(np.asarray(a, dtype=np.uint64) + np.asarray(b, dtype=np.uint64))


def _inverses(values: Sequence[int]) -> list[int]:
    """The inverses of nonzero field elements with one exponentiation (Montgomery's trick:
    invert the running product once, then peel one factor off per element)."""
    prefix = [1]
    for v in values:
        prefix.append(prefix[-1] * v % PRIME)
    inv = pow(prefix[-1], -1, PRIME)
    out = [0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        out[i] = inv * prefix[i] % PRIME
        inv = inv * values[i] % PRIME
    return out


@functools.lru_cache(maxsize=1024)
def _lagrange(xs: tuple[int, ...], targets: tuple[int, ...]) -> np.ndarray:
    """The matrix ``W[e, j] = l_j(targets[e])`` of the Lagrange basis polynomials of the
    distinct points ``xs``, evaluated at targets not among them (read-only, cached by the
    coordinates: every secret dealt to the same holders reuses it).

    Barycentric form: ``l_j(a) = L(a) / ((a - x_j) w_j)`` with ``L(a) = prod_m (a - x_m)``
    and ``w_j = prod_{m != j} (x_j - x_m)``: O(t^2) products for the ``w_j`` and O(t) per
    target, all inverses from one exponentiation (:func:`_inverses`).
    """
    t = len(xs)
    w = [math.prod([xj - xm for xm in xs if xm != xj]) % PRIME for xj in xs]
    invs = _inverses([(a - xj) * wj % PRIME for a in targets for xj, wj in zip(xs, w)])
    big = [math.prod([a - xm for xm in xs]) % PRIME for a in targets]
    out = np.array([big[e] * inv % PRIME for e in range(len(targets))
                    for inv in invs[e * t:(e + 1) * t]],
                   dtype=np.uint64).reshape(len(targets), t)
    out.flags.writeable = False
    return out


def _dot(w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``w @ y`` over GF(p) for field matrices w (r, t) and y (t, k).

    Each product ``w[e, j] y[j, c]`` is reduced below 2^61 (:func:`_mul`); its high and low
    32-bit halves are summed separately over j (t < 2^31 terms of < 2^32 fit a uint64) and
    recombined as ``hi 2^32 + lo (mod p)``. Columns go in chunks of about 2^20 products.
    """
    r, t = w.shape
    k = y.shape[1]
    out = np.empty((r, k), dtype=np.uint64)
    step = max(1, (1 << 20) // max(1, r * t))
    for c in range(0, k, step):
        prod = _mul(w[:, :, None], y[None, :, c:c + step])
        hi = (prod >> np.uint64(32)).sum(axis=1, dtype=np.uint64)
        lo = (prod & _M32).sum(axis=1, dtype=np.uint64)
        out[:, c:c + step] = _add(_mul(_reduce(hi), 1 << 32), _reduce(lo))
    return out


# --- Shamir shares -------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class ShamirShare:
    """One party's Shamir share: the point ``(x, f(x))`` for every secret element.

    ``values`` holds field elements (uint64 < 2^61 - 1) with the secret's shape; ``length``
    is the secret's size in bytes for shares made by :func:`split_bytes` (None otherwise);
    ``tag`` identifies the dealing.
    """

    x: int
    threshold: int
    values: np.ndarray
    tag: bytes
    length: int | None = None

    def to_bytes(self) -> bytes:
        """A frame of :mod:`veil._codec` (for messages; see :meth:`from_bytes`): x (u32),
        threshold (u32), kind (u8: 1 for :func:`split_bytes` shares), tag (16 bytes),
        length (u64), values (a uint64 array)."""
        return (SHARE_FORMAT.writer().u32(self.x).u32(self.threshold)
                .u8(0 if self.length is None else 1).raw(self.tag).u64(self.length or 0)
                .array(np.asarray(self.values, dtype=np.uint64)).finish())

    @classmethod
    def from_bytes(cls, data: bytes) -> ShamirShare:
        """Decode and validate a share; a malformed one raises :class:`CryptoError`."""
        reader = SHARE_FORMAT.reader(data)
        x, threshold, kind = reader.u32(), reader.u32(), reader.u8()
        tag, length = bytes(reader.take(_TAG_BYTES)), reader.u64()
        values = reader.array(dtypes=(np.dtype(np.uint64),))
        reader.done()
        if kind not in (0, 1):
            raise reader.fail(f"kind {kind}; expected 0 or 1")
        if kind == 1 and (values.ndim != 1 or values.size != _limbs(length)):
            raise reader.fail(f"{values.size} limbs for a {length}-byte secret")
        share = cls(x, threshold, values, tag, length if kind == 1 else None)
        _check_share(share, "share")
        return share


def shares_from_bytes(frames: Sequence[bytes]) -> list[ShamirShare]:
    """``[ShamirShare.from_bytes(f) for f in frames]``, the frames of one length parsed at
    once: the first in full; each other one that equals it outside x, the tag and the
    values (so its threshold, kind, byte length and array header are the first's) has only
    those read, as arrays, and range-checked (x >= 1, values below p). Any other frame is
    parsed alone, and raises what :meth:`ShamirShare.from_bytes` raises. Secure aggregation
    receives thousands of shares of one shape per round."""
    out: list[ShamirShare | None] = [None] * len(frames)
    groups: dict[int, list[int]] = {}
    for i, frame in enumerate(frames):
        if not isinstance(frame, bytes):
            out[i] = ShamirShare.from_bytes(frame)
        else:
            groups.setdefault(len(frame), []).append(i)
    for size, index in groups.items():
        first = out[index[0]] = ShamirShare.from_bytes(frames[index[0]])
        rest = index[1:]
        if not rest:
            continue
        raw = np.frombuffer(b"".join(frames[i] for i in rest), dtype=np.uint8).reshape(-1, size)
        fixed = np.ones(size, dtype=bool)
        fixed[_X_AT:_X_AT + 4] = fixed[_TAG_AT:_TAG_AT + _TAG_BYTES] = False
        nbytes = first.values.nbytes
        fixed[size - nbytes:] = False
        template = np.frombuffer(frames[index[0]], dtype=np.uint8)
        xs = raw[:, _X_AT:_X_AT + 4].copy().view("<u4")[:, 0]
        values = raw[:, size - nbytes:].copy().view("<u8").astype(np.uint64)
        good = np.all(raw[:, fixed] == template[fixed], axis=1) & (xs >= 1)
        if values.size:
            good &= np.all(values < _P, axis=1)
        shape = first.values.shape
        for row, i in enumerate(rest):
            out[i] = ShamirShare(int(xs[row]), first.threshold, values[row].reshape(shape),
                                 raw[row, _TAG_AT:_TAG_AT + _TAG_BYTES].tobytes(),
                                 first.length) if good[row] else \
                ShamirShare.from_bytes(frames[i])
    return out  # type: ignore[return-value]


def _limbs(length: int) -> int:
    return -(-length // _LIMB_BYTES)


def _check_share(share: Any, name: str, values: bool = True) -> None:
    """Type, point and threshold of a share; its values too unless the caller checks them
    for many shares at once."""
    if not isinstance(share, ShamirShare):
        raise DataError(f"{name} is a {type(share).__name__}; expected a ShamirShare")
    if not 1 <= share.x < PRIME:
        raise CryptoError(f"{name}.x={share.x} is not allowed: must be in [1, 2^61 - 1)")
    if share.threshold < 1:
        raise CryptoError(f"{name}.threshold={share.threshold} is not allowed: must be >= 1")
    if share.values.dtype != np.uint64 or (
            values and share.values.size and share.values.max() >= _P):
        raise CryptoError(f"{name} holds values outside GF(2^61 - 1)")


def _field(secret: Any) -> np.ndarray:
    arr = np.asarray(secret)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"secret has dtype {arr.dtype}; expected integers in [0, 2^61 - 1)")
    if arr.size and (np.any(arr < 0) or np.any(arr.astype(np.uint64) >= _P)):
        raise DataError("secret holds values outside [0, 2^61 - 1), the field GF(2^61 - 1)")
    return arr.astype(np.uint64)


def _deal(secret: np.ndarray, parties: int, threshold: int, rng, length: int | None):
    """Evaluate a random polynomial with constant term ``secret`` at x = 1..parties."""
    coeffs = rng.integers(0, PRIME, size=(threshold - 1, *secret.shape)).astype(np.uint64)
    xs = np.arange(1, parties + 1, dtype=np.uint64).reshape((parties,) + (1,) * secret.ndim)
    acc = np.zeros((parties, *secret.shape), dtype=np.uint64)
    for c in coeffs[::-1]:  # Horner from the highest coefficient down to a_1
        acc = _mul(_add(acc, c), xs)
    acc = _add(acc, secret)
    tag = rng.bytes(_TAG_BYTES)
    return [ShamirShare(i + 1, threshold, np.array(acc[i]), tag, length) for i in range(parties)]


def _check_counts(parties: int, threshold: int) -> tuple[int, int]:
    parties = check_int(parties, "parties", low=1, high=2**31)
    threshold = check_int(threshold, "threshold", low=1, high=parties)
    return parties, threshold


def shamir_share(secret: Any, parties: int, threshold: int, *, rng=None) -> list[ShamirShare]:
    """Share field elements (integers in [0, 2^61 - 1)) so that any ``threshold`` of the
    ``parties`` shares reconstruct them and fewer reveal nothing."""
    parties, threshold = _check_counts(parties, threshold)
    return _deal(_field(secret), parties, threshold, check_rng(rng), None)


def shamir_reconstruct(shares: Sequence[ShamirShare]) -> np.ndarray:
    """The secret from at least ``threshold`` shares (uint64 array of field elements).

    Raises :class:`CryptoError` for too few shares, shares of different dealings, or, with
    more than ``threshold`` shares, any share that is not on the polynomial of the others.
    """
    return _reconstruct_many([shares])[0]


def _points(shares: Sequence[ShamirShare]) -> tuple[list[int], np.ndarray, ShamirShare]:
    """The checked points of one dealing: their x, their values (one row per share), the
    first share (see :func:`shamir_reconstruct` for what is checked)."""
    shares = list(shares)
    if not shares:
        raise CryptoError("no shares given: need at least the threshold")
    for i, s in enumerate(shares):
        _check_share(s, f"shares[{i}]", values=False)
    first = shares[0]
    for i, s in enumerate(shares[1:], start=1):
        if (s.threshold, s.tag, s.length, s.values.shape) != (
                first.threshold, first.tag, first.length, first.values.shape):
            raise CryptoError(f"shares[{i}] comes from a different dealing than shares[0] "
                              "(threshold, tag, length or shape differ)")
    xs = [s.x for s in shares]
    if len(set(xs)) != len(xs):
        raise CryptoError(f"duplicate share points x={sorted(xs)}: each party's share counts once")
    t = first.threshold
    if len(shares) < t:
        raise CryptoError(f"got {len(shares)} share(s); threshold {t} are needed")
    ys = np.stack([s.values.reshape(-1) for s in shares])
    if ys.size and ys.max() >= _P:
        bad = int(np.flatnonzero(ys.max(axis=1) >= _P)[0])
        raise CryptoError(f"shares[{bad}] holds values outside GF(2^61 - 1)")
    return xs, ys, first


def _reconstruct_many(dealings: Sequence[Sequence[ShamirShare]]) -> list[np.ndarray]:
    """Each dealing's secret (:func:`shamir_reconstruct`); the dealings whose shares sit at
    the same points (in the same order) are interpolated together: one Lagrange matrix and
    one field product ``W @ [ys_1 | ys_2 | ...]`` for all of them. CryptoError (the reason
    of one that fails) if any fails.

    The e shares beyond the first t are checked at once, by a random linear combination
    (batch verification): with rho uniform in GF(p)^e from the CSPRNG, unknown to whoever
    made the shares, ``rho . (W_extra Y_t - Y_extra) = 0`` for every column, where
    ``W_extra Y_t`` are the values the polynomial through the first t points takes at the
    extra points. A nonzero difference column d passes only if rho . d = 0, which a uniform
    rho satisfies with probability 1/p (about 2^-61); a dealing that fails is checked
    share by share, to name the share."""
    points = [_points(shares) for shares in dealings]
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, (xs, _, _) in enumerate(points):
        groups.setdefault(tuple(xs), []).append(k)
    out: list[np.ndarray | None] = [None] * len(points)
    failed: dict[int, str] = {}
    for xs, members in groups.items():
        t = points[members[0]][2].threshold
        if any(points[k][2].threshold != t for k in members):  # rare: split by threshold
            for k in members:
                out[k] = _reconstruct_many([dealings[k]])[0]
            continue
        ys = np.concatenate([points[k][1] for k in members], axis=1)
        weights = _lagrange(xs[:t], (0, *xs[t:]))
        if len(xs) > t:
            rho = secure_rng().integers(0, PRIME, size=(1, len(xs) - t)).astype(np.uint64)
            at = _dot(np.vstack([weights[:1], _dot(rho, weights[1:])]), ys[:t])
            agree = at[1] == _dot(rho, ys[t:])[0]
        else:
            at, agree = _dot(weights, ys[:t]), np.ones(ys.shape[1], dtype=bool)
        column = 0
        for k in members:
            width = points[k][1].shape[1]
            if not agree[column:column + width].all():
                full = _dot(weights[1:], points[k][1][:t])
                off = np.flatnonzero(np.any(full != points[k][1][t:], axis=1))
                failed[k] = (f"inconsistent shares: the share at x={xs[t + off[0]]} is not on "
                             f"the polynomial through x={list(xs[:t])} (a corrupted share or "
                             "shares of different secrets)")
            out[k] = at[0, column:column + width].reshape(points[k][2].values.shape)
            column += width
    if failed:
        raise CryptoError(failed[min(failed)])
    return out  # type: ignore[return-value]


def split_bytes(secret: bytes, parties: int, threshold: int, *, rng=None) -> list[ShamirShare]:
    """Shamir-share a byte string (a seed, a private key) t-of-n."""
    if not isinstance(secret, (bytes, bytearray, memoryview)):
        raise DataError(f"secret is a {type(secret).__name__}; expected bytes")
    parties, threshold = _check_counts(parties, threshold)
    data = bytes(secret)
    n = _limbs(len(data))
    padded = data + bytes(n * _LIMB_BYTES - len(data))
    limbs = np.array([int.from_bytes(padded[i * _LIMB_BYTES:(i + 1) * _LIMB_BYTES], "little")
                      for i in range(n)], dtype=np.uint64)
    return _deal(limbs, parties, threshold, check_rng(rng), len(data))


def combine_bytes(shares: Sequence[ShamirShare]) -> bytes:
    """The byte string from at least ``threshold`` shares made by :func:`split_bytes`."""
    return combine_bytes_many([shares])[0]


def combine_bytes_many(dealings: Sequence[Sequence[ShamirShare]]) -> list[bytes]:
    """``[combine_bytes(s) for s in dealings]``, the dealings with shares at the same points
    interpolated together (:func:`shamir_reconstruct`); CryptoError (what ``combine_bytes``
    raises for one of them) if any fails."""
    dealings = [list(shares) for shares in dealings]
    for shares in dealings:
        if shares and any(getattr(s, "length", None) is None for s in shares):
            raise CryptoError("these shares were not made by split_bytes (no byte length)")
    out = []
    for shares, limbs in zip(dealings, _reconstruct_many(dealings)):
        length = shares[0].length
        if np.any(limbs >= np.uint64(1 << (8 * _LIMB_BYTES))):
            raise CryptoError("reconstructed limbs exceed 7 bytes: the shares are not valid")
        data = b"".join(int(v).to_bytes(_LIMB_BYTES, "little") for v in limbs)
        if any(data[length:]):
            raise CryptoError("reconstructed padding is not zero: the shares are not valid")
        out.append(data[:length])
    return out
