"""Exact samplers for differential-privacy noise, vectorised over veil.random's AES-CTR stream.

Why exact
---------
Mironov (2012) showed that a floating-point release ``x + b * log(U)`` leaks ``x`` through
its low-order bits: the set of doubles the sum can take depends on ``x``, so neighbouring
inputs can have disjoint output supports and no epsilon holds. veil never releases such a
sum. Every sampler here returns *integers* (an index on a grid, a count, a choice, a coin)
drawn with exactly the probabilities of the mathematical mechanism, so a release is an
exact draw of the ideal mechanism followed by post-processing, and its epsilon is the ideal
one.

How
---
Each output is a deterministic function of exact uniform reals, read lazily from the
stream: a vectorised double-precision fast path with a proven error bound decides almost
every sample, and MPFR interval arithmetic refines the rest until they are decided. The
method, its error bounds and its one floating-point assumption are in
:mod:`veil.dp.intervals`, the engine; under that assumption every sampler below draws from
its stated distribution exactly.

Samplers
--------
* :func:`rounded_laplace` / :func:`rounded_gaussian`: ``round((x + noise) / grid)`` for
  continuous Laplace / Gaussian noise, the grid a power of two. This is the continuous
  mechanism followed by rounding, sampled exactly: its privacy is exactly the continuous
  mechanism's (post-processing), whatever ``x``.
* :func:`discrete_laplace` (two-sided geometric, Ghosh, Roughgarden & Sundararajan 2009)
  and :func:`discrete_gaussian` (Canonne, Kamath & Steinke 2020, Algorithm 3).
* :func:`bernoulli_exp` (``P = exp(-x)``), :func:`bernoulli` (``P = p`` for a double p).
* :func:`noisy_argmax`: the argmax of ``coef * u_i + log(m_i) + scale * noise_i`` for
  Gumbel noise (the exponential mechanism) or Laplace noise (report-noisy-max).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from veil._validation import check_positive
from veil.dp.intervals import (
    KAPPA,
    U_MIN,
    Exact,
    Iv,
    decide_floor,
    exp_from_cells,
    floor_of,
    refine,
    solve,
)
from veil.errors import ConfigError
from veil.random import Generator, RngLike, Size, check_rng

__all__ = ["rounded_laplace", "rounded_gaussian", "discrete_laplace", "discrete_gaussian",
           "bernoulli_exp", "bernoulli", "noisy_argmax", "check_grid"]

_CHUNK = 1 << 15          # samples per vectorised block (keeps temporaries in cache)
_MAX_INDEX = 2.0 ** 52    # |value / grid| must stay below this


def check_grid(grid: float, name: str = "grid") -> float:
    """A grid step: a positive power of two (so that value / grid is exact)."""
    g = check_positive(grid, name)
    if math.frexp(g)[0] != 0.5 or g < 2.0 ** -1000 or g > 2.0 ** 1000:
        raise ConfigError(f"{name}={grid!r} is not allowed: must be a power of two in "
                          "[2^-1000, 2^1000]")
    return g


def _grid_scale(scale: float, grid: float, name: str) -> float:
    s = check_positive(scale, name) / grid  # exact: grid is a power of two
    if s > 2.0 ** 32:
        raise ConfigError(f"{name}={scale!r} is not allowed with grid={grid!r}: "
                          f"{name} / grid must be at most 2^32")
    return s


def _grid_centers(center: Any, grid: float) -> np.ndarray:
    arr = np.asarray(center, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ConfigError("center holds NaN or infinite values")
    if not np.all(np.abs(arr) < _MAX_INDEX * grid):
        raise ConfigError(f"center {float(np.max(np.abs(arr))):g} is too large for the grid "
                          f"{grid:g}: |center / grid| must be below 2^52")
    return arr


def _grid_split(center: np.ndarray, grid: float) -> tuple[np.ndarray, np.ndarray]:
    """m = floor(center / grid) and c = center / grid - m + 1/2 (in [1/2, 3/2]; in floats,
    exact up to an underflow of 2^-1074 that the fast path's bound covers)."""
    c = center / grid
    m = np.floor(c)
    c -= m
    c += 0.5
    return m, c


def _grid_offset(ctx: Exact, center: float, grid: float, m: float) -> Iv:
    """Exact enclosure of center / grid - m + 1/2."""
    return ctx.add(ctx.sub(ctx.div(ctx.point(center), ctx.point(grid)), ctx.point(m)),
                   ctx.point(0.5))


def _fast_bound(s: float) -> float:
    """The fast path's bound on |w_float - w(U)| for the grid samplers: ``2^10 kappa (s + 1)``
    (``2^-30 (s + 1)``).

    Derivation (s = scale / grid, c in [1/2, 3/2], kappa = 2^-40 the allowance for numpy's
    log and sqrt). Laplace, fast path only for U >= 2^-20: ``|E_float - E| <= 2^-63 / U +
    2^-52 + kappa E <= 2^-43 + 14 kappa``, so ``|w_float - w| <= s (2^-43 + 14 kappa) +
    2^-50``. Gaussian (polar method), fast path only for ``2^-20 <= S <= 1 - 2^-20``: u and
    v are within ``2^-64 + 2^-53 |u|`` of the exact uniforms, so ``|dS| / S <= 2^-50 +
    2^-62 / sqrt(S) = r_S``; with ``f = sqrt(-2 ln S / S)``, ``|dz| <= 2^-64 f + |z|
    (2^-50 + r_S + 4 kappa) + sqrt(2 / |ln S|) r_S <= 2^-35``, so ``|w_float - w| <=
    s 2^-35 + 2^-50``. Both are below ``2^-34 (s + 1)``; the bound used is 16 times larger.
    """
    return 2.0 ** 10 * KAPPA * (s + 1.0)


def rounded_laplace(center: Any, scale: float, grid: float, rng: RngLike = None) -> Any:
    """Exact ``K = floor((center + scale * L) / grid + 1/2)``, ``L ~ Laplace(0, 1)``.

    ``grid`` must be a power of two and ``scale / grid`` at most 2^32. Returns int64 grid
    indices of the shape of ``center`` (a numpy int64 scalar for a scalar center).
    """
    grid = check_grid(grid)
    s = _grid_scale(scale, grid, "scale")
    center = _grid_centers(center, grid)
    k = laplace_grid(center.ravel(), s, grid, check_rng(rng)).astype(np.int64)
    return k.reshape(center.shape) if center.ndim else k[0]


def laplace_grid(center: np.ndarray, s: float, grid: float, rng: Generator) -> np.ndarray:
    """:func:`rounded_laplace` on validated flat input, ``s = scale / grid``; float64 indices.

    Each 64-bit word x gives the sign (x < 0) and the 63-bit cell of U: ``|x + 1/2| =
    R + 1/2`` with R uniform on [0, 2^63), so ``U = |x + 1/2| 2^-63`` at the cell's
    midpoint and ``K = m + floor(c + sign * s * (-ln U))``.
    """
    bound = _fast_bound(s)
    out = np.empty(center.size)
    for start in range(0, center.size, _CHUNK):
        sl = slice(start, min(start + _CHUNK, center.size))
        m, c = _grid_split(center[sl], grid)
        words = rng.random_raw(sl.stop - sl.start).view(np.int64)
        y = words.astype(np.float64)
        y += 0.5
        u = np.abs(y)
        u *= 2.0 ** -63
        w = np.log(u)
        np.negative(w, out=w)                 # E = -ln U
        valid = u >= U_MIN
        np.copysign(w, y, out=w)              # a random sign: S E ~ Laplace(0, 1)
        w *= s
        w += c
        j, ok = decide_floor(w, bound, valid)
        for i in np.flatnonzero(~ok):
            x = int(words[i])
            j[i] = _slow_laplace(float(center[sl.start + i]), grid, float(m[i]),
                                 -s if x < 0 else s, x if x >= 0 else -x - 1, rng)
        np.add(m, j, out=out[sl])
    return out


def _slow_laplace(center: float, grid: float, m: float, k: float, a: int,
                  rng: Generator) -> int:
    def decide(ctx: Exact, cells: list[tuple[int, int]]) -> int | None:
        e = ctx.neg_log(ctx.cell(*cells[0]))
        return floor_of(ctx.add(_grid_offset(ctx, center, grid, m),
                                 ctx.mul(ctx.point(k), e)))
    return solve(decide, [(a, 63)], rng)


def rounded_gaussian(center: Any, sigma: float, grid: float, rng: RngLike = None) -> Any:
    """Exact ``K = floor((center + sigma * Z) / grid + 1/2)``, ``Z ~ N(0, 1)``.

    ``grid`` must be a power of two and ``sigma / grid`` at most 2^32. Z comes from
    Marsaglia & Bray's (1964) polar method: a point (U, V) uniform in the unit disc (exact
    uniforms on (-1, 1), accepted when ``S = U^2 + V^2 < 1``, decided exactly) gives two
    independent standard normals ``(U, V) sqrt(-2 ln S / S)``.
    """
    grid = check_grid(grid)
    s = _grid_scale(sigma, grid, "sigma")
    center = _grid_centers(center, grid)
    k = gaussian_grid(center.ravel(), s, grid, check_rng(rng)).astype(np.int64)
    return k.reshape(center.shape) if center.ndim else k[0]


def _disc_points(pairs: int, rng: Generator) -> tuple[Any, ...]:
    """The first ``pairs`` points of the stream that fall in the unit disc.

    Each int64 word x is the cell [x, x+1] 2^-63 of a uniform on (-1, 1) (midpoint
    ``(x + 1/2) 2^-63``). ``S < 1`` is decided in floats when S is kappa = 2^-40 away from 1
    (its error is below 2^-49) and exactly otherwise. Returns the words, the refined cells of
    the exactly decided points (by position), and u, v, S at the midpoints.
    """
    xs, ys, us, vs, ss = [], [], [], [], []
    exact: dict[int, list[tuple[int, int]]] = {}
    have = 0
    while have < pairs:
        q = int((pairs - have) * 1.28) + 64
        words = rng.random_raw(2 * q).view(np.int64)
        u = words[:q].astype(np.float64)
        u += 0.5
        u *= 2.0 ** -63
        v = words[q:].astype(np.float64)
        v += 0.5
        v *= 2.0 ** -63
        sq = u * u
        sq += v * v
        inside = sq < 1.0 - KAPPA
        cells: dict[int, list[tuple[int, int]]] = {}
        for i in np.flatnonzero(~inside & (sq <= 1.0 + KAPPA)):
            cells[int(i)], inside[i] = _slow_inside(int(words[i]), int(words[q + i]), rng)
        take = np.flatnonzero(inside)[:pairs - have]
        for position in np.flatnonzero(np.isin(take, list(cells))):
            exact[have + int(position)] = cells[int(take[position])]
        xs.append(words[:q][take])
        ys.append(words[q:][take])
        us.append(u[take])
        vs.append(v[take])
        ss.append(sq[take])
        have += take.size
    return (np.concatenate(xs), np.concatenate(ys), exact, np.concatenate(us),
            np.concatenate(vs), np.concatenate(ss))


def _disc_square(ctx: Exact, cells: list[tuple[int, int]]) -> Iv:
    return ctx.add(ctx.square(ctx.cell(*cells[0])), ctx.square(ctx.cell(*cells[1])))


def _slow_inside(x: int, y: int, rng: Generator) -> tuple[list[tuple[int, int]], bool]:
    """Whether U^2 + V^2 < 1, refining the two cells until decided; returns the cells."""
    cells = [(x, 63), (y, 63)]
    while True:
        sq = _disc_square(Exact(max(b for _, b in cells) + 96), cells)
        if sq[1] < 1 or sq[0] >= 1:
            return cells, bool(sq[1] < 1)
        cells = [refine(a, bits, rng) for a, bits in cells]


def gaussian_grid(center: np.ndarray, s: float, grid: float, rng: Generator) -> np.ndarray:
    """:func:`rounded_gaussian` on validated flat input, ``s = sigma / grid``; float64
    indices. Fast path only where ``2^-20 <= S <= 1 - 2^-20`` (see _fast_bound)."""
    bound = _fast_bound(s)
    out = np.empty(center.size)
    for start in range(0, center.size, 2 * _CHUNK):
        stop = min(start + 2 * _CHUNK, center.size)
        n = stop - start
        h = (n + 1) // 2
        m, c = _grid_split(center[start:stop], grid)
        xs, ys, exact, u, v, sq = _disc_points(h, rng)
        valid = (sq >= 2.0 ** -20) & (sq <= 1.0 - 2.0 ** -20)
        f = np.log(sq)
        f *= -2.0
        f /= sq
        np.sqrt(f, out=f)                       # sqrt(-2 ln S / S)
        w = np.empty(2 * h)
        np.multiply(u, f, out=w[:h])
        np.multiply(v, f, out=w[h:])
        w = w[:n]
        w *= s
        w += c
        ok = np.empty(2 * h, dtype=bool)
        ok[:h] = valid
        ok[h:] = valid
        for i in exact:
            ok[i] = ok[i + h] = False
        j, ok = decide_floor(w, bound, ok[:n])
        for pair in np.unique(np.flatnonzero(~ok) % h):
            members = [i for i in (pair, pair + h) if i < n and not ok[i]]
            cells = exact.get(int(pair)) or [(int(xs[pair]), 63), (int(ys[pair]), 63)]
            j[members] = _slow_gaussian(cells, [int(i >= h) for i in members],
                                        [float(center[start + i]) for i in members], grid,
                                        [float(m[i]) for i in members], s, rng)
        np.add(m, j, out=out[start:stop])
    return out


def _slow_gaussian(cells: list[tuple[int, int]], coords: list[int], centers: list[float],
                   grid: float, ms: list[float], s: float, rng: Generator) -> list[int]:
    """Grid indices of the normals ``(U, V) sqrt(-2 ln S / S)`` (coordinate 0 or 1) of a
    point of the disc, refining its cells until every requested index is decided."""
    def decide(ctx: Exact, cells: list[tuple[int, int]]) -> list[int] | None:
        sq = _disc_square(ctx, cells)
        if not sq[0] > 0:
            return None
        log_sq = ctx.log(sq)
        f = ctx.sqrt(ctx.div((-2 * log_sq[1], -2 * log_sq[0]), sq))
        found = []
        for coord, center, m in zip(coords, centers, ms):
            z = ctx.mul(ctx.cell(*cells[coord]), f)
            j = floor_of(ctx.add(_grid_offset(ctx, center, grid, m),
                                  ctx.mul(ctx.point(s), z)))
            if j is None:
                return None
            found.append(j)
        return found
    return solve(decide, cells, rng)


# -- discrete samplers -------------------------------------------------------------

def _size_and_shape(size: Size) -> tuple[int, Any]:
    if size is None:
        return 1, None
    n = int(np.prod(size))
    if n < 0 or (np.ndim(size) and min(size, default=0) < 0):
        raise ConfigError(f"size={size!r} is not allowed: must be >= 0")
    return n, size


def _shaped(values: np.ndarray, shape: Any) -> Any:
    return values[0] if shape is None else values.reshape(shape)


def _geometric(scale: float, cells: np.ndarray, rng: Generator) -> np.ndarray:
    """floor(scale * E) with E = -ln U, U in the 63-bit cells: P(G >= g) = exp(-g / scale)."""
    e, e_err, valid = exp_from_cells(cells, 63)
    w = scale * e
    bound = scale * e_err + KAPPA
    g = np.floor(w - bound)
    ok = valid & (g == np.floor(w + bound))
    for i in np.flatnonzero(~ok):
        def decide(ctx: Exact, cell: list[tuple[int, int]]) -> int | None:
            return floor_of(ctx.mul(ctx.point(scale), ctx.neg_log(ctx.cell(*cell[0]))))
        g[i] = solve(decide, [(int(cells[i]), 63)], rng)
    return g.astype(np.int64)


def discrete_laplace(scale: float, size: Size = None, rng: RngLike = None) -> Any:
    """Integers with ``P(k) = tanh(1 / (2 scale)) exp(-|k| / scale)`` (two-sided geometric).

    A magnitude ``G = floor(scale * E)`` (geometric: ``P(G >= g) = exp(-g/scale)``) and a
    sign; the draw (negative sign, G = 0) is rejected and redrawn, which leaves
    ``P(k) proportional to exp(-|k| / scale)`` on all integers.
    """
    rng = check_rng(rng)
    scale = check_positive(scale, "scale")
    if scale > 2.0 ** 40:
        raise ConfigError(f"scale={scale!r} is not allowed: must be at most 2^40")
    n, shape = _size_and_shape(size)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        words = rng.random_raw(need + need // 2 + 8)
        negative = (words & np.uint64(1)).astype(bool)
        g = _geometric(scale, words >> np.uint64(1), rng)
        keep = ~(negative & (g == 0))
        values = np.where(negative, -g, g)[keep][:need]
        out[filled:filled + values.size] = values
        filled += values.size
    return _shaped(out, shape)


def bernoulli_exp(x: Any, rng: RngLike = None) -> Any:
    """Exact coins with ``P(True) = exp(-x)`` for doubles ``x >= 0`` (True iff E > x for an
    exponential E)."""
    rng = check_rng(rng)
    x = np.asarray(x, dtype=np.float64)
    if not np.all((x >= 0) & np.isfinite(x)):
        raise ConfigError("x is not allowed: bernoulli_exp needs finite values >= 0")
    flat = x.ravel()
    coins = _exp_coins(flat, np.zeros(flat.size), lambda ctx, i: ctx.point(float(flat[i])), rng)
    return coins.reshape(x.shape) if x.ndim else bool(coins[0])


def _exp_coins(x_float: np.ndarray, x_err: np.ndarray, exact_x: Callable[[Exact, int], Iv],
               rng: Generator) -> np.ndarray:
    """True with probability exp(-x_i): ``x_float`` is within ``x_err`` of the exact x_i,
    which ``exact_x(ctx, i)`` encloses for the slow path."""
    cells = rng.random_raw(x_float.size)
    e, e_err, valid = exp_from_cells(cells, 64)
    margin = e_err + x_err
    accept = e - margin > x_float
    ok = valid & (accept | (e + margin < x_float))
    for i in np.flatnonzero(~ok):
        def decide(ctx: Exact, cell: list[tuple[int, int]], i: int = i) -> bool | None:
            e_iv = ctx.neg_log(ctx.cell(*cell[0]))
            x_iv = exact_x(ctx, int(i))
            if e_iv[0] > x_iv[1]:
                return True
            if e_iv[1] < x_iv[0]:
                return False
            return None
        accept[i] = solve(decide, [(int(cells[i]), 64)], rng)
    return accept


def discrete_gaussian(sigma: float, size: Size = None, rng: RngLike = None) -> Any:
    """Integers with ``P(k) proportional to exp(-k^2 / (2 sigma^2))`` (the discrete Gaussian).

    Canonne, Kamath & Steinke (2020), Algorithm 3: with ``t = floor(sigma) + 1``, draw
    ``Y`` from the discrete Laplace of scale t and accept it with probability
    ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``; about 1.3 proposals per sample.
    """
    rng = check_rng(rng)
    sigma = check_positive(sigma, "sigma")
    if sigma > 2.0 ** 40:
        raise ConfigError(f"sigma={sigma!r} is not allowed: must be at most 2^40")
    n, shape = _size_and_shape(size)
    t = math.floor(sigma) + 1
    q = sigma * sigma / t
    two_var = 2.0 * sigma * sigma
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        need = n - filled
        y = discrete_laplace(t, need + need // 2 + 8, rng)
        a = np.abs(y).astype(np.float64)
        x_float = (a - q) ** 2 / two_var
        # a handful of rounded operations: 2^-40 of the largest magnitude is ample
        x_err = KAPPA * ((a + q) ** 2 / two_var + 1.0)

        def exact_x(ctx: Exact, i: int, a: np.ndarray = a) -> Iv:
            var = ctx.square(ctx.point(sigma))
            d = ctx.sub(ctx.point(float(a[i])), ctx.div(var, ctx.point(t)))
            return ctx.div(ctx.square(d), ctx.mul(ctx.point(2), var))

        keep = _exp_coins(x_float, x_err, exact_x, rng)
        values = y[keep][:need]
        out[filled:filled + values.size] = values
        filled += values.size
    return _shaped(out, shape)


def bernoulli(p: float, size: Size = None, rng: RngLike = None) -> Any:
    """Exact coins with ``P(True) = p`` for a double ``p`` in [0, 1].

    A double is a dyadic rational: ``U < p`` is decided on the first 64 bits of ``U``
    except when they equal those of p (probability 2^-64), and then on further bits.
    """
    rng = check_rng(rng)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ConfigError(f"p={p!r} is not allowed: must be a real number in [0, 1]")
    n, shape = _size_and_shape(size)
    if p in (0.0, 1.0):
        return _shaped(np.full(n, p == 1.0), shape)
    scaled = math.ldexp(float(p), 64)
    head = math.floor(scaled)
    words = rng.random_raw(n)
    out = words < np.uint64(head)
    for i in np.flatnonzero(words == np.uint64(head)):
        out[i] = bool(bernoulli(scaled - head, rng=rng))
    return _shaped(out, shape)


# -- selection ---------------------------------------------------------------------

def noisy_argmax(utilities: Any, *, coef: float = 1.0, multiplicities: Any = None,
                 noise: str = "gumbel", scale: float = 1.0, rng: RngLike = None) -> int:
    """Exact ``argmax_i coef * u_i + log(m_i) + scale * N_i`` for i.i.d. noise N_i.

    ``noise="gumbel"``: ``N = -ln(-ln U)``; with scale 1 the winner is i with probability
    ``m_i exp(coef u_i) / sum_j m_j exp(coef u_j)`` (the Gumbel-max trick, i.e. the
    exponential mechanism). ``noise="laplace"``: Laplace(0, 1) noise (report-noisy-max).
    ``multiplicities`` (default 1) are non-negative weights; a zero weight never wins.
    Candidates whose value bounds overlap the leader's are settled in the slow path.
    """
    rng = check_rng(rng)
    u = np.asarray(utilities, dtype=np.float64).ravel()
    mult = (np.ones(u.size) if multiplicities is None
            else np.asarray(multiplicities, dtype=np.float64).ravel())
    live = np.flatnonzero(mult > 0)
    if live.size == 0:
        raise ConfigError("noisy_argmax needs at least one candidate with weight > 0")
    u, mult = u[live], mult[live]
    base = coef * u + np.log(mult)
    base_err = KAPPA * (np.abs(coef * u) + np.abs(np.log(mult)) + 1.0)
    words = rng.random_raw(live.size)
    if noise == "gumbel":
        cells, bits = words, 64
        e, e_err, valid = exp_from_cells(cells, bits)
        valid &= e >= U_MIN
        t = -np.log(np.where(valid, e, 1.0))
        t_err = 2.0 * e_err / np.where(valid, e, 1.0) + KAPPA * (np.abs(t) + 1.0)
        negative = None
    elif noise == "laplace":
        negative = (words & np.uint64(1)).astype(bool)
        cells, bits = words >> np.uint64(1), 63
        e, e_err, valid = exp_from_cells(cells, bits)
        t = np.where(negative, -e, e)
        t_err = e_err
    else:
        raise ConfigError(f"noise={noise!r} is not allowed: choose 'gumbel' or 'laplace'")
    v = base + scale * t
    lo = v - (base_err + scale * t_err + KAPPA * np.abs(v))
    hi = v + (base_err + scale * t_err + KAPPA * np.abs(v))

    def enclose(ctx: Exact, i: int, cell: tuple[int, int]) -> Iv:
        b = ctx.add(ctx.mul(ctx.point(coef), ctx.point(float(u[i]))),
                    ctx.log(ctx.point(float(mult[i]))))
        e_iv = ctx.neg_log(ctx.cell(*cell))
        if negative is None:
            noise_iv = ctx.neg_log(e_iv)
        else:
            noise_iv = (-e_iv[1], -e_iv[0]) if negative[i] else e_iv
        return ctx.add(b, ctx.mul(ctx.point(scale), noise_iv))

    cell_of = {}
    for i in np.flatnonzero(~valid):  # unbounded derivative: bound these exactly first
        cell_of[int(i)] = (int(cells[i]), bits)
        lo_i, hi_i = enclose(Exact(bits + 96), int(i), cell_of[int(i)])
        lo[i] = math.nextafter(float(lo_i), -math.inf)
        hi[i] = math.nextafter(float(hi_i), math.inf)
    contenders = np.flatnonzero(hi >= lo.max())
    if contenders.size == 1:
        return int(live[contenders[0]])
    race = {int(i): cell_of.get(int(i), (int(cells[i]), bits)) for i in contenders}
    while True:
        ctx = Exact(max(b for _, b in race.values()) + 96)
        bounds = {i: enclose(ctx, i, cell) for i, cell in race.items()}
        best = max(b[0] for b in bounds.values())
        race = {i: race[i] for i, b in bounds.items() if b[1] >= best}
        if len(race) == 1:
            return int(live[next(iter(race))])
        race = {i: refine(*cell, rng) for i, cell in race.items()}
