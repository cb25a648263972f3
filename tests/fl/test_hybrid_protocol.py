"""The hybrid protocol: exact sums, the result distributions of central and local DP,
dropouts, wrong partial decryptions, foreign keys, clipping, and the aggregator's view."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from veil.crypto import paillier, serialization, threshold
from veil.dp.trust import Trust
from veil.errors import ConfigError, ProtocolError
from veil.fl import Faults, LocalRuntime, Message
from veil.fl.hybrid.fit import SimulatedAggregator, fit_queries
from veil.fl.hybrid.protocol import (
    Agreement,
    HybridClient,
    HybridServer,
    _query_body,
    deal_keys,
)
from veil.fl.hybrid.run import HybridAggregator
from veil.learn.queries import Query, QueryLearner, QueryShape
from veil.random import Generator

BITS = 512          # test keys (insecure_ok): the protocol does not depend on the size
N = 4


@pytest.fixture(scope="module")
def primes():
    return threshold.generate_safe_primes(BITS, insecure_ok=True, rng=41)


def keys_for(primes, trust, parties=N):
    return deal_keys(Trust(parties, trust), bits=BITS, primes=primes, insecure_ok=True,
                     rng=trust)


class SumQuery(QueryLearner):
    """One query: the column sums of X (each record clipped to L1 norm <= 1 by its bound)."""

    def __init__(self, size=3, bound=100.0, integer=False):
        self.shape = QueryShape(size, l1=1.0, l2=1.0, bound=bound, integer=integer,
                                frac_bits=0 if integer else 8)
        self.done = False
        self.result = None

    def plan(self):
        # the tests ask the same query many times to see the noise's distribution: the
        # parties answer no more queries than their plan lists
        return [self.shape] * 10_000

    def next_query(self):
        return None if self.done else Query("column sums", self.shape, {"columns": self.shape.size})

    def answer(self, query, X, y):
        return X[:, :query.spec["columns"]].sum(axis=0), 0

    def update(self, query, aggregate):
        self.result, self.done = aggregate, True

    @property
    def model(self):
        return self.result


def _data(parties=N, rows=5, seed=0, integer=False):
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(parties):
        X = gen.integers(0, 3, size=(rows, 3)) if integer else gen.uniform(0, 0.3, size=(rows, 3))
        out.append((X.astype(float), np.zeros(rows)))
    return out


def _truth(data):
    return sum(X.sum(axis=0) for X, _ in data)


def _agreement(method, trust=None, noise="gaussian", z=2.0, **kw):
    return Agreement(N, method, trust=None if trust is None else Trust(N, trust), noise=noise,
                     noise_multiplier=z, delta=1e-5, **kw)


def test_smc_sum_is_exact_and_equals_the_simulation(primes):
    data = _data(integer=True)
    for packed in (True, False):
        agg = HybridAggregator(data, _agreement("smc", trust=2, packed=packed),
                               runtime=LocalRuntime(), keys=keys_for(primes, 2))
        answer = agg.aggregate(SumQuery(integer=True).next_query(), SumQuery(integer=True),
                               party_noise=None, server_noise=None, rng=1)
        assert np.array_equal(answer.values, _truth(data))
        assert answer.noise_std == 0 and answer.parties == tuple(range(N))
        sim = SimulatedAggregator(data).aggregate(SumQuery(integer=True).next_query(),
                                                  SumQuery(integer=True), party_noise=None,
                                                  server_noise=None, rng=1)
        assert np.array_equal(answer.values, sim.values)
    # packing: one ciphertext for the three values instead of three
    assert agg.reports[-1].bytes_up > 0
    packed_agg = HybridAggregator(data, _agreement("smc", trust=2), runtime=LocalRuntime(),
                                  keys=keys_for(primes, 2))
    packed_agg.aggregate(SumQuery().next_query(), SumQuery(), party_noise=None,
                         server_noise=None, rng=1)
    assert packed_agg.reports[-1].bytes_up < agg.reports[-1].bytes_up


def _noisy_sums(agg, agreement, repeats, seed, learner=None):
    """``repeats`` answers to the same query through ``agg``, with the agreed noise."""
    learner = learner or SumQuery()
    query = learner.next_query()
    mech = agreement.mechanism(query.shape)
    party = mech if agreement.party_noise else None
    server = None if agreement.party_noise else mech
    gen = Generator(seed, simulate_noise=True)   # reproducible noise: a test simulation
    return np.array([agg.aggregate(query, learner, party_noise=party, server_noise=server,
                                   rng=gen).values for _ in range(repeats)])


def test_t_equal_n_is_central_dp_and_t_one_is_local_dp(primes):
    """Through the real protocol, the noisy sum minus the true sum is N(0, z^2 S^2) for t = n
    (as central DP) and N(0, n z^2 S^2) for t = 1 (as local DP); KS at level 1e-3, and a
    two-sample KS against the central/local baselines run through the same code."""
    data = _data()
    truth = _truth(data)
    sigma = 2.0   # z = 2, S = 1
    runs = {}
    for name, method, trust in (("t=n", "hybrid", N), ("t=1", "hybrid", 1),
                                ("central", "central", None), ("local", "local", None)):
        agreement = _agreement(method, trust=trust)
        keys = keys_for(primes, trust) if agreement.encrypted else None
        agg = HybridAggregator(data, agreement, runtime=LocalRuntime(), keys=keys)
        runs[name] = (_noisy_sums(agg, agreement, 150, seed=len(name)) - truth).ravel()
    assert stats.kstest(runs["t=n"], stats.norm(scale=sigma).cdf).pvalue > 1e-3
    assert stats.kstest(runs["t=1"], stats.norm(scale=sigma * math.sqrt(N)).cdf).pvalue > 1e-3
    assert stats.ks_2samp(runs["t=n"], runs["central"]).pvalue > 1e-3
    assert stats.ks_2samp(runs["t=1"], runs["local"]).pvalue > 1e-3
    # and the test can tell them apart: t = n is not local DP
    assert stats.ks_2samp(runs["t=n"], runs["local"]).pvalue < 1e-6


def test_protocol_and_noise_only_simulation_have_the_same_distribution(primes):
    """The accuracy sweeps skip encryption: check that the encrypted protocol's Skellam
    sums have the simulation's distribution: two-sample KS at level 1e-3 (conservative on
    integers) and both variances within 5 standard errors of the stated n/t (z S)^2."""
    data = _data(integer=True)
    learner = SumQuery(integer=True)
    agreement = _agreement("hybrid", trust=2, noise="skellam", z=3.0)
    real = _noisy_sums(HybridAggregator(data, agreement, runtime=LocalRuntime(),
                                        keys=keys_for(primes, 2)), agreement,
                       150, seed=5, learner=learner).ravel()
    sim = _noisy_sums(SimulatedAggregator(data), agreement, 150, seed=6,
                      learner=learner).ravel()
    assert stats.ks_2samp(real, sim).pvalue > 1e-3
    truth = np.tile(_truth(data), 150)
    # both are Skellam around the truth with variance n/t * (z S)^2 = 2 * 9
    for values in (real, sim):
        assert np.array_equal(values, np.round(values))
        assert abs(np.var(values - truth) - 18.0) < 5 * math.sqrt(2 * 18.0 ** 2 / values.size)


def test_dropouts_up_to_t_minus_one_at_decryption_are_survived(primes):
    data = _data(integer=True)
    n, t = N, 3                    # threshold = 2: one more than the n - t = 1 colluders
    agreement = _agreement("smc", trust=t)
    keys = keys_for(primes, t)
    for drop in range(t):          # 0, 1, 2 = t - 1 parties go offline at decryption
        runtime = LocalRuntime(Faults(dropout=drop / n, dropout_exact=True,
                                      dropout_stage="decrypt"))
        agg = HybridAggregator(data, agreement, keys=keys, runtime=runtime)
        answer = agg.aggregate(SumQuery(integer=True).next_query(), SumQuery(integer=True),
                               party_noise=None, server_noise=None, rng=drop)
        assert np.array_equal(answer.values, _truth(data))
        assert len(agg.reports[-1].dropped) == drop
    # t parties offline: fewer than threshold alive, a clear failure
    runtime = LocalRuntime(Faults(dropout=t / n, dropout_exact=True, dropout_stage="decrypt"))
    agg = HybridAggregator(data, agreement, keys=keys, runtime=runtime)
    with pytest.raises(ProtocolError, match="fewer than threshold = 2 parties alive"):
        agg.aggregate(SumQuery(integer=True).next_query(), SumQuery(integer=True),
                      party_noise=None, server_noise=None, rng=9)


def test_any_threshold_subset_decrypts_the_aggregate_and_fewer_cannot(primes):
    keys = keys_for(primes, 2)          # 3-of-4
    pk = keys.public_key
    total = pk.encrypt(np.array([5, -7]), rng=1) + pk.encrypt(np.array([1, 1]), rng=2)
    partials = [s.partial_decrypt(total) for i, s in enumerate(keys.shares)]
    for subset in itertools.combinations(partials, 3):
        assert pk.combine(list(subset), ciphertext=total).tolist() == [6, -6]
    for subset in itertools.combinations(partials, 2):
        with pytest.raises(Exception, match="need 3"):
            pk.combine(list(subset), ciphertext=total)


class LyingClient(HybridClient):
    """Returns a partial decryption of another ciphertext than the aggregate."""

    def _on_decrypt(self, msg, rng):
        ct = self._aggregate(msg)
        other = ct + self.key_share.public_key.encrypt(np.ones(ct.shape[0], dtype=np.int64),
                                                       rng=rng)
        partial = self.key_share.partial_decrypt(other)
        forged = threshold.PartialDecryption(partial.public_key, partial.party, partial.values,
                                             self.key_share.public_key._digest(
                                                 np.asarray(ct._raw, dtype=object)),
                                             partial.proof)
        return [self.reply(msg, partial=serialization.dumps(forged))]


def test_wrong_partial_decryption_is_caught_named_and_replaced(primes):
    data = _data(integer=True)
    keys = keys_for(primes, 2)            # threshold = 3 of 4: one spare party
    agreement = _agreement("smc", trust=2)
    for liar in range(N):
        agg = HybridAggregator(data, agreement, runtime=LocalRuntime(), keys=keys)
        X, y = data[liar]
        agg.clients[liar] = LyingClient(liar, X, y, agg.agreement, key_share=keys.shares[liar],
                                        identity=agg.clients[liar]._identity)
        answer = agg.aggregate(SumQuery(integer=True).next_query(), SumQuery(integer=True),
                               party_noise=None, server_noise=None, rng=liar)
        assert np.array_equal(answer.values, _truth(data))      # decrypted without it
        asked = answer.metrics["decryptions"]
        if answer.metrics["excluded"]:
            assert asked == 3 and answer.metrics["excluded"] == 1
    # the liar is named when it was among the first asked; run until it is
    found = False
    for seed in range(20):
        agg = HybridAggregator(data, agreement, runtime=LocalRuntime(), keys=keys)
        agg.clients[0] = LyingClient(0, *data[0], agg.agreement, key_share=keys.shares[0],
                                     identity=agg.clients[0]._identity)
        query, learner = SumQuery(integer=True).next_query(), SumQuery(integer=True)
        server = HybridServer(0, range(N), query, agg.agreement, keys.public_key, rng=seed)
        for c in agg.clients.values():
            c.learner = learner
        report = agg.runtime.run_round(server, agg.clients, seed)
        assert report.completed
        if 0 in server.excluded:
            assert "caught by its proof" in server.excluded[0]
            found = True
            break
    assert found


class ForeignKeyClient(HybridClient):
    """Encrypts its answer under a key of its own."""

    def __init__(self, *args, other_key, **kwargs):
        super().__init__(*args, **kwargs)
        self.other_key = other_key

    def _on_answer(self, msg, rng):
        return [self.reply(msg, ciphertexts=serialization.dumps(
            self.other_key.encrypt(np.zeros(1, dtype=np.int64), rng=rng)))]


def test_a_ciphertext_under_another_key_is_rejected(primes):
    data = _data(integer=True)
    keys = keys_for(primes, 2)
    other, _ = paillier.keygen(BITS, insecure_ok=True, rng=7)
    agg = HybridAggregator(data, _agreement("smc", trust=2), runtime=LocalRuntime(), keys=keys)
    agg.clients[1] = ForeignKeyClient(1, *data[1], agg.agreement, key_share=keys.shares[1],
                                      identity=agg.clients[1]._identity, other_key=other)
    args = (SumQuery(integer=True).next_query(), SumQuery(integer=True))
    # every answer is needed (an encrypted sum has no quorum below n): the round aborts
    with pytest.raises(ProtocolError, match="3 of 4 parties answered"):
        agg.aggregate(*args, party_noise=None, server_noise=None, rng=1)
    rejected = agg.reports[-1].rejected
    assert any(cid == 1 and "different key" in why for cid, why in rejected)


def test_answers_beyond_the_bound_are_clipped_and_counted(primes, caplog):
    data = _data(integer=True)
    data[2] = (data[2][0] + 50, data[2][1])           # party 2's sums exceed the bound 100
    agreement = _agreement("smc", trust=2)
    agg = HybridAggregator(data, agreement, runtime=LocalRuntime(), keys=keys_for(primes, 2))
    learner = SumQuery(bound=100.0, integer=True)
    answer = agg.aggregate(learner.next_query(), learner, party_noise=None, server_noise=None,
                           rng=1)
    clipped = np.minimum(data[2][0].sum(axis=0), 100)
    expected = _truth(data) - data[2][0].sum(axis=0) + clipped
    assert np.array_equal(answer.values, expected)
    assert agg.clients[2].clipped == 3 and answer.clipped == 3
    assert all(agg.clients[i].clipped == 0 for i in (0, 1, 3))
    assert "party 2 clipped 3 value(s)" in caplog.text


def test_the_aggregator_sees_only_ciphertexts_and_the_noisy_aggregate(primes):
    data = _data()
    agreement = _agreement("hybrid", trust=2, noise="skellam")
    keys = keys_for(primes, 2)
    runtime = LocalRuntime(Faults(dropout=0.25, dropout_exact=True, dropout_stage="decrypt"),
                           record=True)
    agg = HybridAggregator(data, agreement, keys=keys, runtime=runtime)
    learner = SumQuery()
    query = learner.next_query()
    answer = agg.aggregate(query, learner, party_noise=agreement.mechanism(query.shape),
                           server_noise=None, rng=3)
    inbox = agg.reports[-1].server_inbox
    assert len(inbox) >= N + 3
    kinds = set()
    for raw in inbox:
        msg = Message.from_bytes(raw)
        assert set(msg.body) in ({"nonce"}, {"ciphertexts", "signature"}, {"partial"}), \
            msg.body.keys()
        if "nonce" in msg.body:           # the run's set-up: a fresh nonce, nothing else
            continue
        field = "partial" if "partial" in msg.body else "ciphertexts"
        blob = msg.body[field]
        obj = serialization.loads(blob, public_key=keys.public_key)
        kinds.add(type(obj).__name__)
        if field == "ciphertexts":
            assert isinstance(obj, paillier.EncryptedArray)
        else:
            assert isinstance(obj, threshold.PartialDecryption)
    assert kinds == {"EncryptedArray", "PartialDecryption"}
    # what the aggregator decrypts is the noisy sum, not any party's answer
    assert answer.noise_std > 0
    for X, _ in data:
        assert not np.allclose(answer.values, X.sum(axis=0))


def test_fit_queries_through_the_protocol_matches_the_simulation(primes):
    """A whole learner (several queries) through encryption: no noise gives the same model."""
    from veil.learn.tree import ID3Queries

    gen = np.random.default_rng(3)
    X = gen.integers(0, 3, size=(400, 4))
    y = np.where(X[:, 1] == 2, 1, 0) ^ (X[:, 3] == 0)
    parts = np.array_split(np.arange(400), N)
    data = [(X[p], y[p]) for p in parts]
    agreement = _agreement("smc", trust=3)
    real = fit_queries(ID3Queries([3] * 4, [0, 1], max_depth=3),
                       HybridAggregator(data, agreement, runtime=LocalRuntime(),
                                        keys=keys_for(primes, 3)),
                       method="smc")
    sim = fit_queries(ID3Queries([3] * 4, [0, 1], max_depth=3), SimulatedAggregator(data),
                      method="smc")
    assert real.model.structure() == sim.model.structure()
    assert real.queries == sim.queries >= 2
    assert all(a.metrics["bytes_up"] > 0 for a in real.answers)


def test_the_noise_mechanism_is_built_once_per_query_shape():
    """Every round asked the agreement for its mechanism, and every party did too, and each
    call rebuilt (and re-calibrated) it: the same shape now gives the same mechanism
    object, another shape its own."""
    agreement = _agreement("hybrid", trust=2, noise="skellam")
    shape = QueryShape(size=3, l1=1.0, l2=1.0, bound=1.0, frac_bits=8)
    other = QueryShape(size=4, l1=1.0, l2=1.0, bound=1.0, frac_bits=8)
    first = agreement.mechanism(shape)
    assert agreement.mechanism(shape) is first
    assert agreement.mechanism(other) is not first
    assert first.trust == Trust(N, 2)
    # the cache is not part of the agreement's value: equal agreements stay equal
    assert agreement == _agreement("hybrid", trust=2, noise="skellam")


def test_bad_configuration():
    with pytest.raises(ConfigError, match="t"):
        Agreement(4, "hybrid", trust=Trust(4, 5), noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="trust=None"):
        Agreement(4, "hybrid", noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="noise_multiplier"):
        Agreement(4, "local")
    with pytest.raises(ConfigError, match="method"):
        Agreement(4, "secure")
    with pytest.raises(ConfigError, match="t"):
        deal_keys(Trust(4, 0), bits=BITS, insecure_ok=True)
    with pytest.raises(ConfigError):
        deal_keys(Trust(4, 2), bits=BITS)       # small keys need insecure_ok
    # t is given once, as one Trust: a bare count, or the Trust of another party count, is
    # refused where it would have been validated again
    with pytest.raises(ConfigError, match=r"trust=2 is not allowed: expected .*Trust\("):
        deal_keys(2, bits=BITS, insecure_ok=True)
    with pytest.raises(ConfigError, match=r"Trust\(parties=5, honest=2\) is not allowed"):
        Agreement(4, "hybrid", trust=Trust(5, 2), noise_multiplier=1.0)


def _answered(primes, agreement_kw=None, learner=None):
    """Four parties that answered round 0's query, the aggregator's server, the replies."""
    data = _data(integer=True)
    agg = HybridAggregator(data, _agreement("hybrid", trust=2, noise="skellam",
                                            **(agreement_kw or {})),
                           runtime=LocalRuntime(), keys=keys_for(primes, 2))
    learner = learner or SumQuery(integer=True)
    for c in agg.clients.values():
        c.learner = learner
    server = HybridServer(0, range(N), learner.next_query(), agg.agreement,
                          agg.public_key, rng=1)
    replies = {m.recipient: agg.clients[m.recipient].handle(m, Generator(m.recipient))[0]
               for m in _answer_requests(server, agg.clients)}
    return agg, server, replies


def _answer_requests(server, parties):
    """The run's set-up (every party joins), then the server's query to each party."""
    requests = server.start()
    if requests[0].stage == "join":
        for msg in requests:
            server.receive(parties[msg.recipient].handle(msg, Generator(msg.recipient))[0])
        requests = server.close_stage()
    return requests


def _decrypt_request(party, answers):
    return Message("hybrid", 0, "decrypt", -1, party, {"answers": answers})


def test_a_party_is_no_decryption_oracle(primes):
    """A party partially decrypted any ciphertext it was sent: one request stacking every
    answer revealed each party's answer. Now it decrypts only the product it computes from
    enough answers signed by distinct parties, once per round."""
    agg, server, replies = _answered(primes)
    signed = {i: [r.body["ciphertexts"], r.body["signature"]] for i, r in replies.items()}
    party = agg.clients[0]
    rng = Generator(0)
    # one party's answer alone (or any set smaller than the quorum, here n = 4)
    with pytest.raises(ProtocolError, match="signed answers"):
        party.handle(_decrypt_request(0, {1: signed[1]}), rng)
    # the other answers forged by the aggregator (encryptions of 0 it signed itself)
    zero = serialization.dumps(agg.public_key.encrypt(np.zeros(1, dtype=np.int64)))
    forged = {**signed, **{j: [zero, bytes(64)] for j in (0, 2, 3)}}
    with pytest.raises(ProtocolError, match="valid signature"):
        party.handle(_decrypt_request(0, forged), rng)
    # a signed answer passed off as another party's
    with pytest.raises(ProtocolError, match="valid signature"):
        party.handle(_decrypt_request(0, {**signed, 3: signed[1]}), rng)
    # the honest request is served once; a second sum in the same round is refused (two
    # sums that differ by one answer would reveal it)
    (reply,) = party.handle(_decrypt_request(0, signed), rng)
    assert "partial" in reply.body
    without_3 = {j: v for j, v in signed.items() if j != 3}
    with pytest.raises(ProtocolError, match="already handled"):
        party.handle(_decrypt_request(0, without_3), rng)


def test_a_party_takes_the_query_from_its_own_plan(primes):
    """A claimed sensitivity of 1e-6 made the parties' noise vanish; a party also answered
    queries beyond its plan."""
    data = _data(integer=True)
    agg = HybridAggregator(data, _agreement("hybrid", trust=2, noise="skellam"),
                           runtime=LocalRuntime(), keys=keys_for(primes, 2))
    learner = SumQuery(integer=True)
    party = agg.clients[0]
    party.learner = learner
    honest = learner.next_query()
    tiny = Query("column sums", QueryShape(3, l1=1e-6, l2=1e-6, bound=100.0, integer=True),
                 honest.spec)
    for query in (tiny,):
        server = HybridServer(0, range(N), query, agg.agreement, agg.public_key, rng=1)
        request = next(m for m in _answer_requests(server, agg.clients) if m.recipient == 0)
        with pytest.raises(ProtocolError, match="not in this party's plan"):
            party.handle(request, Generator(0))

    class OneQuery(SumQuery):
        def plan(self):
            return [self.shape]

    party.learner = OneQuery(integer=True)
    for r in (1, 2):
        server = HybridServer(r, range(N), honest, agg.agreement, agg.public_key, rng=1)
        request = next(m for m in _answer_requests(server, agg.clients) if m.recipient == 0)
        if r == 1:
            party.handle(request, Generator(0))
        else:
            with pytest.raises(ProtocolError, match="all that its plan has"):
                party.handle(request, Generator(0))


def test_a_party_charges_its_own_ledger_and_refuses_beyond_it(primes):
    from veil.dp import Ledger
    from veil.errors import BudgetExceededError

    agg, server, _ = _answered(primes)
    query = SumQuery(integer=True).next_query()
    cost = agg.agreement.mechanism(query.shape).event
    ledger = Ledger(1e9, 1e-5)
    ledger.charge(cost)
    budget = ledger.spent(1e-5)[0] * 1.01         # room for one query, not two
    party = agg.clients[1]
    party.ledger = Ledger(budget, 1e-5)
    party.answered = 0
    for r in (1, 2):
        server = HybridServer(r, range(N), query, agg.agreement, agg.public_key, rng=1)
        request = next(m for m in _answer_requests(server, agg.clients) if m.recipient == 1)
        if r == 1:
            party.handle(request, Generator(0))
        else:
            with pytest.raises(BudgetExceededError):
                party.handle(request, Generator(0))
    # the party planned the one query its budget holds, and refused the next
    assert [c.kind for c in party.ledger.history()] == ["plan", "step"]


def test_min_answers_below_t_is_refused():
    """n = 10, t = 10, min_answers = 1 let the aggregator decrypt one party's answer,
    charged as full central DP."""
    with pytest.raises(ConfigError, match="min_answers=1"):
        Agreement(10, "hybrid", trust=Trust(10, 10), noise_multiplier=1.0, min_answers=1)
    assert Agreement(10, "hybrid", trust=Trust(10, 4), noise_multiplier=1.0,
                     min_answers=10).min_answers \
        == 10


# -- issue #29 items 2, 3 and #28 item 5: one decryption per (run, round, query) ---------------
def _until_decrypt(server, parties, rng=0):
    """Run the honest stages before ``decrypt``: the server's decrypt requests and the
    signed answers each party sent."""
    requests, signed = server.start(), {}
    while requests and requests[0].stage != "decrypt":
        for msg in requests:
            (reply,) = parties[msg.recipient].handle(msg, Generator(rng + msg.recipient))
            if msg.stage == "answer":
                signed[msg.recipient] = [reply.body["ciphertexts"], reply.body["signature"]]
            server.receive(reply)
        requests = server.close_stage()
    return requests, signed


def _combine(server, parties, signed, decryptors, round_=0):
    """The sum of the answers in ``signed``, decrypted by ``decryptors`` (each partially
    decrypting the product it computes itself)."""
    key = server.public_key
    partials, total = [], None
    for p in decryptors:
        (reply,) = parties[p].handle(Message("hybrid", round_, "decrypt", -1, p,
                                             {"answers": signed}), Generator(p))
        partials.append(serialization.loads(reply.body["partial"], public_key=key))
    for blob, _ in signed.values():
        ct = serialization.loads(blob, public_key=key)
        total = ct if total is None else total + ct
    return server.encoding.values(key.combine(partials, ciphertext=total)).astype(float)


def test_two_groups_cannot_decrypt_two_sums_whose_difference_is_one_answer(primes):
    """#29 item 2: n = 4, t = 3 (threshold = 2), min_answers = 3. Parties 0 and 1 decrypt the
    product of the answers of {0, 1, 2}; parties 2 and 3 that of all four answers (each
    party decrypts once per round, as the protocol asks): the difference of the two sums
    is party 3's answer alone (here, without noise, exactly). The quorum is now fixed at n
    for every encrypted method, and a party decrypts only the product of all n answers."""
    data = _data(integer=True)
    keys = keys_for(primes, 3)
    try:
        agreement = _agreement("smc", trust=3, min_answers=3)
    except ConfigError as exc:
        assert "min_answers=3" in str(exc)
        agreement = _agreement("smc", trust=3)
    agg = HybridAggregator(data, agreement, runtime=LocalRuntime(), keys=keys)
    learner = SumQuery(integer=True)
    for c in agg.clients.values():
        c.learner = learner
    server = HybridServer(0, range(N), learner.next_query(), agg.agreement, agg.public_key,
                          rng=1)
    _, signed = _until_decrypt(server, agg.clients)
    three = {j: signed[j] for j in (0, 1, 2)}
    try:
        first = _combine(server, agg.clients, three, (0, 1))
    except ProtocolError as exc:
        assert "signed answers" in str(exc)
        return
    second = _combine(server, agg.clients, signed, (2, 3))
    pytest.fail(f"party 3's answer {second - first} was decrypted alone (true "
                f"{data[3][0].sum(axis=0)})")


def test_the_aggregator_cannot_drop_honest_answers_down_to_a_quorum():
    """#28 item 5: n = 10, t = 8, min_answers = 8: a malicious aggregator drops two honest
    answers, and the sum holds only 2t - n = 6 honest noise shares where t = 8 were charged
    (true epsilon 1.169 where 0.999 is charged). Every encrypted method now needs all n
    answers; the clear baselines keep min_answers (their noise does not depend on it)."""
    for method in ("hybrid", "smc"):
        with pytest.raises(ConfigError, match="min_answers=8"):
            Agreement(10, method, trust=Trust(10, 8), noise_multiplier=1.0, min_answers=8)
    assert Agreement(10, "local", noise_multiplier=1.0, min_answers=8).min_answers == 8


class _PointQuery(SumQuery):
    """The column sums asked "at a model point" (spec), as a gradient query is."""

    def __init__(self, point):
        super().__init__(integer=True)
        self.point = point

    def next_query(self):
        return Query("column sums", self.shape, {"columns": 3, "point": float(self.point)})


def test_answers_from_an_earlier_run_cannot_be_mixed_into_a_decryption(primes):
    """#29 item 3: the parties keep their key shares and identity keys across runs (a
    deployment). In run A the aggregator collected every party's signed answer at model
    point 1 (and decrypted their sum); in run B it asks at point 2 and has a party decrypt
    the victim's new answer together with the others' answers from run A: the two sums
    differ by the victim's answers at two chosen points, with only the victim's noise.
    Answers bound only to (round, party, query name and shape) passed; now each binds the
    run id (every party's fresh nonce), the round and a hash of the whole query (its
    parameters included), and a party checks every answer against its own."""
    from veil.crypto.identity import make_identities

    data = _data(integer=True)
    keys = keys_for(primes, 2)
    privates, public = make_identities(N)
    agreement = _agreement("hybrid", trust=2, noise="skellam", identities=public)

    def parties(point):
        out = {}
        for i, (X, y) in enumerate(data):
            out[i] = HybridClient(i, X, y, agreement, learner=_PointQuery(point),
                                  key_share=keys.shares[i], identity=privates[i])
        return out

    run_a = parties(1)
    _, old = _until_decrypt(HybridServer(0, range(N), _PointQuery(1).next_query(), agreement,
                                         keys.public_key, rng=1), run_a)
    run_b = parties(2)
    _, new = _until_decrypt(HybridServer(0, range(N), _PointQuery(2).next_query(), agreement,
                                         keys.public_key, rng=2), run_b)
    mixed = {**old, 0: new[0]}                 # the victim's new answer, the others' old ones
    with pytest.raises(ProtocolError, match="signature"):
        run_b[1].handle(_decrypt_request(1, mixed), Generator(1))
    with pytest.raises(ProtocolError, match="signature"):   # a whole earlier run's answers
        run_b[2].handle(_decrypt_request(2, old), Generator(2))
    (reply,) = run_b[3].handle(_decrypt_request(3, new), Generator(3))
    assert "partial" in reply.body


def test_the_run_id_is_agreed_once_and_binds_every_later_round(primes):
    """A party answers only inside a run it joined with its own fresh nonce; the run's
    later rounds skip the join; answers of an earlier round of the same run are refused
    (round and query bound); a nonce table without the party's own nonce is refused."""
    agg, server, replies = _answered(primes)
    run = server.run_id
    assert run is not None and all(c.run_id == run for c in agg.clients.values())
    signed = {i: [r.body["ciphertexts"], r.body["signature"]] for i, r in replies.items()}
    learner = agg.clients[0].learner
    later = HybridServer(1, range(N), learner.next_query(), agg.agreement, agg.public_key,
                         run=run, rng=1)
    assert later.stages == ("answer", "decrypt")
    new = {m.recipient: agg.clients[m.recipient].handle(m, Generator(m.recipient))[0]
           for m in later.start()}
    with pytest.raises(ProtocolError, match="signature"):     # round 0's answers in round 1
        agg.clients[0].handle(Message("hybrid", 1, "decrypt", -1, 0, {"answers": signed}),
                              Generator(0))
    fresh = {i: [r.body["ciphertexts"], r.body["signature"]] for i, r in new.items()}
    (reply,) = agg.clients[1].handle(Message("hybrid", 1, "decrypt", -1, 1,
                                             {"answers": fresh}), Generator(1))
    assert "partial" in reply.body
    # a party that never joined a run refuses to answer
    stranger = HybridClient(0, *_data(integer=True)[0], agg.agreement,
                            learner=SumQuery(integer=True), key_share=agg.clients[0].key_share,
                            identity=agg.clients[0]._identity)
    request = next(m for m in later.start() if m.recipient == 0)
    with pytest.raises(ProtocolError, match="without having joined a run"):
        stranger.handle(Message("hybrid", 2, "answer", -1, 0, request.body), Generator(0))
    # a join whose nonce table leaves out (or changes) this party's own nonce
    opening = HybridServer(3, range(N), learner.next_query(), agg.agreement, agg.public_key,
                           rng=1)
    joins = opening.start()
    (mine,) = agg.clients[2].handle(joins[2], Generator(2))
    body = {**_query_body(opening.query), "nonces": {j: bytes(32) for j in range(N)}}
    with pytest.raises(ProtocolError, match="nonces"):
        agg.clients[2].handle(Message("hybrid", 3, "answer", -1, 2, body), Generator(2))
    assert agg.clients[2].run_id is None and mine.body["nonce"] != bytes(32)

