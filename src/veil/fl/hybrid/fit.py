"""Answering a learner's queries with a method and a budget.

* **Methods** (:data:`METHODS`), all under one API: ``none`` (exact answers summed in the
  clear: plain FedAvg-style aggregation), ``smc`` (summed under encryption, no noise),
  ``central`` (a trusted aggregator adds all the noise once), ``local`` (each party adds the
  full noise: t = 1) and ``hybrid`` (each adds the share for t honest parties; Truex et al.,
  AISec 2019). Every noisy query is charged to a :class:`~veil.dp.Ledger`, before any noise
  is drawn, as the central-DP cost of the noise of t honest parties
  (:mod:`veil.dp.distributed`).
* :class:`Aggregator` -- answers a query over the parties' data; :class:`SimulatedAggregator`
  -- the parties in this process, the same integer arithmetic
  (:mod:`veil.fl.hybrid.grid`) as the encrypted protocol (:mod:`veil.fl.hybrid.protocol`,
  run by :class:`veil.fl.hybrid.run.HybridAggregator`) without the encryption, which
  changes nothing in the sum: the noise-only simulation of the accuracy experiments.
* :func:`fit_queries` runs a learner against an aggregator with a method and a budget.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_choice, check_pair
from veil.dp.accounting import DEFAULT_ACCOUNTANT
from veil.dp.distributed import (
    NOISES,
    DistributedMechanism,
    calibrate_multiplier,
)
from veil.dp.ledger import Ledger
from veil.dp.privacy_budget import PrivacyBudget, check_budget, same_budget
from veil.dp.trust import Trust, check_trust
from veil.errors import ConfigError, DataError
from veil.fl.hybrid.grid import contribute, decode, noise_std, query_noise
from veil.learn.queries import Query, QueryAnswer, QueryLearner
from veil.random import Generator, RngLike, check_rng

__all__ = ["METHODS", "Aggregator", "Method", "QueryFit", "SimulatedAggregator", "fit_queries",
           "plan_multiplier"]


@dataclass(frozen=True)
class Method:
    """A way to answer queries: ``encrypted`` sums, and who adds the noise (``None``: no
    noise, ``"server"``: the aggregator once, ``"parties"``: each party its share)."""

    name: str
    encrypted: bool
    noise: str | None

    def noise_parties(self, trust: Trust | None, parties: int) -> Trust:
        """The trust among those who add noise (how many, and how many honest of them must
        suffice): n with 1 honest for local DP, the parties' ``trust`` for the hybrid, the
        aggregator alone for central DP."""
        if self.name == "local":
            return Trust(parties, 1)
        if self.name != "hybrid":
            return Trust(1, 1)
        if trust is None:
            raise ConfigError("trust=None is not allowed with method='hybrid': give "
                              f"Trust({parties}, honest), honest in 1..{parties} the minimum "
                              "number of honest parties")
        return check_trust(trust, parties)


#: the hybrid approach and its baselines (module docstring)
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("none", False, None), Method("smc", True, None), Method("central", False, "server"),
    Method("local", False, "parties"), Method("hybrid", True, "parties"))}


class Aggregator(ABC):
    """Answers a query over the parties' data: the sum of their contributions."""

    #: number of parties
    parties: int

    @abstractmethod
    def aggregate(self, query: Query, learner: QueryLearner, *,
                  party_noise: DistributedMechanism | None,
                  server_noise: DistributedMechanism | None, rng: Generator) -> QueryAnswer:
        """Each party contributes (:func:`contribute`, with a share of ``party_noise``), the
        aggregator adds one draw of ``server_noise`` if given (at most one of the two is
        given; it sets the grid), and the sum is decoded."""


class SimulatedAggregator(Aggregator):
    """The parties' contributions summed in this process, without encryption.

    The integers are exactly those the encrypted protocol sums, and a sum of ciphertexts
    decrypts to the sum of their plaintexts, so results have the protocol's distribution
    (tested against the real protocol in ``tests/fl/test_hybrid_protocol.py``).
    """

    def __init__(self, parties: Sequence[tuple[Any, Any]]) -> None:
        if not parties:
            raise DataError("parties is empty; expected one (X, y) pair per party")
        self.data = []
        for i, pair in enumerate(parties):   # the learner's own dtype (codes for a tree)
            self.data.append(check_pair(pair, f"parties[{i}]", dtype=None, allow_empty=True))
        self.parties = len(self.data)

    def aggregate(self, query: Query, learner: QueryLearner, *,
                  party_noise: DistributedMechanism | None,
                  server_noise: DistributedMechanism | None, rng: Generator) -> QueryAnswer:
        streams = check_rng(rng).spawn(self.parties + 1)
        total = np.zeros(query.shape.size, dtype=object)   # exact integer sums
        clipped = 0
        noise = party_noise or server_noise   # the query's grid
        for (X, y), stream in zip(self.data, streams):
            answer, n_clipped = learner.answer(query, X, y)
            ints, over = contribute(query.shape, answer, noise, stream,
                                    noisy=party_noise is not None)
            total += ints.astype(object)
            clipped += n_clipped + over
        if server_noise is not None:
            ints, _ = contribute(query.shape, np.zeros(query.shape.size), server_noise,
                                 streams[-1])
            total += ints.astype(object)
        std = math.hypot(noise_std(query.shape, party_noise, self.parties),
                         noise_std(query.shape, server_noise, 1))
        return QueryAnswer(decode(total, query.shape, noise), std, clipped,
                           tuple(range(self.parties)))


# -- running a learner -------------------------------------------------------------------
@dataclass
class QueryFit:
    """The outcome of :func:`fit_queries`."""

    model: Any
    ledger: Ledger | None
    noise_multiplier: float | None
    queries: int = 0
    clipped: int = 0
    answers: list[QueryAnswer] = field(default_factory=list)


def fit_queries(learner: QueryLearner, aggregator: Aggregator, *, method: str = "hybrid",
                trust: Trust | None = None, noise: str = "skellam",
                budget: PrivacyBudget | None = None, ledger: Ledger | None = None,
                noise_multiplier: float | None = None, rng: RngLike = None) -> QueryFit:
    """Train ``learner`` through ``aggregator`` with ``method`` (:data:`METHODS`).

    A noisy method needs ``budget`` (a :class:`~veil.dp.PrivacyBudget`; default ledger:
    ``Ledger.for_budget(budget)``) or ``ledger`` (a given one must hold exactly ``budget``),
    given once: the noise multiplier is calibrated so that all the queries of
    ``learner.plan()`` fit what the ledger has left (its epsilon and delta) under its
    accountant (:func:`veil.dp.distributed.calibrate_multiplier`). With Gaussian-like noise
    all the planned queries are reserved on the ledger as one planned block before the
    first runs (:meth:`veil.dp.Ledger.plan`, priced at the ledger's delta; an early stop
    still pays for it); Laplace queries (pure DP) are charged one by one. Each query is
    charged before its noise is drawn.
    ``trust``: the parties' :class:`~veil.dp.trust.Trust` (``method="hybrid"`` only).
    ``noise_multiplier``: skip the calibration (e.g. reuse one across methods); the ledger
    still refuses any query that does not fit.
    """
    m = METHODS[check_choice(method, "method", tuple(METHODS))]
    check_choice(noise, "noise", tuple(NOISES))
    adders = m.noise_parties(trust, aggregator.parties)
    rng = check_rng(rng)
    if budget is not None:
        same_budget(ledger, check_budget(budget), "fit_queries")
    z = delta = None
    if m.noise is not None:
        if ledger is None:
            if budget is None:
                raise ConfigError(f"method={method!r} adds noise: give budget= (a "
                                  "veil.dp.PrivacyBudget) or a ledger= to charge")
            ledger = Ledger.for_budget(budget)
        epsilon, delta = ledger.remaining()
        z = noise_multiplier if noise_multiplier is not None else plan_multiplier(
            learner, noise, epsilon, delta, accountant=ledger.accountant)
    fit = QueryFit(learner.model, ledger, z)

    def mechanism(shape: Any) -> DistributedMechanism:
        return query_noise(noise, z, shape, trust=adders, delta=delta)

    block = None
    if z is not None and noise != "laplace":
        # the learner's queries are fixed in advance: one planned block, priced by PLD and
        # charged whole before the first query (BudgetExceededError: nothing charged).
        # Pure-DP (Laplace) queries are charged one by one: the filter adds them exactly,
        # so a learner that stops early (a tree) pays only for the queries it asked.
        planned = [mechanism(shape).event for shape in learner.plan()]
        block = ledger.plan(planned, delta=delta,
                            label=f"{method}: {len(planned)} planned queries")
    while (query := learner.next_query()) is not None:
        party_noise = server_noise = None
        if z is not None:
            mech = mechanism(query.shape)
            if block is None:
                ledger.charge(mech.event, label=f"{method} {query.name}")
            else:
                block.charge(mech.event, label=f"{method} {query.name}")
            party_noise, server_noise = (mech, None) if m.noise == "parties" else (None, mech)
        agg = aggregator.aggregate(query, learner, party_noise=party_noise,
                                   server_noise=server_noise, rng=rng)
        learner.update(query, agg)
        fit.queries += 1
        fit.clipped += agg.clipped
        fit.answers.append(agg)
    fit.model = learner.model
    return fit


def plan_multiplier(learner: QueryLearner, noise: str, epsilon: float, delta: float, *,
                    accountant: str = DEFAULT_ACCOUNTANT) -> float:
    """The noise multiplier for which all of ``learner.plan()`` fits (epsilon, delta)
    (Laplace noise is pure: delta is not used)."""
    kind = NOISES[check_choice(noise, "noise", tuple(NOISES))]
    sens = [s.grid_sensitivity(s.frac_bits) if kind.integer else (s.l1, s.l2)
            for s in learner.plan()]
    return calibrate_multiplier(noise, epsilon, 0.0 if noise == "laplace" else delta, sens,
                                accountant=accountant)
