"""The protocol base classes carry multi-stage rounds with re-asked stages (the shape the
hybrid approach needs: collect from everyone, then ask t live clients, then others)."""

from __future__ import annotations

from veil.errors import ProtocolError
from veil.fl import ClientProtocol, Faults, LocalRuntime, RoundResult, ServerRound
from veil.random import Generator


class Collect(ServerRound):
    """Stage 'values': every client sends a number. Stage 'confirm': `need` clients that
    answered must confirm the total; when some do not, other live clients are asked."""

    protocol = "toy"
    stages = ("values", "confirm")

    def __init__(self, server_round, clients, need):
        super().__init__(server_round, clients)
        self.need, self.values, self.confirmed, self.asked = need, {}, set(), set()

    def _begin(self):
        return [self.request(c) for c in self.clients]

    def _check(self, msg):
        if self.stage == "values":
            return msg.integer("value", low=0, high=100)
        if msg.integer("total") != sum(self.values.values()):
            raise ProtocolError(f"{msg.origin} confirmed a wrong total")
        return True

    def _advance(self, stage, answers):
        if stage == "values":
            self.values = answers
        else:
            self.confirmed |= set(answers)
            self.repeat_stage()
        if len(self.confirmed) >= self.need:
            self.result = RoundResult(None, tuple(sorted(self.values)),
                                      {"total": sum(self.values.values())})
            return []
        fresh = [c for c in sorted(self.values) if c not in self.asked]
        if len(fresh) < self.need - len(self.confirmed):
            raise ProtocolError(f"round {self.round}: not enough live clients to confirm")
        ask = fresh[:self.need - len(self.confirmed)]
        self.asked |= set(ask)
        total = sum(self.values.values())
        return [self.request(c, total=total) for c in ask]


class Client(ClientProtocol):
    protocol = "toy"
    stages = ("values", "confirm")

    def _on_values(self, msg, rng):
        return [self.reply(msg, value=self.client_id + 1)]

    def _on_confirm(self, msg, rng):
        return [self.reply(msg, total=msg.integer("total"))]


def test_a_stage_is_asked_again_of_other_clients_after_dropouts():
    clients = {i: Client(i) for i in range(10)}
    for seed in range(5):
        runtime = LocalRuntime(Faults(dropout=0.3, dropout_exact=True,
                                      dropout_stage="confirm"))
        server = Collect(seed, range(10), need=5)
        report = runtime.run_round(server, clients, Generator(seed))
        assert report.completed, report.error
        assert report.result.metrics["total"] == sum(range(1, 11))
        # 5 confirmations from live clients, asking others when the first asked had dropped
        assert len(server.confirmed) == 5 and not server.confirmed & set(report.dropped)
        assert len(server.asked) == 5 + len(server.asked & set(report.dropped))


def test_too_few_live_clients_abort_the_round():
    clients = {i: Client(i) for i in range(6)}
    runtime = LocalRuntime(Faults(dropout=0.5, dropout_exact=True, dropout_stage="confirm"))
    report = runtime.run_round(Collect(0, range(6), need=4), clients, Generator(0))
    assert report.result is None and "not enough live clients" in report.error
