"""The integer grid every answer of the hybrid approach travels on.

Every answer leaves its party as integers, which is what Paillier encrypts and what integer
noise needs (:func:`contribute`). A party clips its answer into ``[-bound, bound]`` (clip
counted, never silent; clipping is 1-Lipschitz per coordinate, so the sensitivity is
unchanged) and rounds ``answer * 2^b`` to integers (b = :func:`grid_bits`). Integer noise
(Skellam) is added after rounding, so its sensitivity is that of the rounded answer:
``2^b S_2 + sqrt(d)`` in L2 and ``min(2^b S_1 + d, S_2'^2)`` in L1 for real answers (each
rounding moves a coordinate by at most 1/2, twice), exactly ``2^b S`` for integer answers
(:meth:`veil.learn.queries.QueryShape.grid_sensitivity`). Real noise (Gaussian, Laplace) is
added before rounding, as in Truex et al. (AISec 2019).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil._validation import check_array, check_choice
from veil.crypto.encoding import FixedPoint
from veil.dp.distributed import NOISES, DistributedMechanism, distributed_noise
from veil.dp.sensitivity import clip_values
from veil.dp.trust import Trust
from veil.errors import DataError
from veil.learn.queries import QueryShape
from veil.random import RngLike

__all__ = ["FLOAT_NOISE_BITS", "TAIL_BITS", "contribute", "decode", "grid_bits", "noise_std",
           "query_noise", "value_limit"]

#: fractional bits of the grid that real-valued noise is rounded to (answers and noise)
FLOAT_NOISE_BITS = 16
#: a party's noise share exceeds the encoding's headroom with probability <= 2^-TAIL_BITS
TAIL_BITS = 64


def grid_bits(shape: QueryShape, noise: DistributedMechanism | None) -> int:
    """Fractional bits of the grid a party's answer (and noise) is sent on."""
    if noise is None or noise.integer:
        return shape.frac_bits
    return max(shape.frac_bits, FLOAT_NOISE_BITS)


def value_limit(shape: QueryShape, noise: DistributedMechanism | None, *,
                noisy: bool = True) -> int:
    """The largest ``|integer|`` one party sends on the grid of ``noise``: its bound, plus
    (``noisy``) its share's 2^-64 tail."""
    bits = grid_bits(shape, noise)
    limit = math.ceil(shape.bound * 2.0 ** bits) + 1
    if noise is not None and noisy:
        tail = noise.tail_bound(TAIL_BITS)
        limit += math.ceil(tail if noise.integer else tail * 2.0 ** bits)
    return limit


def query_noise(kind: str, noise_multiplier: float, shape: QueryShape, *, trust: Trust,
                delta: float) -> DistributedMechanism:
    """The distributed mechanism of ``kind`` for a query, shared among ``trust.parties``
    of which ``trust.honest`` suffice: integer noise (Skellam) on the grid's
    sensitivities, real noise on the query's own."""
    if NOISES[check_choice(kind, "noise", tuple(NOISES))].integer:
        l1, l2 = shape.grid_sensitivity(shape.frac_bits)
    else:
        l1, l2 = shape.l1, shape.l2
    return distributed_noise(kind, noise_multiplier, l1_sensitivity=l1, l2_sensitivity=l2,
                             parties=trust.parties, honest=trust.honest, delta=delta)


def contribute(shape: QueryShape, answer: Any, noise: DistributedMechanism | None,
               rng: RngLike = None, *, noisy: bool = True) -> tuple[np.ndarray, int]:
    """One party's integers for the sum, and how many values were clipped.

    The answer is clipped into ``[-bound, bound]`` and put on the grid of the query's
    ``noise`` mechanism (:class:`veil.crypto.encoding.FixedPoint` with :func:`grid_bits`
    fractional bits) with (``noisy``) this party's share of the noise: real noise before
    the rounding, integer noise after it (module docstring). A party that adds no share
    (central DP) still uses the grid. Any value beyond :func:`value_limit` (probability
    <= 2^-64 per coordinate, from the noise's tail) is clipped and counted too.
    """
    a = check_array(answer, "answer", ndim=1, allow_empty=True)
    if a.size != shape.size:
        raise DataError(f"answer has {a.size} values; the query expects {shape.size}")
    a, clipped = clip_values(a, (-shape.bound, shape.bound), name="answer") if a.size else (a, 0)
    bits = grid_bits(shape, noise)
    limit = value_limit(shape, noise, noisy=noisy)
    grid = FixedPoint(frac_bits=bits, int_bits=max(0, (limit >> bits).bit_length() + 1))
    share = noise.share(a.size, rng) if noise is not None and noisy else None
    if share is not None and not noise.integer:
        a = a + share
    cap = math.ldexp(limit, -bits)
    over = int(np.count_nonzero(np.abs(a) > cap))
    q = grid.encode(np.clip(a, -cap, cap))
    if share is not None and noise.integer:
        q = q + share
        over += int(np.count_nonzero(np.abs(q) > limit))
        q = np.clip(q, -limit, limit)
    return q.astype(np.int64), clipped + over


def decode(total: Any, shape: QueryShape, noise: DistributedMechanism | None) -> np.ndarray:
    """The real sum from the integer sum of the contributions."""
    return np.asarray(total, dtype=object).astype(np.float64) * 2.0 ** -grid_bits(shape, noise)


def noise_std(shape: QueryShape, mechanism: DistributedMechanism | None,
              copies: int) -> float:
    """Standard deviation, in the answer's units, of ``copies`` shares of ``mechanism``'s
    noise per coordinate (integer noise is on the grid of ``2^frac_bits``)."""
    if mechanism is None or copies == 0:
        return 0.0
    scale = 2.0 ** -grid_bits(shape, mechanism) if mechanism.integer else 1.0
    return math.sqrt(copies * mechanism.share_variance) * scale
