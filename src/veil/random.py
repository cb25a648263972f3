"""Randomness for veil: a vectorised CSPRNG, and its seeded twin for tests.

Construction
------------
:class:`Generator` draws every random bit from AES-256 in counter mode: with key K the
stream is ``AES_K(0) || AES_K(1) || ...``, indistinguishable from uniform bytes as long as
AES is a pseudorandom permutation (the CTR_DRBG construction of NIST SP 800-90A, without
derivation function). After every request the generator replaces K with 32 further bytes
of its own stream (CTR_DRBG's update step), so a later leak of its state does not reveal
earlier output (backtracking resistance), and each key encrypts one stream only.

* Secure mode (``seed=None``, the default everywhere in veil): K comes from ``os.urandom``,
  the operating system's CSPRNG, and is drawn again from the OS in a child process after
  ``fork()`` so that parent and child never share a stream.
* Seeded mode (``seed=int|bytes``, for tests and reproducible simulations only):
  ``K = SHA-256("veil.random seed:" || seed)``. The same algorithm, with a known key.

Distributions are computed from the stream with numpy (vectorised):

* uniform doubles ``(r >> 11) * 2^-53`` take every multiple of 2^-53 in [0, 1) with equal
  probability; the open interval (0, 1] adds 2^-53;
* exponential ``-log(U)``, U in (0, 1]; Laplace = exponential with a random sign;
* normal by the ziggurat method (Marsaglia & Tsang 2000) with 256 strips, one 64-bit word
  per candidate, and Marsaglia's (1964) exact tail beyond the base strip;
* gamma by Marsaglia & Tsang (2000), with ``Gamma(a) = Gamma(a+1) * U^(1/a)`` for a < 1;
* Poisson by inversion for small means and Hoermann's PTRS (1993) for means >= 10;
* integers in [low, high) by rejection of masked 64-bit words (exactly uniform);
* permutations by sorting distinct random 64-bit keys (redrawn on a tie: exactly uniform).

Floating-point outputs are as good as IEEE doubles allow; mechanisms that must not leak
through floating-point artifacts (Mironov 2012) release on a grid with the discrete
samplers of :mod:`veil.dp` rather than adding these doubles to a value.

Every random function in veil takes ``rng=`` and resolves it with :func:`check_rng`:
``None`` gives the shared secure generator, an ``int`` a seeded one (tests).

Seeds never reach privacy noise in a run. A federated run with a seed reproduces its data
splits, sampling, training order and faults, but its protocols draw keys, nonces and masks
from :func:`secure_rng` always, and DP noise from :func:`noise_rng`: the secure generator,
unless the run's seeded generator was made with ``simulate_noise=True`` -- an explicit,
labelled simulation whose epsilon is not certified.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from veil import _native
from veil.errors import ConfigError

__all__ = ["Generator", "RngLike", "default_rng", "check_rng", "noise_rng", "secure_rng"]

_KEY_BYTES = 32
_TWO_M53 = 2.0 ** -53
_IV = bytes(16)
_ZEROS = memoryview(bytes(1 << 16))  # plaintext of the keystream, encrypted in slices
Size = int | Sequence[int] | None


def _count(size: Size) -> int:
    if size is None:
        return 1
    if isinstance(size, numbers.Integral):
        if size < 0:
            raise ConfigError(f"size={size!r} is not allowed: must be >= 0")
        return int(size)
    try:
        dims = tuple(int(d) for d in size)
    except TypeError:
        raise ConfigError(
            f"size={size!r} is not allowed: expected an int or a tuple of ints") from None
    if any(d < 0 for d in dims):
        raise ConfigError(f"size={size!r} is not allowed: dimensions must be >= 0")
    return math.prod(dims)


def _shape(values: np.ndarray, size: Size) -> Any:
    if size is None:
        return values[0]
    return values.reshape(size)


def _ziggurat(strips: int, r: float) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries ``x_0 > x_1 = r > ... > x_{strips-1} > x_strips = 0`` of ``strips`` regions
    of equal area ``v`` under ``f(x) = exp(-x^2 / 2)``, and ``f`` at each boundary.

    Strip ``i >= 1`` is the rectangle ``[0, x_i] x [f(x_i), f(x_{i+1})]``; the base strip is
    ``[0, r] x [0, f(r)]`` plus the tail beyond ``r``, of width ``x_0 = v / f(r)`` when drawn
    as a rectangle. ``r`` closes the recursion ``f(x_{i+1}) = f(x_i) + v / x_i`` at the top:
    the last strip has area ``x_{strips-1} (1 - f(x_{strips-1})) = v``.
    """
    f_r = math.exp(-0.5 * r * r)
    v = r * f_r + math.sqrt(math.pi / 2) * math.erfc(r / math.sqrt(2))
    x = [v / f_r, r]
    for _ in range(strips - 2):
        x.append(math.sqrt(-2.0 * math.log(math.exp(-0.5 * x[-1] ** 2) + v / x[-1])))
    x.append(0.0)
    edges = np.array(x)
    return edges, np.exp(-0.5 * edges * edges)


#: Marsaglia & Tsang (2000), "The ziggurat method for generating random variables", J. Stat.
#: Softw. 5(8): r for 256 strips.
_ZIG_R = 3.6541528853610088
_ZIG_X, _ZIG_F = _ziggurat(256, _ZIG_R)
_ZIG_SCALE = _ZIG_X[:-1] * 2.0 ** -53  # strip i: x = j x_i 2^-53 for odd j in (-2^53, 2^53)
_ZIG_INNER = _ZIG_X[1:]                # |x| < x_{i+1}: under the curve whatever the height


def _ziggurat_fast(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ziggurat's fast path over candidate words ``raw`` (consumed): the candidates
    ``x = j x_s 2^-53`` (strip ``s`` = the 8 low bits, odd ``j = (raw >> 10) | 1`` from the
    signed word), the ascending positions where ``|x| >= x_{s+1}`` (not accepted at once)
    and their strips. One compiled pass (:mod:`veil._native`) where it could be built,
    else numpy; the values are the same."""
    kernel = _native.kernel("veil_ziggurat")
    if kernel is not None:
        z = np.empty(raw.size)
        slow = np.empty(raw.size, dtype=np.int64)
        m = kernel(raw.ctypes.data, raw.size, _ZIG_SCALE.ctypes.data, _ZIG_INNER.ctypes.data,
                   z.ctypes.data, slow.ctypes.data)
        slow = slow[:m]
        return z, slow, (raw[slow] & np.uint64(255)).view(np.int64)
    strip = (raw & np.uint64(255)).view(np.int64)
    j = raw.view(np.int64)  # in place from here: a small working set stays in cache
    j >>= 10
    j |= 1
    # mode="clip" (every strip is in range anyway): numpy buffers ``out`` in the default
    # mode="raise", an extra pass
    z = np.take(_ZIG_SCALE, strip, mode="clip")
    z *= j
    inner = np.take(_ZIG_INNER, strip, out=j.view(np.float64), mode="clip")
    slow = np.flatnonzero(np.abs(z) >= inner)
    return z, slow, strip[slow]


def _seed_key(seed: int | bytes) -> bytes:
    if isinstance(seed, (bytes, bytearray)):
        material = bytes(seed)
    elif isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        s = int(seed)
        material = s.to_bytes((s.bit_length() + 8) // 8 + 1, "big", signed=True)
    else:
        raise ConfigError(f"seed={seed!r} is not allowed: expected an int, bytes or None")
    return hashlib.sha256(b"veil.random seed:" + material).digest()


class Generator:
    """A vectorised random generator with a numpy-like API on an AES-256-CTR stream.

    ``Generator()`` is secure (OS-seeded); ``Generator(seed)`` is deterministic and meant
    for tests only. Instances are thread-safe.
    """

    def __init__(self, seed: int | bytes | None = None, *, simulate_noise: bool = False,
                 _key: bytes | None = None, _seeded: bool | None = None) -> None:
        if _key is not None:
            self.seeded = bool(_seeded)
            key = _key
        elif seed is None:
            self.seeded = False
            key = os.urandom(_KEY_BYTES)
        else:
            self.seeded = True
            key = _seed_key(seed)
        #: a seeded generator that DP noise may come from (:func:`noise_rng`): simulation only
        self.simulate_noise = bool(simulate_noise) and self.seeded
        self._key = key
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"veil.random.Generator({self.kind})"

    @property
    def kind(self) -> str:
        """"secure", "seeded", or "simulation" (seeded, with simulated DP noise)."""
        return "simulation" if self.simulate_noise else "seeded" if self.seeded else "secure"

    # -- the stream ---------------------------------------------------------------
    def _stream(self, nbytes: int) -> np.ndarray:
        """``nbytes`` fresh stream bytes as a uint8 array (and a new key)."""
        total = nbytes + _KEY_BYTES
        out = np.empty(total + 16, dtype=np.uint8)
        with self._lock:
            if not self.seeded and os.getpid() != self._pid:
                self._key, self._pid = os.urandom(_KEY_BYTES), os.getpid()
            enc = Cipher(algorithms.AES(self._key), modes.CTR(_IV)).encryptor()
            for start in range(0, total, len(_ZEROS)):  # the keystream: AES-CTR of zeros
                enc.update_into(_ZEROS[:min(len(_ZEROS), total - start)], out[start:])
            self._key = out[nbytes:total].tobytes()
        return out[:nbytes]

    def bytes(self, n: int) -> bytes:
        """``n`` uniformly random bytes."""
        return self._stream(int(n)).tobytes()

    def random_raw(self, size: Size = None) -> Any:
        """Uniform 64-bit words (numpy uint64)."""
        n = _count(size)
        return _shape(self._stream(8 * n).view(np.uint64), size)

    def _raw(self, n: int) -> np.ndarray:
        return self._stream(8 * n).view(np.uint64)

    # -- Python integers (cryptography) ------------------------------------------
    def randbits(self, k: int) -> int:
        """A uniform integer in [0, 2^k)."""
        if k <= 0:
            return 0
        nbytes = (k + 7) // 8
        value = int.from_bytes(self._stream(nbytes).tobytes(), "big")
        return value >> (8 * nbytes - k)

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n) by rejection (no modulo bias)."""
        if n <= 0:
            raise ConfigError(f"n={n!r} is not allowed: must be a positive integer")
        k = (n - 1).bit_length()
        while True:
            r = self.randbits(k)
            if r < n:
                return r

    def spawn(self, n: int) -> list[Generator]:
        """``n`` independent child generators keyed from this stream (same mode)."""
        keys = self._stream(_KEY_BYTES * int(n)).reshape(int(n), _KEY_BYTES)
        return [Generator(_key=k.tobytes(), _seeded=self.seeded,
                          simulate_noise=self.simulate_noise) for k in keys]

    # -- uniform -----------------------------------------------------------------
    def random(self, size: Size = None) -> Any:
        """Uniform doubles in [0, 1) on the grid of multiples of 2^-53."""
        n = _count(size)
        return _shape((self._raw(n) >> np.uint64(11)).astype(np.float64) * _TWO_M53, size)

    def _open_unit(self, n: int) -> np.ndarray:
        """Uniform doubles in (0, 1]."""
        return ((self._raw(n) >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * _TWO_M53

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Size = None) -> Any:
        """Uniform doubles in [low, high)."""
        n = _count(size)
        u = (self._raw(n) >> np.uint64(11)).astype(np.float64) * _TWO_M53
        return _shape(low + (high - low) * u, size)

    def integers(self, low: int, high: int | None = None, size: Size = None) -> Any:
        """Uniform int64 values in [low, high) (numpy's convention: [0, low) if no high)."""
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high)
        span = high - low
        if span <= 0:
            raise ConfigError(f"integers(low={low}, high={high}) is not allowed: need low < high")
        if low < -(2 ** 63) or high - 1 >= 2 ** 63:
            raise ConfigError(f"integers(low={low}, high={high}) is not allowed: "
                              "the range must fit in int64")
        n = _count(size)
        out = np.empty(n, dtype=np.int64)
        mask = np.uint64((1 << max(span - 1, 0).bit_length()) - 1)
        filled = 0
        while filled < n:
            need = n - filled
            draw = self._raw(need + need // 2 + 8) & mask
            draw = draw[draw < np.uint64(span)][:need]
            # low + draw computed modulo 2^64 and read back as int64: exact in range.
            out[filled:filled + draw.size] = (draw + np.uint64(low % 2 ** 64)).view(np.int64)
            filled += draw.size
        return _shape(out, size)

    def bernoulli(self, p: float | np.ndarray, size: Size = None) -> Any:
        """Booleans that are True with probability p (to within 2^-53): ``U < p`` for U
        uniform on the multiples of 2^-53 in [0, 1)."""
        p_arr = np.asarray(p, dtype=np.float64)
        n = _count(size) if size is not None or p_arr.ndim == 0 else p_arr.size
        raw = self._raw(n)
        if p_arr.ndim == 0 and 0.0 <= p_arr < 1.0:
            # U = (raw >> 11) 2^-53 < p  <=>  raw >> 11 < ceil(p 2^53)  <=>  raw < that << 11
            return _shape(raw < np.uint64(math.ceil(float(p_arr) * 2.0 ** 53) << 11), size)
        u = (raw >> np.uint64(11)).astype(np.float64) * _TWO_M53
        if size is None and p_arr.ndim > 0:
            return (u < p_arr.ravel()).reshape(p_arr.shape)
        return _shape(u < p_arr, size)

    # -- continuous --------------------------------------------------------------
    def exponential(self, scale: float = 1.0, size: Size = None) -> Any:
        """Exponential with mean ``scale``: ``-scale * log(U)``, U in (0, 1]."""
        n = _count(size)
        return _shape(-scale * np.log(self._open_unit(n)), size)

    def laplace(self, loc: float = 0.0, scale: float = 1.0, size: Size = None) -> Any:
        """Laplace(loc, scale): an exponential with a uniformly random sign."""
        n = _count(size)
        raw = self._raw(n)
        sign = np.where((raw & np.uint64(1)).astype(bool), scale, -scale)
        u = ((raw >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * _TWO_M53
        return _shape(loc - sign * np.log(u), size)

    def standard_normal(self, size: Size = None, dtype: Any = np.float64) -> Any:
        """N(0, 1) by the ziggurat method (Marsaglia & Tsang 2000), computed in float64 and
        rounded once to ``dtype`` (float64 or float32).

        A candidate takes one 64-bit word: its 8 low bits pick one of 256 strips of equal
        area covering the density, its 53 high bits an odd ``j`` in ``(-2^53, 2^53)``, and
        ``x = j x_i 2^-53`` is uniform over the strip's width (symmetric, never 0). If
        ``|x| < x_{i+1}`` it lies under the curve and is accepted (about 99% of candidates);
        otherwise a uniform height decides (the wedge), or, in the base strip, ``x`` is
        replaced by a draw from the tail beyond ``r``. Candidates are drawn with spares: the
        accepted spares, in order, fill the places of rejected candidates (all accepted
        candidates are independent N(0, 1), whichever places they fill).
        """
        dtype = np.dtype(dtype)
        if dtype not in (np.float64, np.float32):
            raise ConfigError(f"dtype={dtype} is not allowed: use float64 or float32")
        n = _count(size)
        z, rejected = self._ziggurat(n + n // 64 + 8)  # ~0.7% of candidates are rejected
        held = np.searchsorted(rejected, n)
        holes, spares = rejected[:held], np.delete(z[n:], rejected[held:] - n)
        filled = min(holes.size, spares.size)
        z[holes[:filled]] = spares[:filled]
        if holes.size > filled:
            z[holes[filled:]] = self.standard_normal(holes.size - filled)
        return _shape(z[:n].astype(dtype, copy=dtype != np.float64), size)

    def _ziggurat(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` ziggurat candidates (float64) and the ascending positions of the rejected."""
        z, slow, i = _ziggurat_fast(self._raw(n))
        if not slow.size:
            return z, slow
        x = z[slow]
        base = i == 0
        tails = int(np.count_nonzero(base))
        u = self._open_unit(slow.size + 2 * tails)  # heights, then the tail's uniforms
        # strip i >= 1: a height uniform in (f(x_i), f(x_{i+1})], accepted under f(x)
        low = _ZIG_F[i]
        under = low + u[:slow.size] * (_ZIG_F[i + 1] - low) < np.exp(-0.5 * x * x)
        if tails:  # the base strip beyond r: a draw from the tail, with x's sign
            z[slow[base]] = np.copysign(self._normal_tail(u[slow.size:]), x[base])
        return z, slow[~(base | under)]

    def _normal_tail(self, u: np.ndarray) -> np.ndarray:
        """``u.size // 2`` draws of ``|Z|`` given ``|Z| > r`` (Marsaglia 1964): ``r + a`` with
        ``a = -log(U1) / r``, accepted when ``-2 log(U2) > a^2``; the first attempts use the
        uniforms ``u`` (U1 values, then U2 values), retries fresh ones."""
        n = u.size // 2
        out = np.empty(n)
        filled = 0
        while True:
            need = n - filled
            a = -np.log(u[:need]) / _ZIG_R
            a = a[-2.0 * np.log(u[need:]) > a * a]
            out[filled:filled + a.size] = _ZIG_R + a
            filled += a.size
            if filled == n:
                return out
            u = self._open_unit(2 * (n - filled))

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Size = None) -> Any:
        """N(loc, scale^2)."""
        z = self.standard_normal(size)
        return loc + scale * z

    def gamma(self, shape: float, scale: float = 1.0, size: Size = None) -> Any:
        """Gamma(shape, scale) by Marsaglia & Tsang's squeeze-rejection method."""
        if not shape > 0:
            raise ConfigError(f"shape={shape!r} is not allowed: must be > 0")
        n = _count(size)
        a = shape if shape >= 1 else shape + 1.0
        d = a - 1.0 / 3.0
        c = 1.0 / math.sqrt(9.0 * d)
        out = np.empty(n)
        filled = 0
        while filled < n:
            need = n - filled
            batch = need + need // 4 + 8
            x = self.standard_normal(batch)
            u = self._open_unit(batch)
            v = (1.0 + c * x) ** 3
            with np.errstate(invalid="ignore", divide="ignore"):
                ok = (v > 0) & (np.log(u) < 0.5 * x * x + d - d * v + d * np.log(v))
            accepted = (d * v[ok])[:need]
            out[filled:filled + accepted.size] = accepted
            filled += accepted.size
        if shape < 1:
            out *= self._open_unit(n) ** (1.0 / shape)
        return _shape(scale * out, size)

    # -- discrete ----------------------------------------------------------------
    def geometric(self, p: float, size: Size = None) -> Any:
        """Number of Bernoulli(p) trials up to the first success (support 1, 2, ...)."""
        if not 0 < p <= 1:
            raise ConfigError(f"p={p!r} is not allowed: must be in (0, 1]")
        n = _count(size)
        if p == 1:
            return _shape(np.ones(n, dtype=np.int64), size)
        k = np.floor(np.log(self._open_unit(n)) / math.log1p(-p))
        return _shape(k.astype(np.int64) + 1, size)

    def poisson(self, lam: float, size: Size = None) -> Any:
        """Poisson(lam): inversion for lam < 10, Hoermann's PTRS (1993) otherwise."""
        if not (lam >= 0 and math.isfinite(lam)):
            raise ConfigError(f"lam={lam!r} is not allowed: must be finite and >= 0")
        n = _count(size)
        if lam == 0:
            return _shape(np.zeros(n, dtype=np.int64), size)
        out = self._poisson_small(lam, n) if lam < 10 else self._poisson_ptrs(lam, n)
        return _shape(out, size)

    def _poisson_small(self, lam: float, n: int) -> np.ndarray:
        # Inversion: k is the first index where the running CDF exceeds U.
        u = self.random(n)
        k = np.zeros(n, dtype=np.int64)
        pmf = math.exp(-lam)
        cdf = np.full(n, pmf)
        active = u >= cdf
        i = 0
        while active.any():
            i += 1
            pmf *= lam / i
            k[active] += 1
            cdf[active] += pmf
            active &= u >= cdf
            if pmf == 0.0:  # the tail is below double precision: U sits in it
                break
        return k

    def _poisson_ptrs(self, lam: float, n: int) -> np.ndarray:
        from scipy.special import gammaln  # lazy: keeps `import veil.random` free of scipy

        slam, loglam = math.sqrt(lam), math.log(lam)
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
        v_r = 0.9277 - 3.6224 / (b - 2.0)
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            need = n - filled
            batch = need + need // 4 + 8
            u = self.random(batch) - 0.5
            v = self._open_unit(batch)
            us = 0.5 - np.abs(u)
            with np.errstate(divide="ignore", invalid="ignore"):
                k = np.floor((2.0 * a / us + b) * u + lam + 0.43)
                quick = (us >= 0.07) & (v <= v_r)
                valid = (k >= 0) & ~((us < 0.013) & (v > us))
                log_ratio = (np.log(v) + math.log(inv_alpha) - np.log(a / (us * us) + b))
                exact = log_ratio <= -lam + k * loglam - gammaln(k + 1.0)
            ok = quick | (valid & exact)
            accepted = k[ok][:need].astype(np.int64)
            out[filled:filled + accepted.size] = accepted
            filled += accepted.size
        return out

    # -- permutations --------------------------------------------------------------
    def permutation(self, x: int | np.ndarray) -> np.ndarray:
        """A uniformly random permutation of ``range(x)`` or a shuffled copy of ``x``."""
        if isinstance(x, numbers.Integral):
            return self._perm(int(x))
        arr = np.asarray(x)
        return arr[self._perm(arr.shape[0])]

    def _perm(self, n: int) -> np.ndarray:
        while True:
            keys = self._raw(n)
            order = np.argsort(keys, kind="stable")
            if n < 2 or np.all(np.diff(keys[order]) != 0):
                return order

    def shuffle(self, x: np.ndarray) -> None:
        """Shuffle ``x`` in place along its first axis."""
        x[...] = x[self._perm(len(x))]

    def choice(self, a: int | np.ndarray, size: Size = None, replace: bool = True,
               p: np.ndarray | None = None) -> Any:
        """Random sample from ``range(a)`` or the array ``a`` (numpy's semantics)."""
        pool = np.arange(a) if isinstance(a, numbers.Integral) else np.asarray(a)
        m = pool.shape[0]
        n = _count(size)
        if m == 0:
            raise ConfigError("choice from an empty population is not allowed")
        if p is not None:
            probs = np.asarray(p, dtype=np.float64)
            if probs.shape != (m,) or np.any(probs < 0) or not np.isclose(probs.sum(), 1.0):
                raise ConfigError("p is not allowed: need non-negative probabilities of the "
                                  f"population's length {m} that sum to 1")
            if not replace:
                raise ConfigError("choice(replace=False) with p is not supported")
            cdf = np.cumsum(probs)
            cdf /= cdf[-1]
            idx = np.searchsorted(cdf, self.random(n), side="right")
            idx = np.minimum(idx, m - 1)
        elif replace:
            idx = self.integers(0, m, n)
        else:
            if n > m:
                raise ConfigError(f"size={size!r} is not allowed without replacement from a "
                                  f"population of {m}")
            idx = self._perm(m)[:n]
        return _shape(pool[idx], size)


_secure: Generator | None = None
_secure_lock = threading.Lock()


def secure_rng() -> Generator:
    """The shared OS-seeded generator (created on first use)."""
    global _secure
    if _secure is None:
        with _secure_lock:
            if _secure is None:
                _secure = Generator()
    return _secure


def noise_rng(rng: Any = None) -> Generator:
    """The generator DP noise is drawn from in a protocol run: ``rng`` itself only when it
    is a seeded generator made with ``simulate_noise=True``, else the secure generator."""
    if isinstance(rng, Generator) and rng.simulate_noise:
        return rng
    return secure_rng()


def default_rng(seed: int | bytes | None = None) -> Generator:
    """A new generator: secure without a seed, deterministic with one (tests only)."""
    return Generator(seed)


#: what an ``rng=`` argument accepts: None (secure), a seed (int or bytes: a simulation) or a
#: :class:`Generator`
RngLike = Generator | int | bytes | None


def check_rng(rng: RngLike = None) -> Generator:
    """Resolve an ``rng=`` argument: None -> shared secure generator, int/bytes -> seeded."""
    if rng is None:
        return secure_rng()
    if isinstance(rng, Generator):
        return rng
    if isinstance(rng, (numbers.Integral, bytes)) and not isinstance(rng, bool):
        return Generator(rng)
    raise ConfigError(f"rng={rng!r} is not allowed: pass None (secure), a veil.random.Generator "
                      "or an integer seed (tests only); numpy generators are not accepted")
