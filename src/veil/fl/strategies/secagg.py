"""Secure aggregation: SecAgg (Bonawitz et al., CCS 2017) on the SecAgg+ neighbour graph
(Bell, Bonawitz, Gascon, Lepoint & Raykova, CCS 2020). The server learns the sum of the
surviving clients' updates and nothing else about any single update.

The round's encoding in the ring Z_2^k is :mod:`veil.fl.secagg.ring`, the five-stage
protocol (and its threat model: a malicious server, with signed keys and the consistency
round of Bonawitz et al. section 6) :mod:`veil.fl.secagg.protocol`, the key agreement and
masks :mod:`veil.fl.secagg.masks`; this module holds the strategy that plans each round and
the clients' identity table.

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
import os
from collections.abc import Callable, Mapping, Sequence

import dp_accounting
import numpy as np

from veil._validation import check_choice, check_int, check_positive, check_probability
from veil.crypto.identity import check_table, make_identities, read_table
from veil.dp.ledger import Ledger
from veil.errors import ConfigError
from veil.fl.secagg.protocol import SecAggClient, SecAggServer
from veil.fl.secagg.ring import CLIPPED, MAX_LEVELS, PRGS, WEIGHT, Plan
from veil.fl.strategies.base import StrategyWrapper, UpdateStrategy
from veil.fl.trainer import LocalTrainer

__all__ = ["SecAgg", "SecAggClient", "SecAggServer"]


def tau(sigma: float, t: int) -> float:
    """Kairouz et al. (2021)'s tau for the sum of t discrete Gaussians of scale sigma."""
    return 10.0 * sum(math.exp(-2.0 * math.pi ** 2 * sigma ** 2 * k / (k + 1))
                      for k in range(1, t))


class SecAgg(StrategyWrapper):
    """Secure aggregation of the updates of any strategy (see the module docstring).

    Parameters
    ----------
    inner: the strategy whose updates are summed (its weights must lie in [0, 1]:
        ``FedAvg(max_weight=...)`` or ``weighted=False``; DP-FedAvg's are 1).
    bits: k, the ring Z_2^k (2..64); 16 halves traffic against float32, 32 is precise.
    clip_range: R for strategies without an L2 bound on their updates.
    neighbours: degree of the SecAgg+ graph (rounded up to even); None: complete graph.
    threshold: share threshold as a fraction of the degree: t = floor(threshold deg) + 1;
        at least 0.5, so that t exceeds half the neighbours (each client also checks this).
    min_survivors: fraction of the sampled clients that must survive (default: threshold);
        also the number of noise shares distributed DP counts on.
    prg: "aes-ctr" or "chacha20".
    consistency: True (the default): the malicious-server variant -- each client signs its
        keys and the survivor set with its Ed25519 identity key, and reveals shares only
        for a survivor set t of its neighbours signed (:mod:`veil.fl.secagg.protocol`);
        False: the semi-honest protocol, four stages (to measure what the checks cost).

    identities: the identity table (client id -> Ed25519 public key) of a deployment, or
        the path of one (:func:`veil.crypto.identity.write_identities`); each client is
        then given its private key where it runs (:meth:`SecAggClient.use_identity
        <veil.fl.secagg.SecAggClient.use_identity>`). None: a simulation, where
        :meth:`client` makes each client's key pair from the CSPRNG (the runner is the
        trusted set-up) and records it in :attr:`identities`.
    client_ledgers: with distributed noise, ``client_ledgers(client_id)`` gives each
        client made by :meth:`client` its own Ledger, which it charges every round before
        its noisy masked input leaves it, refusing the round (a dropout) when its budget
        cannot pay (:meth:`SecAggClient.use_ledger
        <veil.fl.secagg.SecAggClient.use_ledger>`); None: only the server charges (a
        deployed client opens its own ledger where it runs).
    rounds: the planned number of rounds, the clients' own plan for their ledgers
        (required with ``client_ledgers``).
    """

    def __init__(self, inner: UpdateStrategy, *, bits: int = 32, clip_range: float = 1.0,
                 neighbours: int | None = None, threshold: float = 0.5,
                 min_survivors: float | None = None, prg: str = "aes-ctr",
                 consistency: bool = True,
                 identities: Mapping[int, bytes] | str | os.PathLike | None = None,
                 client_ledgers: Callable[[int], Ledger] | None = None,
                 rounds: int | None = None) -> None:
        super().__init__(inner)
        if client_ledgers is not None and not callable(client_ledgers):
            raise ConfigError(f"client_ledgers={client_ledgers!r} is not allowed: expected a "
                              "function client_id -> veil.dp.Ledger, or None")
        if client_ledgers is not None and rounds is None:
            raise ConfigError("client_ledgers needs rounds=<the planned number of rounds>: "
                              "each client plans its own budget over them")
        self.client_ledgers = client_ledgers
        self.rounds = None if rounds is None else check_int(rounds, "rounds", low=1)
        if not isinstance(consistency, bool):
            raise ConfigError(f"consistency={consistency!r} is not allowed: expected True or "
                              "False")
        self.consistency = consistency
        self.deployed = identities is not None
        self.identities: dict[int, bytes] = {} if identities is None else \
            check_table(identities) if isinstance(identities, Mapping) else \
            read_table(identities)
        self.bits = check_int(bits, "bits", low=2, high=64)
        self.clip_range = check_positive(clip_range, "clip_range")
        self.neighbours = None if neighbours is None else check_int(neighbours, "neighbours",
                                                                    low=2)
        self.threshold = check_probability(threshold, "threshold", low_open=True)
        if self.threshold < 0.5:
            raise ConfigError(f"threshold={threshold!r} is not allowed: must be in [0.5, 1], so "
                              "that a server cannot collect both secrets of a client from two "
                              "disjoint sets of its neighbours (Bonawitz et al. 2017)")
        self.min_survivors = self.threshold if min_survivors is None else \
            check_probability(min_survivors, "min_survivors", low_open=True)
        self.prg = check_choice(prg, "prg", PRGS)
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

    def plan(self, server_round: int, params: np.ndarray, sampled: Sequence[int], *,
             clip_range: float | None = None) -> Plan:
        """The round's encoding and thresholds (deterministic in its inputs).

        ``clip_range``: the bound the server announced (a client recomputes the plan with
        it: an adaptive clip norm lives on the server; the noise is proportional to it, so
        the client's noise multiplier holds whatever the bound).
        """
        m, d = max(2, len(sampled)), int(params.size)  # fewer than 2: the round aborts
        degree = max(1, m - 1) if self.neighbours is None else \
            min(max(1, m - 1), 2 * math.ceil(self.neighbours / 2))
        threshold = min(degree, math.floor(self.threshold * degree) + 1)
        min_survivors = max(2, math.ceil(self.min_survivors * m))
        bound = self.inner.update_norm_bound(server_round)
        if clip_range is None:
            clip_range = self.clip_range if bound is None else bound
        extras = (WEIGHT, *sorted(self.inner.extras_bounds()),
                  *((CLIPPED,) if bound is None else ()))
        noise = self.inner.distributed_noise(server_round)
        z = 0.0 if noise is None else noise.multiplier
        extras_std = {} if noise is None else dict(noise.extras_std)
        top = 2.0 ** (self.bits - 1) - 1.0
        # m (R s + 1/2) + noise headroom <= top: no wrap-around (veil.fl.secagg.ring)
        scale = (top - m / 2.0 - 4.0 * z * math.sqrt(d)) / (m * clip_range + 8.0 * z * clip_range)
        scale = min(scale, MAX_LEVELS / clip_range)  # finer steps than 2^-30 R buy nothing
        extras_scale = 2 * math.floor(min(MAX_LEVELS, top / (
            m + 8.0 * max(extras_std.values(), default=0.0))) / 2)
        if not (scale * clip_range >= 1.0 and extras_scale >= 2):
            raise ConfigError(f"bits={self.bits} is too small for {m} clients (and the noise): "
                              "the sum would not fit the ring; use more bits")
        plan = Plan(self.bits, degree, threshold, min_survivors, clip_range, scale, extras,
                     extras_scale, prg=self.prg)
        if noise is None:
            return plan
        t = min_survivors
        sigma = z * (scale * clip_range + math.sqrt(d) / 2.0) / math.sqrt(t)
        sigmas = {k: v * extras_scale / math.sqrt(t) for k, v in extras_std.items()}
        if sigma < 0.5 or any(0 < s < 0.5 for s in sigmas.values()):
            raise ConfigError("the distributed noise is below half a quantization step; "
                              "use more bits")
        rho = 0.5 * (1.0 / z + tau(sigma, t) * math.sqrt(d)) ** 2
        for k, std in extras_std.items():
            rho += 0.5 * (1.0 / (2.0 * std) + tau(sigmas[k], t)) ** 2
        return Plan(self.bits, degree, threshold, min_survivors, clip_range, scale, extras,
                     extras_scale, sigma, sigmas, rho, self.prg)

    @property
    def fixed_round_event(self) -> bool:
        """With distributed noise a round's zCDP cost depends on the number of clients in
        it and on the clip norm: fixed when every client takes part (sampling rate 1) and
        the clip norm is fixed (a round whose event differs from the plan is then charged
        on its own by the federation, so this is only an optimisation)."""
        if not self.inner.requires_secure_aggregation:
            return self.inner.fixed_round_event
        return getattr(self.inner, "sample_rate", None) == 1.0 and \
            getattr(self.inner, "adaptive", True) is False

    def round_event(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
                    population: int) -> dp_accounting.DpEvent | None:
        plan = self.plan(server_round, params, sampled)  # also checks the ring before any charge
        if plan.rho is None:
            return self.inner.round_event(server_round, params, sampled, population)
        return plan.event

    def server(self, server_round, params, sampled, rng):
        return SecAggServer(self, server_round, params, sampled, rng)

    def client(self, client_id: int, trainer: LocalTrainer) -> SecAggClient:
        """Client ``client_id``; with the consistency round, its identity key pair is made
        here (the private key goes to the client only, the public key into
        :attr:`identities`, which the client reads as its identity table); with
        ``client_ledgers``, its own ledger too."""
        client = self._client(client_id, trainer)
        if self.client_ledgers is not None:
            client.use_ledger(self.client_ledgers(client_id), self.rounds)
        return client

    def _client(self, client_id: int, trainer: LocalTrainer) -> SecAggClient:
        if not self.consistency:
            return SecAggClient(client_id, trainer, self)
        if self.deployed:   # its key is on its own machine: SecAggClient.use_identity
            return SecAggClient(client_id, trainer, self, directory=self.identities)
        (private,), (public,) = make_identities(1)
        self.identities[int(client_id)] = public
        return SecAggClient(client_id, trainer, self, identity=private,
                            directory=self.identities)
