"""SecAgg / SecAgg+: exact sums under dropouts, clean failure, nothing unmasked on the wire."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

from veil.dp import Ledger
from veil.dp.accounting import make_accountant
from veil.errors import ConfigError, ProtocolError
from veil.fl import Faults, Federation, LocalRuntime, Message
from veil.fl.messages import SERVER, decode
from veil.fl.secagg import RoundPlanner, SecAggClient
from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg
from veil.learn import LogisticRegression


def _round(data, strategy, faults=None, seed=0, record=False):
    faults = faults or Faults()
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=seed)
    rng = fed._round_rng(0)
    server = strategy.server(0, fed.params, strategy.sample(0, sorted(fed.clients), rng),
                                   rng)
    report = LocalRuntime(faults, record=record).run_round(server, fed.clients, seed)
    return fed, server, report


@pytest.mark.parametrize("n, dropout, neighbours", [
    (10, 0.0, None), (10, 0.1, None), (10, 0.3, None),   # SecAgg: complete graph
    (30, 0.0, 16), (30, 0.1, 16), (30, 0.3, 16),         # SecAgg+: 16 neighbours
])
def test_sum_is_exact_within_quantization_under_dropouts(clients, known_updates, n, dropout,
                                                         neighbours):
    data = clients(n)
    inner = known_updates(scale=0.8, max_weight=100.0)
    # t = floor(threshold * degree) + 1 shares: 5 of 9 (complete graph), 9 of 16 (SecAgg+);
    # a threshold at most half the degree is refused (see test_clients_refuse_...)
    strategy = SecAgg(inner, bits=32, clip_range=1.0, neighbours=neighbours,
                      threshold=0.5, min_survivors=0.5)
    # exactly that share of the clients drops, at a random stage or after sharing secrets
    for seed, stage in enumerate([None, "masked_input", "unmask"]):
        faults = Faults(dropout=dropout, dropout_exact=True, dropout_stage=stage)
        fed, server, report = _round(data, strategy, faults, seed)
        assert report.completed, report.error
        survivors = report.result.clients
        # who drops at unmask has sent its masked input: it is in the sum
        assert n - round(dropout * n) <= len(survivors) <= n
        if stage == "masked_input":
            assert len(survivors) == n - round(dropout * n)
        w = np.array([min(len(data[i][1]), 100) / 100 for i in survivors])
        deltas = np.array([np.clip(w_i * inner.delta(*data[i]), -1, 1)
                           for w_i, i in zip(w, survivors)])
        exact = fed.initial_params + deltas.sum(axis=0) / w.sum()
        # rounding: each survivor's entries move by <= 1/(2 scale); the weights likewise
        bound = len(survivors) / (2 * server.plan.scale)
        w_err = len(survivors) / (2 * server.plan.extras_scale)
        tol = (bound + np.abs(deltas.sum(axis=0)) * w_err / (w.sum() - w_err)) / w.sum()
        assert np.all(np.abs(report.result.params - exact) <= tol + 1e-12)
        assert report.result.metrics["quantization_error"] == pytest.approx(bound)


def test_fails_cleanly_past_the_threshold(clients, known_updates):
    data = clients(10)
    strategy = SecAgg(known_updates(weighted=False), min_survivors=0.7)
    _, _, report = _round(data, strategy, Faults(dropout=0.6, dropout_exact=True,
                                                 dropout_stage="masked_input"))
    assert report.result is None
    assert "min_survivors=7 (too many dropouts)" in report.error
    # through a federation: the global model is untouched and the run goes on
    runtime = LocalRuntime(Faults(dropout=0.6, dropout_exact=True, dropout_stage="unmask"))
    fed = Federation(data, LogisticRegression(), SecAgg(known_updates(weighted=False)), 2,
                     rng=1, runtime=runtime)
    history = fed.run()
    assert [r["status"] for r in history.rounds] == ["aborted", "aborted"]
    assert "cannot be recovered" in history.rounds[0]["error"]
    np.testing.assert_array_equal(history.params, fed.initial_params)


def test_no_server_side_message_holds_an_unmasked_update(clients, known_updates):
    data = clients(8)
    inner = known_updates(scale=0.9, weighted=False)
    fed, server, report = _round(data, SecAgg(inner, bits=32), Faults(dropout=0.2), record=True,
                                 seed=3)
    assert report.completed
    plan = server.plan
    secrets = []
    for X, y in data:
        delta = inner.delta(X, y)
        q = np.rint(np.clip(delta, -1, 1) * plan.scale).astype(np.int64)
        secrets += [delta, q, q.astype(np.uint64) & np.uint64(2 ** 32 - 1)]
    arrays = []

    def walk(value):
        if isinstance(value, np.ndarray):
            arrays.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for data_bytes in report.server_inbox:
        msg = Message.from_bytes(data_bytes)
        assert msg.recipient == SERVER
        walk(msg.body)
        for blob in [v for v in msg.body.values() if isinstance(v, dict)]:
            for ct in blob.values():  # share ciphertexts do not decode as plaintext
                if isinstance(ct, bytes):
                    with pytest.raises(ProtocolError):
                        decode(ct)
    masked = [a for a in arrays if a.dtype == np.uint32]
    assert len(masked) == len(report.result.clients)
    for a in arrays:
        for s in secrets:
            body = a[:s.size].astype(np.float64)
            assert not np.allclose(body, s.astype(np.float64), atol=1e-6)
            # masked entries are uniform in Z_2^32: no correlation with any update
            if a.dtype == np.uint32 and np.std(s) > 0:
                assert abs(np.corrcoef(body, s.astype(np.float64))[0, 1]) < 0.99
    # pooled over every masked input (one input's few entries stray 2.6 sigma from 2^31
    # with probability ~1%): their mean is 2^31 within 6 standard deviations
    pooled = np.concatenate(masked).astype(np.float64)
    assert pooled.mean() == pytest.approx(2 ** 31, abs=6 * 2 ** 32 / np.sqrt(12 * pooled.size))


def test_malformed_masked_input_is_treated_as_a_dropout(clients, known_updates):
    data = clients(6)
    inner = known_updates(weighted=False)
    strategy = SecAgg(inner, bits=16)

    class Corrupt(SecAggClient):
        def _on_masked_input(self, msg, rng):
            (reply,) = super()._on_masked_input(msg, rng)
            body = {**reply.body, "masked": reply.body["masked"].astype(np.uint32)}
            return [Message(reply.protocol, reply.round, reply.stage, reply.sender, SERVER,
                            body)]

    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    old = fed.clients[4]
    fed.clients[4] = Corrupt(4, old.trainer, strategy, identity=old._identity,
                             directory=old._directory)
    history = fed.run()
    assert history.rounds[0]["status"] == "ok"
    assert history.rounds[0]["aggregated"] == 5
    survivors = [0, 1, 2, 3, 5]
    exact = fed.initial_params + np.mean([inner.delta(*data[i]) for i in survivors], axis=0)
    np.testing.assert_allclose(history.params, exact, atol=0.01)  # 16-bit grid


def test_clients_refuse_to_reveal_both_secrets_of_a_neighbour(clients, known_updates):
    data = clients(4)
    strategy = SecAgg(known_updates(weighted=False))
    fed, server, report = _round(data, strategy)
    client = fed.clients[0]
    request = Message("secagg", 0, "unmask", SERVER, 0, {"survivors": [1], "dropped": [1]})
    client._stage = 2
    with pytest.raises(ProtocolError, match="both secrets"):
        client.handle(request, fed._round_rng(0))


def test_sixteen_bit_ring_halves_float32_traffic(clients, known_updates):
    data = clients(10, d=2000)
    inner = known_updates(scale=0.01, weighted=False)
    _, _, plain = _round(data, inner)
    _, _, secure = _round(data, SecAgg(inner, bits=16, neighbours=4))
    masked = secure.stage_bytes()["masked_input"][0]
    # 2001 + 2 entries of 2 bytes per client, against 8-byte float64 in the clear
    assert masked < 10 * (2 * 2003 + 200)
    assert secure.bytes_up < 0.4 * plain.bytes_up


def test_configuration_errors(known_updates):
    with pytest.raises(ConfigError, match="max_weight"):
        SecAgg(FedAvg())
    with pytest.raises(ConfigError, match="outermost"):
        DPFedAvg(SecAgg(FedAvg(weighted=False)), noise_multiplier=1.0)
    with pytest.raises(ConfigError, match="bits"):
        SecAgg(FedAvg(weighted=False), bits=80)
    strategy = SecAgg(FedAvg(weighted=False), bits=8, clip_range=1.0)
    with pytest.raises(ConfigError, match="too small"):
        strategy.plan(0, np.zeros(10), list(range(200)))


def test_distributed_noise_has_the_stated_variance_and_cost(clients, known_updates):
    data = clients(10, d=3000, rows=12)
    z = 0.8
    inner = DPFedAvg(known_updates(scale=0.0), noise_multiplier=z, clip_norm=0.5,
                     noise="distributed")
    strategy = SecAgg(inner, bits=48, min_survivors=0.8)  # 48 bits: tiny rounding
    fed, server, report = _round(data, strategy, seed=5)
    assert report.completed
    plan = server.plan
    # the decoded sum of zero updates is pure noise: survivors x sigma_c^2 on the grid
    noise = (report.result.params - fed.initial_params) * inner.sample_rate * 10
    expected = np.sqrt(len(report.result.clients)) * plan.noise_std / plan.scale
    # the sample std of 3001 Gaussian entries is within 5% of the truth w.p. > 0.99
    assert np.std(noise) == pytest.approx(expected, rel=0.05)
    # distributed noise meant for t = 8 survivors has multiplier z on the rounded updates
    assert np.sqrt(8) * plan.noise_std == pytest.approx(
        z * (plan.scale * 0.5 + np.sqrt(3001) / 2), rel=1e-12)
    # its zCDP cost is that of the Gaussian with multiplier z (tau is negligible here)
    assert plan.rho == pytest.approx(1 / (2 * z * z), rel=1e-9)
    ledger = Ledger(10.0, 1e-5, accountant="rdp")
    Federation(data, LogisticRegression(), strategy, 2, rng=0, ledger=ledger).run()
    central = Ledger(10.0, 1e-5, accountant="rdp")
    central.plan(dp_accounting.GaussianDpEvent(z), steps=2)  # as the federation plans them
    assert ledger.spent()[0] == pytest.approx(central.spent()[0], rel=1e-9)
    # PLD accounts the zCDP event through its (sound) RDP bound: the same epsilon (the
    # default filter charges each distributed round alone, as their events may vary)
    pld = Ledger(10.0, 1e-5, accountant="pld-nonadaptive")
    Federation(data, LogisticRegression(), strategy, 2, rng=0, ledger=pld).run()
    rdp = make_accountant("rdp")   # non-adaptive RDP (the "rdp" ledger is a filter)
    rdp.compose(dp_accounting.GaussianDpEvent(z), count=2)
    assert pld.spent()[0] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-6)


def _setup_request(strategy, data, seed=0, **changes):
    """Client 0's setup message, with fields of the announced plan replaced."""
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=seed)
    rng = fed._round_rng(0)
    server = strategy.server(0, fed.params, sorted(fed.clients), rng)
    request = next(m for m in server.start() if m.recipient == 0)
    body = {**request.body, "secagg": {**request.body["secagg"], **changes}}
    return fed, Message(request.protocol, request.round, request.stage, SERVER, 0, body)


@pytest.mark.parametrize("changes", [{"threshold": 1}, {"noise_std": 0.0}, {"bits": 8}])
def test_clients_take_their_plan_from_their_own_configuration(clients, known_updates, changes):
    """A server sent t = 1 (then asked one holder for the victim's self-mask seed and
    another for its mask key: update recovered to 6e-10) or switched the distributed noise
    off; each client now recomputes the plan from its own strategy and refuses."""
    inner = DPFedAvg(known_updates(scale=0.0), noise_multiplier=0.8, clip_norm=0.5,
                     noise="distributed")
    strategy = SecAgg(inner, bits=32, min_survivors=0.8)
    fed, forged = _setup_request(strategy, clients(6), **changes)
    with pytest.raises(ProtocolError, match="own plan"):
        fed.clients[0].handle(forged, fed._round_rng(0))
    _, honest = _setup_request(strategy, clients(6))
    fed.clients[0].handle(honest, fed._round_rng(0))  # the unchanged plan is accepted


def test_a_threshold_at_most_half_the_neighbours_is_refused():
    with pytest.raises(ConfigError, match="threshold=0.4"):
        SecAgg(FedAvg(weighted=False), threshold=0.4)


@pytest.mark.parametrize("bits", [16, 24, 32])
@pytest.mark.parametrize("m", [2, 3, 4, 7, 8, 10])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_quantization_never_wraps_at_the_clip_bound(bits, m, sign):
    """Every client at +clip_range decoded as -1.0 for 32 bits with m = 2, 4, 8, 10 (the
    rounded-up scale R s made the ring sum reach 2^(k-1))."""
    from veil.fl.secagg.ring import decode_sum, encode_update

    d = 5
    strategy = SecAgg(FedAvg(weighted=False), bits=bits, clip_range=1.0)
    plan = strategy.plan(0, np.zeros(d), list(range(m)))
    x = encode_update(sign * np.ones(d), 1.0, {}, plan, None)
    total = sum(x.astype(np.uint64) for _ in range(m)) & np.uint64((1 << bits) - 1)
    sums, scalars = decode_sum(total.astype(x.dtype), d, plan)
    assert np.all(np.abs(sums / m - sign) <= 1 / (2 * plan.scale) + 1e-12)
    assert scalars["weight"] == pytest.approx(m)


class _GarbageShares(SecAggClient):
    """Sends share ciphertexts that no neighbour can decrypt."""

    def _on_share_keys(self, msg, rng):
        (reply,) = super()._on_share_keys(msg, rng)
        junk = {j: bytes(len(ct)) for j, ct in reply.body["ciphertexts"].items()}
        return [Message(reply.protocol, reply.round, reply.stage, reply.sender, SERVER,
                        {**reply.body, "ciphertexts": junk})]


@pytest.mark.parametrize("neighbours", [None, 4])
def test_a_client_with_undecryptable_shares_is_dropped_not_a_reason_to_abort(
        clients, known_updates, neighbours):
    """One client made every honest neighbour abort itself ("only 1 of 10 clients can go
    on": the attacker). Its shares are now treated as a dropout of that client."""
    data = clients(10)
    inner = known_updates(weighted=False)
    strategy = SecAgg(inner, bits=32, neighbours=neighbours)
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    old = fed.clients[3]
    fed.clients[3] = _GarbageShares(3, old.trainer, strategy, identity=old._identity,
                                    directory=old._directory)
    history = fed.run()
    assert history.rounds[0]["status"] == "ok", history.rounds[0].get("error")
    survivors = [i for i in range(10) if i != 3]
    exact = fed.initial_params + np.mean([inner.delta(*data[i]) for i in survivors], axis=0)
    np.testing.assert_allclose(history.params, exact, atol=1e-6)


def test_exclusions_at_setup_settle_before_anything_is_shared(clients, known_updates):
    """Degree 4, 2 of 20 clients gone at setup: holders were recorded before the clients
    with too few live neighbours were excluded, so the round trained, charged, and only
    aborted at unmask ("only 0 of 20 clients can go on" with 8 alive)."""
    data = clients(20)
    inner = known_updates(weighted=False)
    strategy = SecAgg(inner, bits=32, neighbours=4, min_survivors=0.3)
    for seed in range(4):
        faults = Faults(dropout=0.1, dropout_exact=True, dropout_stage="setup")
        fed, server, report = _round(data, strategy, faults, seed)
        if not report.completed:
            assert "after stage 'setup'" in report.error, report.error
            continue
        survivors = report.result.clients
        exact = fed.initial_params + np.mean([inner.delta(*data[i]) for i in survivors],
                                             axis=0)
        np.testing.assert_allclose(report.result.params, exact, atol=1e-6)
        assert all(server.holders[i] and set(server.holders[i]) <= set(server.keys)
                   for i in server.keys)


def test_secagg_is_the_planner_its_rounds_expect():
    """The SecAgg+ stage machines see their strategy only as a RoundPlanner (declared in
    veil.fl.secagg, below the strategies, so the protocol never imports its planner): a
    member the interface names but SecAgg lacks would fail only mid-round."""
    members = {name for name in vars(RoundPlanner) if not name.startswith("_")}
    members |= set(RoundPlanner.__annotations__)
    strategy = SecAgg(FedAvg(weighted=False))
    assert {"plan", "run_digest", "consistency", "identities"} <= members
    assert [name for name in sorted(members) if not hasattr(strategy, name)] == []
