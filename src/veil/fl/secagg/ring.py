"""The encoding of secure aggregation: a client's update as a vector of Z_2^k.

Client k's contribution is the vector ``x = [w delta (d entries), w, extras...]``. Each of
the first d entries is clipped to ``[-R, R]`` (R = the strategy's L2 bound when it has one,
e.g. DP-FedAvg's clip norm, so nothing is ever clipped; otherwise ``clip_range``, and the
fraction of clipped entries is summed securely and reported) and rounded to the nearest
multiple of ``1/s``; the scalars (all in [-1, 1]) use the even integer scale ``s_e``.
**No wrap-around** (the bound :meth:`veil.fl.strategies.SecAgg.plan` enforces): an entry
``|x| <= R`` encodes to ``|rint(x s)| <= R s + 1/2``, so with m sampled clients the sum of
the survivors' entries has absolute value at most ``m (R s + 1/2)``, and the scale is
chosen with ``m (R s + 1/2) + H <= 2^(k-1) - 1`` (H: the noise headroom, 4 sqrt(d) z plus
8 standard deviations); the scalars are exact integers, ``|sum| <= m s_e + H``. The
centered lift of the ring sum is therefore the integer sum itself: decoding is exact up
to rounding, even with every client at +R or -R. **Stated error**: each entry of the decoded sum
``sum_k w_k delta_k`` is within ``|U3| / (2 s)`` of the true sum of the clipped values
(|U3| = number of survivors), reported per round as ``quantization_error``.

:class:`Plan` holds a round's encoding and thresholds (the server sends its public part to
every client at setup, each client checks it against its own with :func:`check_plan`);
:func:`encode_update` and :func:`decode_sum` are the two ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from veil.dp.samplers import discrete_gaussian
from veil.errors import ConfigError, ProtocolError
from veil.fl.messages import Message
from veil.random import Generator

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["CLIPPED", "MAX_LEVELS", "PRGS", "WEIGHT", "Plan", "decode_sum", "encode_update",
           "check_plan", "reduce_ring", "ring_dtype"]

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

    @property
    def event(self) -> dp_accounting.DpEvent | None:
        """The round's cost with distributed noise, ``ZCDpEvent(rho)`` (None without)."""
        import dp_accounting  # on use: a node's ClientApp process imports this module

        return None if self.rho is None else dp_accounting.ZCDpEvent(self.rho)

    def public(self) -> dict[str, Any]:
        return {"bits": self.bits, "threshold": self.threshold, "clip_range": self.clip_range,
                "scale": self.scale, "extras": list(self.extras),
                "extras_scale": self.extras_scale, "noise_std": self.noise_std,
                "extras_noise_std": dict(self.extras_noise_std), "prg": self.prg}


def check_plan(msg: Message, own: Plan, neighbours: list[int]) -> Plan:
    """A client's check of the server's announced plan against its ``own`` (computed from
    its own strategy configuration): every field must agree, and the threshold must exceed
    half the neighbours (Bonawitz et al. 2017: otherwise a server can collect a client's
    self-mask seed and its mask key from two disjoint sets of holders). ProtocolError
    naming the field if not."""
    raw = msg.get("secagg", dict)
    announced = own.public()
    if set(raw) != set(announced):
        raise ProtocolError(f"round {msg.round}: the setup plan has fields {sorted(raw)}; "
                            f"expected {sorted(announced)}")
    for name, mine in announced.items():
        if raw[name] != mine:
            raise ProtocolError(f"round {msg.round}: the server's plan has {name}="
                                f"{raw[name]!r}; this client's own plan has {mine!r}: refused")
    if len(neighbours) != own.degree:
        raise ProtocolError(f"round {msg.round}: {len(neighbours)} neighbours; this client's "
                            f"own plan has degree {own.degree}: refused")
    if 2 * own.threshold <= own.degree:
        raise ProtocolError(f"round {msg.round}: threshold {own.threshold} of {own.degree} "
                            "neighbours is not above half: refused")
    return own


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
