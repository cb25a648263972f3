"""The local runtime: simulated faults, rejected messages, byte counts, determinism."""

from __future__ import annotations

import re

import numpy as np
import pytest

from veil.errors import ConfigError, ProtocolError
from veil.fl import Faults, Federation, LocalRuntime, Message
from veil.fl.messages import SERVER
from veil.fl.strategies import FedAvg
from veil.fl.strategies.base import PlainClient, PlainServer
from veil.learn import LogisticRegression


def _expected(fed, strategy, data, ids):
    """The exact weighted FedAvg step over the clients ``ids``."""
    n = np.array([len(data[i][1]) for i in ids], dtype=float)
    deltas = np.array([strategy.delta(*data[i]) for i in ids])
    return fed.initial_params + (n[:, None] * deltas).sum(axis=0) / n.sum()


class _Liar(PlainClient):
    """Answers with a tampered message."""

    def __init__(self, honest: PlainClient, tamper):
        super().__init__(honest.client_id, honest.trainer, honest.strategy)
        self.tamper = tamper

    def _on_fit(self, msg, rng):
        (reply,) = super()._on_fit(msg, rng)
        body, sender = self.tamper(dict(reply.body), reply.sender)
        return [Message(reply.protocol, reply.round, reply.stage, sender, SERVER, body)]


@pytest.mark.parametrize("tamper, problem", [
    (lambda b, s: ({**b, "delta": np.full_like(b["delta"], np.nan)}, s),
     r"client 2, round 0, stage 'fit': field 'delta' holds 7 NaN"),
    (lambda b, s: ({**b, "delta": b["delta"][:-1]}, s), r"client 2.*'delta' has shape"),
    (lambda b, s: ({**b, "delta": b["delta"].astype(np.float32)}, s),
     r"client 2.*'delta' has dtype float32"),
    (lambda b, s: ({**b, "weight": -1.0}, s), r"client 2.*'weight' is -1.0"),
    (lambda b, s: ({**b, "extras": {"x": 1.0}}, s), r"client 2.*'extras' has keys"),
    (lambda b, s: (b, 99), r"unknown client 99"),
])
def test_bad_updates_are_rejected_and_the_round_completes_without_them(
        clients, known_updates, tamper, problem):
    data = clients(4)
    strategy = known_updates()
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    fed.clients[2] = _Liar(fed.clients[2], tamper)
    server = strategy.server(0, fed.params, [0, 1, 2, 3], fed._round_rng(0))
    report = LocalRuntime().run_round(server, fed.clients, 0)
    assert any(re.search(problem, reason) for _, reason in report.rejected), report.rejected
    assert report.result.clients == (0, 1, 3)
    np.testing.assert_allclose(report.result.params, _expected(fed, strategy, data, [0, 1, 3]),
                               atol=1e-15)


def test_server_rejects_replays_late_answers_and_equivocation(clients, known_updates):
    data = clients(3)
    strategy = known_updates()
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    server = PlainServer(strategy, 5, fed.params, [0, 1, 2], fed._round_rng(5))
    (req,) = [m for m in server.start() if m.recipient == 0]
    (good,) = fed.clients[0].handle(req, fed._round_rng(0))
    old = Message(good.protocol, 4, good.stage, 0, SERVER, good.body)
    with pytest.raises(ProtocolError, match="replayed message from the earlier round 4"):
        server.receive(old)
    server.receive(good)
    server.receive(Message.from_bytes(good.to_bytes()))  # an exact duplicate is ignored
    twisted = Message(good.protocol, 5, "fit", 0, SERVER, {**good.body, "weight": 1.0})
    with pytest.raises(ProtocolError, match="two different answers"):
        server.receive(twisted)
    assert 0 in server.excluded
    # the client refuses a replayed request and a repeated stage
    with pytest.raises(ProtocolError, match="already handled"):
        fed.clients[0].handle(req, fed._round_rng(0))
    stale = Message(req.protocol, 4, "fit", SERVER, 0, req.body)
    with pytest.raises(ProtocolError, match="replayed message from round 4"):
        fed.clients[0].handle(stale, fed._round_rng(0))


def test_duplicates_reordering_and_replays_do_not_change_the_result(clients, known_updates):
    data = clients(6)
    clean = Federation(data, LogisticRegression(), known_updates(), 3, rng=7).run()
    runtime = LocalRuntime(Faults(duplicate=1.0, replay=1.0, reorder=True))
    noisy = Federation(data, LogisticRegression(), known_updates(), 3, rng=7,
                       runtime=runtime).run()
    np.testing.assert_array_equal(noisy.params, clean.params)
    assert all(r["rejected"] >= 1 for r in noisy.rounds[1:])  # each replay was refused


def test_stragglers_miss_the_deadline_and_are_left_out(clients, known_updates):
    data = clients(8)
    strategy = known_updates()
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=1)
    runtime = LocalRuntime(Faults(straggler=0.4, deadline=1.0, latency=0.01, slowdown=1e4))
    server = strategy.server(0, fed.params, list(range(8)), fed._round_rng(0))
    report = runtime.run_round(server, fed.clients, 1)
    late = 8 - len(report.result.clients)
    assert report.late == late > 0
    np.testing.assert_allclose(report.result.params,
                               _expected(fed, strategy, data, report.result.clients), atol=1e-15)
    # the late answers reach the next round's server, which rejects them as replays
    server = strategy.server(1, fed.params, list(range(8)), fed._round_rng(1))
    report = runtime.run_round(server, fed.clients, 2)
    assert sum("replayed" in reason for _, reason in report.rejected) == late


def test_dropouts_and_crashes(clients, known_updates):
    data = clients(10)
    runtime = LocalRuntime(Faults(crash=0.2))
    fed = Federation(data, LogisticRegression(), known_updates(), 6, rng=2, runtime=runtime)
    history = fed.run()
    crashed = runtime.crashed
    assert crashed  # some crashed, and they never came back
    assert history.rounds[-1]["aggregated"] <= 10 - len(crashed)
    assert [r["aggregated"] for r in history.rounds] == sorted(
        [r["aggregated"] for r in history.rounds], reverse=True)
    with pytest.raises(ConfigError, match="dropout_stage='nope'"):
        LocalRuntime(Faults(dropout=0.5, dropout_stage="nope")).run_round(
            PlainServer(known_updates(), 0, fed.params, [0, 1], fed._round_rng(0)),
            fed.clients, 0)
    everyone_gone = LocalRuntime(Faults(dropout=1.0))
    report = everyone_gone.run_round(
        PlainServer(known_updates(), 0, fed.params, [0, 1], fed._round_rng(0)), fed.clients, 0)
    assert report.result is None and "0 client update(s) arrived" in report.error


def test_byte_counts_add_up(clients, known_updates):
    data = clients(3)
    strategy = known_updates()
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=0)
    server = strategy.server(0, fed.params, [0, 1, 2], fed._round_rng(0))
    report = LocalRuntime(record=True).run_round(server, fed.clients, 0)
    assert len(report.messages) == 6
    per_client = report.client_bytes()
    assert sum(s for s, _ in per_client.values()) == report.bytes_up
    assert sum(r for _, r in per_client.values()) == report.bytes_down
    assert report.bytes_up == sum(len(b) for b in report.server_inbox)
    assert report.stage_bytes() == {"fit": (report.bytes_up, report.bytes_down)}
    # an update of 7 float64 values: at least 56 bytes of payload each way
    assert all(m.nbytes > 56 for m in report.messages)


def test_runs_are_deterministic_under_a_seed_and_independent_of_workers(clients):
    data = clients(4, rows=40)
    strategy = dict(local_epochs=2, learning_rate=0.3, batch_size=8, fraction=0.75)
    faults = Faults(dropout=0.3, duplicate=0.2)

    def run(seed, workers):
        with LocalRuntime(faults, workers=workers) as runtime:
            return Federation(data, LogisticRegression(), FedAvg(**strategy), 3, rng=seed,
                              runtime=runtime).run()

    a, b = run(11, 1), run(11, 2)  # workers=2: the clients in two worker processes
    np.testing.assert_array_equal(a.params, b.params)
    assert a.metric("aggregated") == b.metric("aggregated")
    assert not np.array_equal(run(12, 1).params, a.params)
