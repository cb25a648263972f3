"""The hybrid approach (Truex et al., AISec 2019) as a federated strategy for gradient models.

``Federation(clients, model, Hybrid(Trust(parties=n, honest=t), ...), rounds, ledger=...)``
trains any veil.learn model (logistic regression, linear SVM, a torch network) by
full-batch gradient descent in which every round is one aggregate query answered through
the hybrid protocol of :mod:`veil.fl.hybrid.protocol`: each party sends, encrypted under a
threshold Paillier key needing ``threshold = n - t + 1`` partial decryptions, the sum over
its records of the clipped per-example gradients at the global parameters plus a record
count, with its share of the noise; the aggregator multiplies the ciphertexts, has
``threshold`` live parties decrypt the product, and steps
(:class:`veil.learn.private.GradientQueries`)

    w <- w - eta ( (sum_i g_i + noise) / N + alpha M w ),

N the mean of the noisy record counts so far. The noise of any t honest parties is what
central DP needs for the round; the Federation charges each round's event (the same for
every round: the central-DP cost of that noise) to its ledger before the round runs.

The dealer (this object's constructor) generates the threshold key and deals each party
its share; documented trust assumptions in :mod:`veil.fl.hybrid.protocol`. All parties
answer every query (no sampling: the sum must hold the noise of t honest parties).
Decision trees and other query learners run on the same protocol through
:class:`veil.fl.hybrid.run.HybridAggregator`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import dp_accounting
import numpy as np

from veil._validation import check_choice, check_delta, check_int
from veil.dp.distributed import NOISES
from veil.dp.ledger import Ledger
from veil.dp.privacy_budget import PrivacyBudget, check_budget
from veil.dp.trust import Trust, check_trust
from veil.errors import ConfigError
from veil.fl.hybrid.fit import plan_multiplier
from veil.fl.hybrid.protocol import (
    Agreement,
    HybridClient,
    HybridKeys,
    HybridServer,
    QueryEncoding,
    deal_keys,
    make_identities,
    next_run,
)
from veil.fl.protocol import ClientProtocol, ServerRound
from veil.fl.strategies.base import Privacy, Strategy
from veil.fl.trainer import LocalTrainer
from veil.learn.private.queries import GradientQueries
from veil.learn.queries import QueryAnswer
from veil.random import Generator, RngLike

__all__ = ["Hybrid"]


class Hybrid(Strategy):
    """Truex et al.'s hybrid approach for ``trust.parties`` parties trusting that
    ``trust.honest`` of them are honest (see the module docstring).

    Parameters
    ----------
    trust: the :class:`~veil.dp.trust.Trust` (n parties, t honest); the decryption
        threshold is ``trust.threshold`` = n - t + 1. It is the one given to the key
        generation, the agreement and the noise mechanism.
    rounds: the planned number of rounds (the noise is calibrated for all of them).
    budget: the :class:`~veil.dp.PrivacyBudget` the rounds share: the noise is calibrated
        for it, each party's own ledger caps it, and the federation's ledger must hold it;
        or give ``noise_multiplier`` (and the ``delta`` its mechanism is stated at,
        default 1e-6) instead.
    noise: "skellam" (integer, exact accounting; default), "gaussian" or "laplace".
    learning_rate, clip_norm, count_weight, max_records: as
        :class:`~veil.learn.private.GradientQueries` (max_records bounds one party's
        records and sets the encoding's width).
    keys: the dealer's output (default: made now with ``key_bits``, ``primes``,
        ``insecure_ok``, by a dealer or, ``keygen="distributed"``, by the parties
        together: :func:`veil.fl.hybrid.protocol.deal_keys`); packed: many values per
        ciphertext; min_answers: n or None (an encrypted sum needs every party's answer:
        :mod:`veil.fl.hybrid.protocol`).
    identities: the parties' Ed25519 identity public keys, when each party made its own
        (a deployment: :mod:`veil.fl.hybrid.setup`); then ``keys`` is the public set-up's
        key with no shares (the aggregator holds none) and each party is built on its own
        machine with :meth:`party`. Default: simulated here at set-up.
    """

    def __init__(self, trust: Trust, *, rounds: int,
                 budget: PrivacyBudget | None = None, noise: str = "skellam",
                 noise_multiplier: float | None = None, delta: float | None = None,
                 learning_rate: float = 1.0, clip_norm: float = 1.0, count_weight: float = 0.25,
                 max_records: int = 2 ** 16, keys: HybridKeys | None = None,
                 key_bits: int = 2048, primes: Any = None, insecure_ok: bool = False,
                 keygen: str = "dealer",
                 packed: bool = True, min_answers: int | None = None,
                 identities: Sequence[bytes] | None = None,
                 rng: RngLike = None) -> None:
        self.trust = trust = check_trust(trust)
        self.parties = trust.parties
        self.rounds = check_int(rounds, "rounds", low=1)
        if (budget is None) == (noise_multiplier is None):
            raise ConfigError(f"budget={budget!r}, noise_multiplier={noise_multiplier!r}: "
                              "give exactly one of them")
        self.budget = None if budget is None else check_budget(budget)
        if self.budget is not None and delta is not None:
            raise ConfigError(f"delta={delta!r} is not allowed with budget=: the budget "
                              f"holds the delta ({self.budget})")
        self.delta = self.budget.delta if self.budget is not None else \
            check_delta(1e-6 if delta is None else delta)
        self.noise = check_choice(noise, "noise", tuple(NOISES))
        self.noise_multiplier = noise_multiplier
        self.learner_options = {"rounds": self.rounds, "learning_rate": learning_rate,
                                "clip_norm": clip_norm, "count_weight": count_weight,
                                "max_records": max_records}
        self.packed = bool(packed)
        self.min_answers = min_answers
        self.min_clients = self.parties
        if keys is None:
            keys = deal_keys(trust, bits=key_bits, primes=primes, keygen=keygen,
                             insecure_ok=insecure_ok, rng=rng)
        if (keys.public_key.parties, keys.public_key.threshold) != (trust.parties,
                                                                    trust.threshold):
            raise ConfigError(f"keys are {keys.public_key.threshold}-of-"
                              f"{keys.public_key.parties}; {trust} needs "
                              f"{trust.threshold}-of-{trust.parties}")
        # the dealer's shares are handed to their parties by client(), and forgotten here
        self.public_key = keys.public_key
        self._shares: list[Any] = list(keys.shares) or [None] * self.parties
        self._identities: list[bytes | None] = []
        self._public = None if identities is None else tuple(identities)
        self.agreement: Agreement | None = None
        self.learner: GradientQueries | None = None
        self._last: HybridServer | None = None   # its run id serves the run's later rounds

    # -- set-up, once the model is known ----------------------------------------------------
    def _setup(self, model: Any) -> None:
        self.learner = GradientQueries(copy.deepcopy(model), **self.learner_options)
        z = self.noise_multiplier
        if z is None:
            z = plan_multiplier(self.learner, self.noise, self.budget.epsilon, self.delta,
                                accountant=self.budget.accountant)
        if self._public is None:
            # each party makes its identity key at set-up (simulated here; make_identities)
            self._identities, public = make_identities(self.parties)
        else:
            self._identities, public = [None] * self.parties, self._public
        self.agreement = Agreement(self.parties, "hybrid", trust=self.trust, noise=self.noise,
                                   noise_multiplier=z, delta=self.delta, packed=self.packed,
                                   min_answers=self.min_answers, identities=public)

    def prepare(self, model: Any) -> None:
        if self.learner is None:
            self._setup(model)

    def _ready(self) -> tuple[GradientQueries, Agreement]:
        if self.learner is None or self.agreement is None:
            raise ConfigError("Hybrid is set up by its first client(): run it through "
                              "veil.fl.Federation")
        return self.learner, self.agreement

    def client(self, client_id: int, trainer: LocalTrainer) -> ClientProtocol:
        if not 0 <= client_id < self.parties:
            raise ConfigError(f"client {client_id} is not allowed: this Hybrid strategy was "
                              f"set up for parties 0..{self.parties - 1}")
        if self.learner is None:
            self._setup(trainer.model)
        share, identity = self._shares[client_id], self._identities[client_id]
        if share is None or identity is None:
            raise ConfigError(f"this strategy holds no key share for party {client_id}: it was "
                              "already handed to the party, or the party holds its own "
                              "(build it on its machine with Hybrid.party)")
        self._shares[client_id] = self._identities[client_id] = None
        # the party's own budget: it refuses a query that would overspend it
        ledger = None if self.budget is None else Ledger.for_budget(self.budget)
        return self.party(client_id, trainer, share, identity, ledger)

    def party(self, client_id: int, trainer: LocalTrainer, key_share: Any, identity: bytes,
              ledger: Ledger | None) -> HybridClient:
        """Party ``client_id`` with its own key share, identity private key and ledger (on
        its own machine: :mod:`veil.fl.hybrid.setup`); its plan is this strategy's."""
        if self.learner is None:
            self._setup(trainer.model)
        _, agreement = self._ready()
        if key_share.public_key != self.public_key:
            raise ConfigError(f"party {client_id}'s key share is under key "
                              f"{key_share.public_key.fingerprint.hex()[:16]}, not this "
                              f"federation's {self.public_key.fingerprint.hex()[:16]}")
        party_learner = GradientQueries(trainer.model, **self.learner_options)
        return HybridClient(client_id, trainer.X, trainer.y, agreement, learner=party_learner,
                            key_share=key_share, identity=identity, ledger=ledger)

    # -- the server side --------------------------------------------------------------------
    def sample(self, server_round: int, clients: Sequence[int], rng: Generator) -> list[int]:
        if len(clients) != self.parties:
            raise ConfigError(f"{len(clients)} clients; this Hybrid strategy was set up for "
                              f"{self.parties} parties")
        return sorted(clients)

    def round_event(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
                    population: int) -> dp_accounting.DpEvent:
        learner, agreement = self._ready()
        return agreement.mechanism(learner.shape).event

    @property
    def ciphertexts(self) -> int:
        """Ciphertexts each party sends per round: the encryption noises it needs. Fill the
        parties' pools for k rounds before they run (offline) with
        ``runtime.call(federation.clients, HybridClient.precompute, k * ciphertexts)``."""
        learner, agreement = self._ready()
        return QueryEncoding(learner.shape, agreement, self.public_key.bits).ciphertexts

    @property
    def privacy(self) -> Privacy:
        """Noise shared among the parties, answers hidden in threshold ciphertexts, and the
        agreed mechanism for the model's shape: the same event every round."""
        return Privacy(noise="distributed", secure_aggregation=True, fixed_event=True,
                       budget=self.budget)

    def server(self, server_round: int, params: np.ndarray, sampled: Sequence[int],
                     rng: Generator) -> ServerRound:
        learner, agreement = self._ready()
        learner.params = np.asarray(params, dtype=np.float64).copy()
        query = learner.next_query()
        if query is None:
            raise ConfigError(f"server_round={server_round} is not allowed: this Hybrid "
                              "strategy was planned (and its noise calibrated) for "
                              f"{learner.rounds} rounds")

        def step(answer: QueryAnswer) -> np.ndarray:
            learner.update(query, answer)
            return learner.params

        self._last = HybridServer(server_round, sampled, query, agreement, self.public_key,
                                  finish=step, run=next_run(self._last), rng=rng)
        return self._last

    def state_dict(self) -> dict[str, Any]:
        learner, _ = self._ready()
        return {"round": learner.round, "counts": list(learner.counts)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        learner, _ = self._ready()
        learner.round = int(state.get("round", 0))
        learner.counts = [float(c) for c in state.get("counts", [])]
