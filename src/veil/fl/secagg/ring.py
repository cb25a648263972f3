"""The encoding of secure aggregation: a client's update as a vector of Z_2^k.

Client k's contribution is the vector ``x = [w delta (d entries), w, extras...]``. Each of
the first d entries is clipped to ``[-R, R]`` (R = the strategy's L2 bound when it has one,
e.g. DP-FedAvg's clip norm, so nothing is ever clipped; otherwise ``clip_range``, and the
fraction of clipped entries is summed securely and reported) and rounded to the nearest
multiple of ``1/s``; the scalars (all in [-1, 1]) use the scale ``s_e``. With m sampled
clients the scales are chosen so that ``m R s`` (and ``m s_e``) plus the noise headroom
stay below ``2^(k-1)``: the centered sum of the survivors never wraps around, and
decoding is exact up to rounding. **Stated error**: each entry of the decoded sum
``sum_k w_k delta_k`` is within ``|U3| / (2 s)`` of the true sum of the clipped values
(|U3| = number of survivors), reported per round as ``quantization_error``.

:class:`Plan` holds a round's encoding and thresholds (the server sends its public part to
every client at setup, :func:`read_plan` validates it there); :func:`encode_update` and
:func:`decode_sum` are the two ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_choice
from veil.dp.samplers import discrete_gaussian
from veil.errors import ConfigError, ProtocolError
from veil.fl.messages import Message
from veil.random import Generator

__all__ = ["CLIPPED", "MAX_LEVELS", "PRGS", "WEIGHT", "Plan", "decode_sum", "encode_update",
           "read_plan", "reduce_ring", "ring_dtype"]

#: the finest quantization step is 2^-30 of the clipping range
MAX_LEVELS = 2.0 ** 30
#: the extra scalar every update carries: its weight
WEIGHT = "weight"
#: the extra scalar that counts clipped entries (strategies without an L2 bound)
CLIPPED = "clipped"
#: the stream ciphers a mask may be expanded with (:func:`veil.fl.secagg.masks.prg`)
PRGS = ("aes-ctr", "chacha20")


def ring_dtype(bits: int) -> np.dtype:
    for width in (8, 16, 32, 64):
        if bits <= width:
            return np.dtype(f"uint{width}")
    raise ConfigError(f"bits={bits} is not allowed: at most 64")


def reduce_ring(values: np.ndarray, bits: int) -> np.ndarray:
    """Reduce ring-dtype values modulo 2^bits in place (the dtype already wraps at its
    width, a multiple of bits' power of two)."""
    if bits < 8 * values.dtype.itemsize:
        values &= values.dtype.type((1 << bits) - 1)
    return values


@dataclass(frozen=True)
class Plan:
    """The encoding and thresholds of one round (sent to every client at setup)."""

    bits: int
    degree: int
    threshold: int
    min_survivors: int
    clip_range: float
    scale: float
    extras: tuple[str, ...]
    extras_scale: int
    noise_std: float = 0.0
    extras_noise_std: dict[str, float] = field(default_factory=dict)
    rho: float | None = None
    prg: str = "aes-ctr"

    @property
    def count_clipped(self) -> bool:
        return CLIPPED in self.extras

    def public(self) -> dict[str, Any]:
        return {"bits": self.bits, "threshold": self.threshold, "clip_range": self.clip_range,
                "scale": self.scale, "extras": list(self.extras),
                "extras_scale": self.extras_scale, "noise_std": self.noise_std,
                "extras_noise_std": dict(self.extras_noise_std), "prg": self.prg}


def read_plan(msg: Message, neighbours: list[int]) -> Plan:
    """The plan as a client receives it, validated (ProtocolError if inconsistent)."""
    raw = msg.get("secagg", dict)
    sub = Message(msg.protocol, msg.round, msg.stage, msg.sender, msg.recipient, raw)
    bits = sub.integer("bits", low=2, high=64)
    extras = sub.get("extras", list)
    if not extras or extras[0] != WEIGHT or not all(isinstance(e, str) for e in extras):
        raise ProtocolError(f"round {msg.round}: setup field 'extras' is {extras!r}")
    noise = sub.get("extras_noise_std", dict)
    if not all(k in extras and isinstance(v, float) and v >= 0 for k, v in noise.items()):
        raise ProtocolError(f"round {msg.round}: setup field 'extras_noise_std' is {noise!r}")
    return Plan(bits=bits, degree=len(neighbours),
                 threshold=sub.integer("threshold", low=1, high=max(1, len(neighbours))),
                 min_survivors=2, clip_range=sub.number("clip_range", low=1e-300),
                 scale=sub.number("scale", low=1e-300), extras=tuple(extras),
                 extras_scale=sub.integer("extras_scale", low=2),
                 noise_std=sub.number("noise_std", low=0.0), extras_noise_std=dict(noise),
                 prg=check_choice(sub.get("prg", str), "prg", PRGS))


def encode_update(delta: np.ndarray, weight: float, extras: Mapping[str, float], plan: Plan,
            rng: Generator) -> np.ndarray:
    """The client's vector in the ring: quantized, clipped, noised (see module docstring)."""
    x = weight * delta
    clipped = np.abs(x) > plan.clip_range
    values = np.rint(np.clip(x, -plan.clip_range, plan.clip_range) * plan.scale)
    scalars = {**extras, WEIGHT: weight}
    if plan.count_clipped:
        scalars[CLIPPED] = float(clipped.mean()) if clipped.size else 0.0
    tail = np.rint(np.clip([scalars[k] for k in plan.extras], -1.0, 1.0) * plan.extras_scale)
    encoded = np.concatenate([values, tail]).astype(np.int64)
    if plan.noise_std > 0:
        encoded[:delta.size] += discrete_gaussian(plan.noise_std, delta.size, rng)
    for k, std in plan.extras_noise_std.items():
        if std > 0:
            encoded[delta.size + plan.extras.index(k)] += int(discrete_gaussian(std, rng=rng))
    dtype = ring_dtype(plan.bits)
    ring = encoded.view(np.uint64) & np.uint64((1 << plan.bits) - 1)
    return ring.astype(dtype)


def decode_sum(total: np.ndarray, d: int, plan: Plan) -> tuple[np.ndarray, dict[str, float]]:
    """Centered lift of the ring sum, rescaled: (sum of w delta, sums of the scalars)."""
    v = total.astype(np.uint64).astype(np.int64)
    if plan.bits < 64:
        half = 1 << (plan.bits - 1)
        v = np.where(v >= half, v - (1 << plan.bits), v)
    return v[:d] / plan.scale, {k: float(v[d + i]) / plan.extras_scale
                                for i, k in enumerate(plan.extras)}
