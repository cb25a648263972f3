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
``sigma_c = z (s C + sqrt(d)/2) / sqrt(t)``: the rounded update has L2 norm at most
``s C + sqrt(d)/2`` (rounding moves each entry by at most 1/2), so the sum of any t
clients' noise has multiplier z. t counts on the client's **own** configuration, never on
the cohort the server announces: ``t = max(2, ceil(min_survivors m_min))`` with m_min the
minimum cohort (:meth:`SecAgg.min_cohort_of`, from the federation's size N in the client's
identity table and its plan), the cohort below which every client refuses the round. A
server announcing a larger cohort gets more noise in the sum than needed, never less.
The sum of t discrete Gaussians is not a discrete Gaussian; Kairouz, Liu & Steinke (ICML
2021, Proposition 14) bound its Renyi DP by
``alpha/2 (Delta_2/(sqrt(t) sigma_c) + tau sqrt(d))^2`` with
``tau = 10 sum_{k=1}^{t-1} exp(-2 pi^2 sigma_c^2 k/(k+1))``: concentrated DP with that rho,
charged as a ``ZCDpEvent`` per round (composed exactly by the RDP accountant; the PLD
accountant falls back to the same RDP bound), without claiming amplification by
sampling. The guarantee holds against the server for the content of each client's data
(a client's update replaced by zero); which clients took part is visible to the server.
The modular reduction is post-processing of the exact integer sum.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from veil._validation import check_choice, check_int, check_positive, check_probability
from veil.crypto.identity import check_table, make_identities, read_table
from veil.errors import ConfigError
from veil.fl.secagg.protocol import SecAggClient, SecAggServer
from veil.fl.secagg.ring import CLIPPED, MAX_LEVELS, PRGS, WEIGHT, Plan
from veil.fl.strategies.base import Privacy, StrategyWrapper, UpdateStrategy
from veil.fl.strategies.fedavg import round_half_up
from veil.fl.trainer import LocalTrainer

if TYPE_CHECKING:   # a node's ClientApp process loads them when a ledger is used
    import dp_accounting

    from veil.dp.ledger import Ledger

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
    min_cohort: the fewest clients a round may sample; every client refuses a smaller
        cohort (its degree, threshold and noise are never derived from a cohort the server
        makes up). None: what the inner strategy's sampling implies for the N clients of the
        identity table (:meth:`min_cohort_of`).
    """

    def __init__(self, inner: UpdateStrategy, *, bits: int = 32, clip_range: float = 1.0,
                 neighbours: int | None = None, threshold: float = 0.5,
                 min_survivors: float | None = None, prg: str = "aes-ctr",
                 consistency: bool = True,
                 identities: Mapping[int, bytes] | str | os.PathLike | None = None,
                 client_ledgers: Callable[[int], Ledger] | None = None,
                 rounds: int | None = None, min_cohort: int | None = None) -> None:
        super().__init__(inner)
        self.min_cohort = None if min_cohort is None else check_int(min_cohort, "min_cohort",
                                                                    low=2)
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

    def min_cohort_of(self, population: int | None) -> int:
        """The fewest clients a round may have in a federation of ``population`` clients
        (the size of the identity table; None: unknown, the semi-honest variant, 2).

        ``min_cohort`` when given; else the cohort the inner strategy's sampling implies:
        ``max(min_clients, round(fraction N))`` (at most N) for a fixed-size sample, and, for
        Poisson sampling at rate q < 1 (DP-FedAvg), ``max(2, floor(q N / 2))``: by
        Chernoff's bound an honest round falls below qN/2 with probability at most
        ``exp(-q N / 8)`` (such a round is refused, a dropout of every client)."""
        if self.min_cohort is not None or population is None:
            return self.min_cohort or 2
        n = int(population)
        q = _inner_attr(self.inner, "sample_rate")     # Poisson sampling overrides the rest
        if q is not None:
            return max(2, math.floor(q * n / 2)) if q < 1.0 else n
        fraction = _inner_attr(self.inner, "fraction") or 1.0
        least = _inner_attr(self.inner, "min_clients") or 1
        return max(2, min(n, max(least, round_half_up(fraction * n))))

    def population(self) -> int | None:
        """N, the size of the identity table (None without one: semi-honest variant)."""
        return len(self.identities) if self.consistency else None

    def plan(self, server_round: int, params: np.ndarray, sampled: Sequence[int], *,
             clip_range: float | None = None, population: int | None = None) -> Plan:
        """The round's encoding and thresholds (deterministic in its inputs).

        ``clip_range``: the bound the server announced (a client recomputes the plan with
        it: an adaptive clip norm lives on the server; the noise is proportional to it, so
        the client's noise multiplier holds whatever the bound). ``population``: N, which
        fixes the minimum cohort the distributed noise is calibrated for
        (:meth:`min_cohort_of`; None: the sampled cohort itself).
        """
        m, d = max(2, len(sampled)), int(params.size)  # fewer than 2: the round aborts
        degree = max(1, m - 1) if self.neighbours is None else \
            min(max(1, m - 1), 2 * math.ceil(self.neighbours / 2))
        threshold = min(degree, math.floor(self.threshold * degree) + 1)
        min_survivors = max(2, math.ceil(self.min_survivors * m))
        least = m if population is None else min(m, self.min_cohort_of(population))
        shares = max(2, math.ceil(self.min_survivors * least))   # t of the noise calibration
        bound = self.inner.update_norm_bound(server_round)
        if clip_range is None:
            clip_range = self.clip_range if bound is None else bound
        extras = (WEIGHT, *sorted(self.inner.extras_bounds()),
                  *((CLIPPED,) if bound is None else ()))
        noise = self.inner.distributed_noise(server_round)
        z = 0.0 if noise is None else noise.multiplier
        extras_std = {} if noise is None else dict(noise.extras_std)
        # the headroom below is sized for shares == min_survivors; fewer shares mean more
        # noise per client, and in the sum, by sqrt(min_survivors / shares)
        z_room = z * math.sqrt(min_survivors / shares)
        room_std = {k: v * math.sqrt(min_survivors / shares) for k, v in extras_std.items()}
        top = 2.0 ** (self.bits - 1) - 1.0
        # m (R s + 1/2) + noise headroom <= top: no wrap-around (veil.fl.secagg.ring)
        scale = (top - m / 2.0 - 4.0 * z_room * math.sqrt(d)) / (m * clip_range
                                                                 + 8.0 * z_room * clip_range)
        scale = min(scale, MAX_LEVELS / clip_range)  # finer steps than 2^-30 R buy nothing
        extras_scale = 2 * math.floor(min(MAX_LEVELS, top / (
            m + 8.0 * max(room_std.values(), default=0.0))) / 2)
        if not (scale * clip_range >= 1.0 and extras_scale >= 2):
            raise ConfigError(f"bits={self.bits} is too small for {m} clients (and the noise): "
                              "the sum would not fit the ring; use more bits")
        plan = Plan(self.bits, degree, threshold, min_survivors, clip_range, scale, extras,
                     extras_scale, prg=self.prg)
        if noise is None:
            return plan
        t = shares
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
    def privacy(self) -> Privacy:
        """The inner strategy's, with single updates hidden from the server. With
        distributed noise a round's zCDP cost depends on the number of clients in it and on
        the clip norm: the event is fixed when every client takes part (sampling rate 1)
        and the clip norm is fixed (a round whose event differs from the plan is then
        charged on its own by the federation, so this is only an optimisation)."""
        inner = self.inner.privacy
        fixed = inner.fixed_event if not inner.needs_secure_aggregation else \
            getattr(self.inner, "sample_rate", None) == 1.0 and \
            getattr(self.inner, "adaptive", True) is False
        return dataclasses.replace(inner, secure_aggregation=True, fixed_event=fixed)

    def round_event(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
                    population: int) -> dp_accounting.DpEvent | None:
        # also checks the ring before any charge
        plan = self.plan(server_round, params, sampled, population=self.population())
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

    def run_digest(self, plan: Plan, table: Mapping[int, bytes]) -> bytes:
        """SHA-256 of what a party's own configuration fixes for the round: the protocol
        variant, the plan's public part and degree, the minimum cohort and the identity
        ``table`` it trusts (every round signature binds it:
        :func:`veil.fl.secagg.protocol.context`)."""
        population = len(table) if self.consistency else None
        body = {"consistency": self.consistency, "plan": plan.public(), "degree": plan.degree,
                "min_cohort": self.min_cohort_of(population),
                "identities": sorted((int(k), v.hex()) for k, v in table.items())}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()


def _inner_attr(strategy: UpdateStrategy, name: str) -> float | None:
    """The first ``name`` set along the chain of wrapped strategies (None if none)."""
    while strategy is not None:
        if name in vars(strategy):
            return vars(strategy)[name]
        strategy = getattr(strategy, "inner", None)
    return None
