"""Secure aggregation: SecAgg (Bonawitz et al., CCS 2017) on the SecAgg+ neighbour graph
(Bell, Bonawitz, Gascon, Lepoint & Raykova, CCS 2020). The server learns the sum of the
surviving clients' updates and nothing else about any single update.

Encoding (the ring Z_2^k)
-------------------------
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

Protocol (four stages; U1 >= U2 >= U3 >= U4 are the clients still answering)
------------------------------------------------------------------------------
* **setup**: the server draws the neighbour graph (a randomly relabelled Harary graph of
  even degree, Bell et al.'s SecAgg+; the complete graph = original SecAgg) and sends each
  client its neighbours and the encoding. Client i draws two X25519 key pairs
  ``(c_i, c_i^pk)`` (to encrypt shares) and ``(s_i, s_i^pk)`` (to agree on masks) and sends
  the public keys.
* **share_keys**: the server sends i the public keys of its neighbours in U1. Client i
  draws a self-mask seed ``b_i`` (32 bytes), Shamir-shares ``s_i`` and ``b_i`` t-of-|N1(i)|
  among those neighbours (:func:`veil.crypto.sharing.split_bytes`) and sends neighbour j
  its two shares encrypted with AES-256-GCM under ``HKDF(X25519(c_i, c_j^pk), i -> j)``.
* **masked_input**: the server forwards to i the shares sent to it (from U2) and the
  global model. Client i trains, encodes ``x_i`` and sends

      y_i = x_i + PRG(b_i) + sum_{j in U2 and N(i)} (+1 if i < j else -1) PRG(s_ij)  (mod 2^k)

  where ``s_ij = HKDF(X25519(s_i, s_j^pk))`` (both ends agree) and PRG expands a 32-byte seed
  with AES-256-CTR (or ChaCha20). Every y_i is uniform to the server.
* **unmask**: the server tells each survivor in U3 which of its neighbours survived (U3)
  and which dropped after sharing (U2 - U3). A client refuses to reveal both secrets of
  one neighbour; it returns its shares of ``b_j`` for survivors and of ``s_j`` for the
  dropped. The server reconstructs each ``b_j`` (j in U3) and each ``s_j`` (j dropped) from
  at least t shares, subtracts the self-masks and the dropped clients' pairwise masks, and
  obtains ``sum_{i in U3} x_i mod 2^k``. Pairwise masks between survivors cancel.

A round aborts (ProtocolError, global model unchanged) when fewer than ``min_survivors``
clients remain at any stage, or when a secret cannot be reconstructed from t shares.
Threat model: honest-but-curious server and clients (Bonawitz et al.'s semi-honest
setting; no signatures); the server colluding with fewer than t neighbours of a client
learns nothing about its update beyond the sum. Shares are checked for consistency
(:func:`veil.crypto.sharing.combine_bytes` rejects a share off the polynomial).

Distributed DP (with ``DPFedAvg(noise="distributed")``)
-------------------------------------------------------
Each client adds discrete Gaussian noise N_Z(0, sigma_c^2) (Canonne, Kamath & Steinke 2020;
:func:`veil.dp.samplers.discrete_gaussian`) to its encoded update before masking, with
``sigma_c = z (s C + sqrt(d)/2) / sqrt(t)``, t = ``min_survivors``: the rounded update has
L2 norm at most ``s C + sqrt(d)/2`` (rounding moves each entry by at most 1/2), so the sum
of any t clients' noise has multiplier z. The sum of t discrete Gaussians is not a
discrete Gaussian; Kairouz, Liu & Steinke (ICML 2021, Proposition 14) bound its Renyi DP
by ``alpha/2 (Delta_2/(sqrt(t) sigma_c) + tau sqrt(d))^2`` with
``tau = 10 sum_{k=1}^{t-1} exp(-2 pi^2 sigma_c^2 k/(k+1))``: concentrated DP with that rho,
charged as a ``ZCDpEvent`` per round (composed exactly by the RDP accountant; the PLD
accountant falls back to the same RDP bound), without claiming amplification by
sampling. The guarantee holds against the server for the content of each client's data
(a client's update replaced by zero); which clients took part is visible to the server.
The modular reduction is post-processing of the exact integer sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dp_accounting
import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from veil._validation import check_choice, check_int, check_positive, check_probability
from veil.crypto.sharing import ShamirShare, combine_bytes, split_bytes
from veil.dp.samplers import discrete_gaussian
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.fl.messages import Message, decode, encode
from veil.fl.protocol import Aggregate, ClientProtocol, RoundResult, ServerRound
from veil.fl.strategies.base import Strategy, StrategyWrapper
from veil.fl.trainer import LocalTrainer
from veil.random import Generator

__all__ = ["SecAgg", "SecAggServer", "SecAggClient"]

_KEY = 32
_PRGS = ("aes-ctr", "chacha20")
_MAX_LEVELS = 2.0 ** 30
_WEIGHT = "weight"
_CLIPPED = "clipped"


# -- primitives ---------------------------------------------------------------------------
def _public_key(secret: bytes) -> bytes:
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


def _agree(secret: bytes, peer_public: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 of the X25519 shared secret, bound to ``info``."""
    try:
        shared = X25519PrivateKey.from_private_bytes(secret).exchange(
            X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:  # a low-order public key gives the all-zero secret
        raise ProtocolError(f"key agreement failed: {exc}") from None
    return HKDF(hashes.SHA256(), _KEY, salt=None, info=info).derive(shared)


def _mask_seed(round: int, i: int, j: int) -> bytes:
    lo, hi = min(i, j), max(i, j)
    return b"veil secagg mask|%d|%d|%d" % (round, lo, hi)


def _channel(round: int, sender: int, recipient: int) -> bytes:
    return b"veil secagg share|%d|%d->%d" % (round, sender, recipient)


def _ring_dtype(bits: int) -> np.dtype:
    for width in (8, 16, 32, 64):
        if bits <= width:
            return np.dtype(f"uint{width}")
    raise ConfigError(f"bits={bits} is not allowed: at most 64")


def _reduce(values: np.ndarray, bits: int) -> np.ndarray:
    """Reduce ring-dtype values modulo 2^bits in place (the dtype already wraps at its
    width, a multiple of bits' power of two)."""
    if bits < 8 * values.dtype.itemsize:
        values &= values.dtype.type((1 << bits) - 1)
    return values


def _prg(seed: bytes, n: int, bits: int, algorithm: str) -> np.ndarray:
    """n uniform elements of Z_2^bits expanded from a 32-byte seed (as the ring dtype)."""
    dtype = _ring_dtype(bits)
    if algorithm == "aes-ctr":
        cipher = Cipher(algorithms.AES(seed), modes.CTR(bytes(16)))
    else:
        cipher = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None)
    stream = cipher.encryptor().update(bytes(n * dtype.itemsize))
    return _reduce(np.frombuffer(stream, dtype=dtype.newbyteorder("<")).astype(dtype), bits)


def _tau(sigma: float, t: int) -> float:
    """Kairouz et al. (2021)'s tau for the sum of t discrete Gaussians of scale sigma."""
    return 10.0 * sum(math.exp(-2.0 * math.pi ** 2 * sigma ** 2 * k / (k + 1))
                      for k in range(1, t))


# -- the round's public parameters -------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
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
        return _CLIPPED in self.extras

    def public(self) -> dict[str, Any]:
        return {"bits": self.bits, "threshold": self.threshold, "clip_range": self.clip_range,
                "scale": self.scale, "extras": list(self.extras),
                "extras_scale": self.extras_scale, "noise_std": self.noise_std,
                "extras_noise_std": dict(self.extras_noise_std), "prg": self.prg}


def _read_plan(msg: Message, neighbours: list[int]) -> _Plan:
    """The plan as a client receives it, validated (ProtocolError if inconsistent)."""
    raw = msg.get("secagg", dict)
    sub = Message(msg.protocol, msg.round, msg.stage, msg.sender, msg.recipient, raw)
    bits = sub.integer("bits", low=2, high=64)
    extras = sub.get("extras", list)
    if not extras or extras[0] != _WEIGHT or not all(isinstance(e, str) for e in extras):
        raise ProtocolError(f"round {msg.round}: setup field 'extras' is {extras!r}")
    noise = sub.get("extras_noise_std", dict)
    if not all(k in extras and isinstance(v, float) and v >= 0 for k, v in noise.items()):
        raise ProtocolError(f"round {msg.round}: setup field 'extras_noise_std' is {noise!r}")
    return _Plan(bits=bits, degree=len(neighbours),
                 threshold=sub.integer("threshold", low=1, high=max(1, len(neighbours))),
                 min_survivors=2, clip_range=sub.number("clip_range", low=1e-300),
                 scale=sub.number("scale", low=1e-300), extras=tuple(extras),
                 extras_scale=sub.integer("extras_scale", low=2),
                 noise_std=sub.number("noise_std", low=0.0), extras_noise_std=dict(noise),
                 prg=check_choice(sub.get("prg", str), "prg", _PRGS))


def _harary(clients: Sequence[int], degree: int, rng: Generator) -> dict[int, tuple[int, ...]]:
    """Neighbours in a Harary graph of even ``degree`` on a random ordering of the clients
    (the complete graph when degree >= m - 1)."""
    m = len(clients)
    if degree >= m - 1:
        return {c: tuple(d for d in clients if d != c) for c in clients}
    order = [int(c) for c in rng.permutation(np.asarray(clients))]
    half = degree // 2
    out = {}
    for idx, c in enumerate(order):
        near = {order[(idx + o) % m] for o in range(-half, half + 1) if o != 0}
        out[c] = tuple(sorted(near))
    return out


# -- the strategy --------------------------------------------------------------------------
class SecAgg(StrategyWrapper):
    """Secure aggregation of the updates of any strategy (see the module docstring).

    Parameters
    ----------
    inner: the strategy whose updates are summed (its weights must lie in [0, 1]:
        ``FedAvg(max_weight=...)`` or ``weighted=False``; DP-FedAvg's are 1).
    bits: k, the ring Z_2^k (2..64); 16 halves traffic against float32, 32 is precise.
    clip_range: R for strategies without an L2 bound on their updates.
    neighbours: degree of the SecAgg+ graph (rounded up to even); None: complete graph.
    threshold: share threshold as a fraction of the degree: t = floor(threshold deg) + 1.
    min_survivors: fraction of the sampled clients that must survive (default: threshold);
        also the number of noise shares distributed DP counts on.
    prg: "aes-ctr" or "chacha20".
    """

    def __init__(self, inner: Strategy, *, bits: int = 32, clip_range: float = 1.0,
                 neighbours: int | None = None, threshold: float = 0.5,
                 min_survivors: float | None = None, prg: str = "aes-ctr") -> None:
        super().__init__(inner)
        self.bits = check_int(bits, "bits", low=2, high=64)
        self.clip_range = check_positive(clip_range, "clip_range")
        self.neighbours = None if neighbours is None else check_int(neighbours, "neighbours",
                                                                    low=2)
        self.threshold = check_probability(threshold, "threshold", low_open=True)
        self.min_survivors = self.threshold if min_survivors is None else \
            check_probability(min_survivors, "min_survivors", low_open=True)
        self.prg = check_choice(prg, "prg", _PRGS)
        if inner.weight_bound() > 1.0:
            raise ConfigError(f"SecAgg needs client weights in [0, 1], but {type(inner).__name__}"
                              " weights clients by their example counts: pass "
                              "FedAvg(max_weight=<public bound on a client's examples>) or "
                              "FedAvg(weighted=False)")
        for name, (lo, hi) in inner.extras_bounds().items():
            if lo < -1.0 or hi > 1.0:
                raise ConfigError(f"SecAgg encodes extra scalars in [-1, 1]; {name!r} has "
                                  f"range [{lo}, {hi}]")

    @property
    def secure(self) -> bool:
        return True

    def plan(self, round: int, params: np.ndarray, sampled: Sequence[int]) -> _Plan:
        """The round's encoding and thresholds (deterministic in its inputs)."""
        m, d = max(2, len(sampled)), int(params.size)  # fewer than 2: the round aborts
        degree = max(1, m - 1) if self.neighbours is None else \
            min(max(1, m - 1), 2 * math.ceil(self.neighbours / 2))
        threshold = min(degree, math.floor(self.threshold * degree) + 1)
        min_survivors = max(2, math.ceil(self.min_survivors * m))
        bound = self.inner.update_norm_bound(round)
        clip_range = self.clip_range if bound is None else bound
        extras = (_WEIGHT, *sorted(self.inner.extras_bounds()),
                  *((_CLIPPED,) if bound is None else ()))
        noise = self.inner.distributed_noise(round)
        z = 0.0 if noise is None else noise.multiplier
        extras_std = {} if noise is None else dict(noise.extras_std)
        top = 2.0 ** (self.bits - 1) - 1.0
        scale = (top - 4.0 * z * math.sqrt(d)) / (m * clip_range + 8.0 * z * clip_range)
        scale = min(scale, _MAX_LEVELS / clip_range)  # finer steps than 2^-30 R buy nothing
        extras_scale = 2 * math.floor(min(_MAX_LEVELS, top / (
            m + 8.0 * max(extras_std.values(), default=0.0))) / 2)
        if not (scale * clip_range >= 1.0 and extras_scale >= 2):
            raise ConfigError(f"bits={self.bits} is too small for {m} clients (and the noise): "
                              "the sum would not fit the ring; use more bits")
        plan = _Plan(self.bits, degree, threshold, min_survivors, clip_range, scale, extras,
                     extras_scale, prg=self.prg)
        if noise is None:
            return plan
        t = min_survivors
        sigma = z * (scale * clip_range + math.sqrt(d) / 2.0) / math.sqrt(t)
        sigmas = {k: v * extras_scale / math.sqrt(t) for k, v in extras_std.items()}
        if sigma < 0.5 or any(0 < s < 0.5 for s in sigmas.values()):
            raise ConfigError("the distributed noise is below half a quantization step; "
                              "use more bits")
        rho = 0.5 * (1.0 / z + _tau(sigma, t) * math.sqrt(d)) ** 2
        for k, std in extras_std.items():
            rho += 0.5 * (1.0 / (2.0 * std) + _tau(sigmas[k], t)) ** 2
        return _Plan(self.bits, degree, threshold, min_survivors, clip_range, scale, extras,
                     extras_scale, sigma, sigmas, rho, self.prg)

    def round_event(self, round: int, params: np.ndarray, sampled: Sequence[int],
                    population: int) -> dp_accounting.DpEvent | None:
        plan = self.plan(round, params, sampled)  # also checks the ring before any charge
        if plan.rho is None:
            return self.inner.round_event(round, params, sampled, population)
        return dp_accounting.ZCDpEvent(plan.rho)

    def server_round(self, round, params, sampled, rng):
        return SecAggServer(self, round, params, sampled, rng)

    def client(self, client_id: int, trainer: LocalTrainer) -> SecAggClient:
        return SecAggClient(client_id, trainer, self)


# -- encoding -------------------------------------------------------------------------------
def _encode(delta: np.ndarray, weight: float, extras: Mapping[str, float], plan: _Plan,
            rng: Generator) -> np.ndarray:
    """The client's vector in the ring: quantized, clipped, noised (see module docstring)."""
    x = weight * delta
    clipped = np.abs(x) > plan.clip_range
    values = np.rint(np.clip(x, -plan.clip_range, plan.clip_range) * plan.scale)
    scalars = {**extras, _WEIGHT: weight}
    if plan.count_clipped:
        scalars[_CLIPPED] = float(clipped.mean()) if clipped.size else 0.0
    tail = np.rint(np.clip([scalars[k] for k in plan.extras], -1.0, 1.0) * plan.extras_scale)
    encoded = np.concatenate([values, tail]).astype(np.int64)
    if plan.noise_std > 0:
        encoded[:delta.size] += discrete_gaussian(plan.noise_std, delta.size, rng)
    for k, std in plan.extras_noise_std.items():
        if std > 0:
            encoded[delta.size + plan.extras.index(k)] += int(discrete_gaussian(std, rng=rng))
    dtype = _ring_dtype(plan.bits)
    ring = encoded.view(np.uint64) & np.uint64((1 << plan.bits) - 1)
    return ring.astype(dtype)


def _decode(total: np.ndarray, d: int, plan: _Plan) -> tuple[np.ndarray, dict[str, float]]:
    """Centered lift of the ring sum, rescaled: (sum of w delta, sums of the scalars)."""
    v = total.astype(np.uint64).astype(np.int64)
    if plan.bits < 64:
        half = 1 << (plan.bits - 1)
        v = np.where(v >= half, v - (1 << plan.bits), v)
    return v[:d] / plan.scale, {k: float(v[d + i]) / plan.extras_scale
                                for i, k in enumerate(plan.extras)}


# -- the server -----------------------------------------------------------------------------
class SecAggServer(ServerRound):
    """The server's side of one SecAgg+ round (see the module docstring)."""

    protocol = "secagg"
    stages = ("setup", "share_keys", "masked_input", "unmask")

    def __init__(self, strategy: SecAgg, round: int, params: np.ndarray,
                 sampled: Sequence[int], rng: Generator) -> None:
        super().__init__(round, sampled)
        self.strategy = strategy
        self.params = params
        self.rng = rng
        self.plan = strategy.plan(round, params, self.clients)
        self.graph = _harary(self.clients, self.plan.degree, rng)
        self.config = strategy.client_config(round)
        self.keys: dict[int, tuple[bytes, bytes]] = {}
        self.holders: dict[int, tuple[int, ...]] = {}    # N1(i): who holds i's shares
        self.partners: dict[int, tuple[int, ...]] = {}   # U2 and N(i): i's mask partners
        self.masked_sum: np.ndarray | None = None
        self.survivors: tuple[int, ...] = ()
        self.dropped: tuple[int, ...] = ()
        self._forward: dict[int, dict[int, bytes]] = {}

    @property
    def _length(self) -> int:
        return self.params.size + len(self.plan.extras)

    def _enough(self, alive: Sequence[int], stage: str) -> None:
        if len(alive) < self.plan.min_survivors:
            raise ProtocolError(f"round {self.round} aborted after stage {stage!r}: only "
                                f"{len(alive)} of {len(self.clients)} clients can go on, "
                                f"min_survivors={self.plan.min_survivors} (too many dropouts)")

    def _begin(self) -> list[Message]:
        self._enough(self.clients, "sampling")
        return [self.request(c, config=self.config, neighbours=list(self.graph[c]),
                             secagg=self.plan.public()) for c in self.clients]

    def _check(self, msg: Message) -> Any:
        i = msg.sender
        if self.stage == "setup":
            return msg.blob("c_pk", size=_KEY), msg.blob("s_pk", size=_KEY)
        if self.stage == "share_keys":
            cts = msg.table("ciphertexts", allowed=set(self.holders[i]))
            if set(cts) != set(self.holders[i]):
                raise msg._error("ciphertexts", f"covers {sorted(cts)}; expected one share "
                                                f"for each of {list(self.holders[i])}")
            return cts
        if self.stage == "masked_input":
            masked = msg.array("masked", dtype=_ring_dtype(self.plan.bits),
                               shape=(self._length,))
            if masked.size and int(masked.max()) >> self.plan.bits:
                raise msg._error("masked", f"holds values outside Z_2^{self.plan.bits}")
            return masked
        asked_b, asked_s = self._asked_for[i]
        seeds = msg.table("seed_shares", allowed=set(asked_b))
        keys = msg.table("key_shares", allowed=set(asked_s))
        if set(seeds) != set(asked_b) or set(keys) != set(asked_s):
            raise msg._error("seed_shares", "or 'key_shares' do not answer every request")
        return seeds, keys

    def _advance(self, stage: str, answers: dict[int, Any]) -> list[Message]:
        return getattr(self, f"_after_{stage}")(answers)

    def _after_setup(self, answers: dict[int, tuple[bytes, bytes]]) -> list[Message]:
        self.keys = answers
        out = []
        for i in sorted(answers):
            self.holders[i] = tuple(j for j in self.graph[i] if j in answers)
            if len(self.holders[i]) < self.plan.threshold:
                self.excluded[i] = "too few neighbours alive to share its secrets"
                continue
            out.append(self.request(i, keys={j: [*self.keys[j]] for j in self.holders[i]}))
        self._enough([m.recipient for m in out], "setup")
        return out

    def _after_share_keys(self, answers: dict[int, dict[int, bytes]]) -> list[Message]:
        self._shared = set(answers)
        out = []
        for i in sorted(answers):
            incoming = {j: answers[j][i] for j in sorted(answers) if i in answers[j]}
            self.partners[i] = tuple(incoming)
            if len(incoming) < self.plan.threshold:
                self.excluded[i] = "too few neighbours shared their secrets with it"
                continue
            out.append(self.request(i, params=self.params, ciphertexts=incoming))
        self._enough([m.recipient for m in out], "share_keys")
        return out

    def _after_masked_input(self, answers: dict[int, np.ndarray]) -> list[Message]:
        self._enough(list(answers), "masked_input")
        dtype = _ring_dtype(self.plan.bits)
        total = np.zeros(self._length, dtype=dtype)
        for i in sorted(answers):
            total += answers[i]
        self.masked_sum = total
        self.survivors = tuple(sorted(answers))
        self.dropped = tuple(sorted(self._shared - set(answers)))
        alive, gone = set(self.survivors), set(self.dropped)
        self._asked_for: dict[int, tuple[list[int], list[int]]] = {}
        out = []
        for i in self.survivors:
            ask = ([j for j in self.partners[i] if j in alive],
                   [j for j in self.partners[i] if j in gone])
            self._asked_for[i] = ask
            out.append(self.request(i, survivors=ask[0], dropped=ask[1]))
        return out

    def _after_unmask(self, answers: dict[int, tuple[dict, dict]]) -> list[Message]:
        plan, n = self.plan, self._length
        total = self.masked_sum.copy()
        for owner in self.survivors:
            seed = self._reconstruct(owner, {j: a[0][owner] for j, a in answers.items()
                                             if owner in a[0]}, "self-mask seed")
            total -= _prg(seed, n, plan.bits, plan.prg)
        for owner in self.dropped:
            secret = self._reconstruct(owner, {j: a[1][owner] for j, a in answers.items()
                                               if owner in a[1]}, "mask key")
            for k in self.partners.get(owner, ()):
                if k in self.survivors:
                    mask = _prg(_agree(secret, self.keys[k][1], _mask_seed(self.round, owner, k)),
                                n, plan.bits, plan.prg)
                    # k added +mask if k < owner, else -mask: remove it
                    if k < owner:
                        total -= mask
                    else:
                        total += mask
        _reduce(total, plan.bits)
        d = self.params.size
        sums, scalars = _decode(total, d, plan)
        weight = scalars.pop(_WEIGHT)
        clipped = scalars.pop(_CLIPPED, None)
        aggregate = Aggregate(total=sums, weight=weight, extras=scalars,
                              clients=self.survivors, l2_slack=math.sqrt(d) / (2 * plan.scale))
        params = self.strategy.aggregate(self.round, self.params, aggregate, self.rng)
        metrics = {"survivors": len(self.survivors), "degree": plan.degree,
                   "threshold": plan.threshold,
                   "quantization_error": len(self.survivors) / (2 * plan.scale)}
        if clipped is not None:
            metrics["clipped_fraction"] = clipped / max(len(self.survivors), 1)
        self.result = RoundResult(params, self.survivors, metrics)
        return []

    def _reconstruct(self, owner: int, raw: dict[int, bytes], what: str) -> bytes:
        """``owner``'s secret from its holders' shares (each checked against its x)."""
        holders = self.holders[owner]
        shares = []
        for j, data in sorted(raw.items()):
            try:
                share = ShamirShare.from_bytes(data)
            except CryptoError as exc:
                raise ProtocolError(f"round {self.round}: client {j} sent a malformed share "
                                    f"of client {owner}'s {what}: {exc}") from None
            if share.x != holders.index(j) + 1:
                raise ProtocolError(f"round {self.round}: client {j} sent a share of client "
                                    f"{owner}'s {what} with the wrong index {share.x}")
            shares.append(share)
        if len(shares) < self.plan.threshold:
            raise ProtocolError(f"round {self.round} aborted: client {owner}'s {what} cannot "
                                f"be recovered: {len(shares)} share(s), threshold "
                                f"{self.plan.threshold} (too many dropouts)")
        try:
            return combine_bytes(shares)
        except CryptoError as exc:
            raise ProtocolError(f"round {self.round} aborted: client {owner}'s {what} could "
                                f"not be reconstructed: {exc}") from None


# -- the client -----------------------------------------------------------------------------
class SecAggClient(ClientProtocol):
    """A client of SecAgg+ (see the module docstring). Secrets live only in this object."""

    protocol = "secagg"
    stages = ("setup", "share_keys", "masked_input", "unmask")

    def __init__(self, client_id: int, trainer: LocalTrainer, strategy: Strategy) -> None:
        super().__init__(client_id)
        self.trainer = trainer
        self.strategy = strategy
        self._new_round()

    def _new_round(self) -> None:
        self._plan: _Plan | None = None
        self._config: dict[str, Any] = {}
        self._neighbours: list[int] = []
        self._c_sk = self._s_sk = self._b = b""
        self._keys: dict[int, list[bytes]] = {}
        self._held: dict[int, tuple[bytes, bytes]] = {}

    def _on_setup(self, msg: Message, rng: Generator) -> list[Message]:
        self._neighbours = msg.ids("neighbours")
        if self.client_id in self._neighbours:
            raise ProtocolError(f"client {self.client_id}: listed as its own neighbour")
        self._plan = _read_plan(msg, self._neighbours)
        self._config = msg.get("config", dict)
        self._c_sk, self._s_sk = rng.bytes(_KEY), rng.bytes(_KEY)
        return [self.reply(msg, c_pk=_public_key(self._c_sk), s_pk=_public_key(self._s_sk))]

    def _on_share_keys(self, msg: Message, rng: Generator) -> list[Message]:
        keys = msg.table("keys", allowed=set(self._neighbours), value=list)
        for j, pair in keys.items():
            if len(pair) != 2 or not all(isinstance(k, bytes) and len(k) == _KEY for k in pair):
                raise msg._error("keys", f"entry for client {j} is not two {_KEY}-byte keys")
        t = self._plan.threshold
        if len(keys) < t:
            raise ProtocolError(f"client {self.client_id}: {len(keys)} neighbours alive, "
                                f"threshold {t}: aborting")
        self._keys = keys
        self._b = rng.bytes(_KEY)
        holders = sorted(keys)
        s_shares = split_bytes(self._s_sk, len(holders), t, rng=rng)
        b_shares = split_bytes(self._b, len(holders), t, rng=rng)
        out = {}
        for x, j in enumerate(holders):
            key = _agree(self._c_sk, keys[j][0], _channel(msg.round, self.client_id, j))
            plain = encode([self.client_id, j, s_shares[x].to_bytes(), b_shares[x].to_bytes()])
            out[j] = AESGCM(key).encrypt(bytes(12), plain, _channel(msg.round,
                                                                    self.client_id, j))
        return [self.reply(msg, ciphertexts=out)]

    def _on_masked_input(self, msg: Message, rng: Generator) -> list[Message]:
        plan = self._plan
        params = msg.array("params", dtype=np.float64, shape=(self.trainer.model.n_params_,),
                           finite=True)
        incoming = msg.table("ciphertexts", allowed=set(self._keys))
        if len(incoming) < plan.threshold:
            raise ProtocolError(f"client {self.client_id}: shares from {len(incoming)} "
                                f"neighbours, threshold {plan.threshold}: aborting")
        for j, ct in incoming.items():
            info = _channel(msg.round, j, self.client_id)
            try:
                plain = AESGCM(_agree(self._c_sk, self._keys[j][0], info)).decrypt(
                    bytes(12), ct, info)
                owner, holder, s_share, b_share = decode(plain)
            except (InvalidTag, ProtocolError, ValueError, TypeError):
                raise ProtocolError(f"client {self.client_id}: the share from client {j} "
                                    "does not decrypt; aborting") from None
            if (owner, holder) != (j, self.client_id):
                raise ProtocolError(f"client {self.client_id}: the share from client {j} is "
                                    f"addressed {owner} -> {holder}; aborting")
            self._held[j] = (s_share, b_share)
        update = self.strategy.client_update(self.trainer, params, self._config, rng)
        y = _encode(update.delta, update.weight, update.extras, plan, rng)
        y += _prg(self._b, y.size, plan.bits, plan.prg)
        for j in sorted(incoming):
            mask = _prg(_agree(self._s_sk, self._keys[j][1],
                               _mask_seed(msg.round, self.client_id, j)),
                        y.size, plan.bits, plan.prg)
            if self.client_id < j:
                y += mask
            else:
                y -= mask
        return [self.reply(msg, masked=_reduce(y, plan.bits))]

    def _on_unmask(self, msg: Message, rng: Generator) -> list[Message]:
        survivors = msg.ids("survivors", allowed=set(self._held))
        dropped = msg.ids("dropped", allowed=set(self._held))
        both = set(survivors) & set(dropped)
        if both:
            raise ProtocolError(f"client {self.client_id}: the server asked for both secrets "
                                f"of clients {sorted(both)}; refusing")
        return [self.reply(msg, seed_shares={j: self._held[j][1] for j in survivors},
                           key_shares={j: self._held[j][0] for j in dropped})]
