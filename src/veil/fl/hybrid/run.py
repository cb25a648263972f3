"""Query learners over the real hybrid protocol: one protocol round per aggregate query.

:class:`HybridAggregator` is a :class:`veil.fl.hybrid.fit.Aggregator`: given to
:func:`veil.fl.hybrid.fit.fit_queries`, it answers each query by running a
:class:`~veil.fl.hybrid.protocol.HybridServer` round against the parties'
:class:`~veil.fl.hybrid.protocol.HybridClient` objects on the runtime it is given (a
:class:`~veil.fl.protocol.Runtime`: e.g. the local runtime, with its simulated faults), so
a decision tree, a linear model or a network is trained through threshold-Paillier
encryption, noise shares and partial decryptions, and every message is serialized and
counted. The same class runs the baselines in the clear
(``Agreement(method="none" | "local" | "central")``). With a multi-process runtime
(``LocalRuntime(workers=k)``) the parties live in the workers: the aggregator reaches them
there (:meth:`~veil.fl.runtime.LocalRuntime.call`) to fill their noise pools, to hand them
a new learner and to read their clipping counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._validation import check_pair
from veil.dp.distributed import DistributedMechanism
from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.hybrid.fit import Aggregator
from veil.fl.hybrid.protocol import (
    Agreement,
    HybridClient,
    HybridKeys,
    HybridServer,
    deal_keys,
    make_identities,
    next_run,
)
from veil.fl.protocol import Runtime
from veil.learn.queries import Query, QueryAnswer, QueryLearner
from veil.random import Generator, RngLike, check_rng

__all__ = ["HybridAggregator"]


def _same(a: DistributedMechanism | None, b: DistributedMechanism | None) -> bool:
    if a is None or b is None:
        return a is b
    return (type(a) is type(b) and a.event == b.event and a.parties == b.parties
            and a.honest == b.honest)


class HybridAggregator(Aggregator):
    """Runs the hybrid protocol for each query (module docstring).

    ``parties``: one ``(X, y)`` per party; ``agreement``: the set-up all parties share.
    ``keys``: the dealer's output (default: dealt now with ``key_bits``, ``primes`` and
    ``insecure_ok`` -- test keys under 2048 bits need it). ``runtime``: where rounds run
    (e.g. ``veil.fl.runtime.LocalRuntime()``, fault-free). The runtime's report of
    every round is kept in :attr:`reports`.
    """

    def __init__(self, parties: Sequence[tuple[Any, Any]], agreement: Agreement, *,
                 runtime: Runtime, keys: HybridKeys | None = None, key_bits: int = 2048,
                 primes: Any = None, insecure_ok: bool = False, rng: RngLike = None) -> None:
        if not isinstance(agreement, Agreement):
            raise ConfigError(f"agreement={agreement!r} is not allowed: expected an Agreement")
        if len(parties) != agreement.parties:
            raise DataError(f"{len(parties)} parties hold data; the agreement is for "
                            f"{agreement.parties}")
        identities: list[bytes | None] = [None] * agreement.parties
        if agreement.encrypted:
            if keys is None:
                keys = deal_keys(agreement.trusted, bits=key_bits, primes=primes,
                                 insecure_ok=insecure_ok, rng=rng)
            if not agreement.identities:  # the parties make their identity keys at set-up
                identities, public = make_identities(agreement.parties)
                agreement = dataclasses.replace(agreement, identities=public)
        self.agreement = agreement
        self.parties = agreement.parties
        self.public_key = keys.public_key if agreement.encrypted else None
        self.clients = {}
        for i, pair in enumerate(parties):
            X, y = check_pair(pair, f"parties[{i}]", dtype=None, allow_empty=True)
            share = keys.shares[i] if self.public_key is not None else None
            self.clients[i] = HybridClient(i, X, y, agreement, key_share=share,
                                           identity=identities[i])
        self.runtime = runtime
        self.round = 0
        self.reports: list[Any] = []
        self._learner: QueryLearner | None = None
        self._server: HybridServer | None = None

    def precompute(self, ciphertexts: int) -> None:
        """Fill every party's noise pool with ``ciphertexts`` encryption noises (offline)."""
        self.runtime.call(self.clients, HybridClient.precompute, ciphertexts)

    def aggregate(self, query: Query, learner: QueryLearner, *,
                  party_noise: DistributedMechanism | None,
                  server_noise: DistributedMechanism | None, rng: Generator) -> QueryAnswer:
        expected = self.agreement.mechanism(query.shape)
        given = party_noise if party_noise is not None else server_noise
        where_ok = (party_noise is None) == (not self.agreement.party_noise or expected is None)
        if not (_same(given, expected) and where_ok):
            raise ConfigError(f"the noise requested for {query.name!r} ({given!r}) is not the "
                              f"agreed one ({expected!r}, method {self.agreement.method!r})")
        rng = check_rng(rng)
        server_rng, round_rng = rng.spawn(2)
        if learner is not self._learner:   # parties answer from the query and its settings
            self.runtime.call(self.clients, _give_learner, learner)
            self._learner = learner
        before = self._clipped()
        server = HybridServer(self.round, sorted(self.clients), query, self.agreement,
                              self.public_key, run=next_run(self._server), rng=server_rng)
        self._server = server
        report = self.runtime.run_round(server, self.clients, round_rng)
        self.round += 1
        self.reports.append(report)
        if report.result is None:
            raise ProtocolError(f"query {query.name!r}: {report.error}")
        answer = server.answer
        cpu = [report.client_cpu[c] for c in self.clients if c in report.client_cpu]
        return QueryAnswer(answer.values, answer.noise_std, self._clipped() - before,
                           answer.parties, {
                               "bytes_up": float(report.bytes_up),
                               "bytes_down": float(report.bytes_down),
                               "wall_time": report.wall_time,
                               "server_cpu": report.server_cpu,
                               "client_cpu_max": float(max(cpu)) if cpu else 0.0,
                               "client_cpu_total": float(np.sum(cpu)) if cpu else 0.0,
                               **report.result.metrics})

    def _clipped(self) -> int:
        return sum(self.runtime.call(self.clients, _clip_count).values())


def _give_learner(client: HybridClient, learner: QueryLearner) -> None:
    """A new learning task for the party: its plan, and no query of it answered yet."""
    client.learner = learner
    client.answered = 0


def _clip_count(client: HybridClient) -> int:
    return client.clipped + client.records_clipped
