"""SecAgg clients with distributed noise charge their own ledgers (veil.fl.party_ledger)."""

from __future__ import annotations

import pickle

import pytest

from veil.dp import Ledger
from veil.errors import ConfigError, ProtocolError
from veil.fl import Federation, LocalRuntime
from veil.fl.party_ledger import RoundLedger
from veil.fl.strategies import DPFedAvg, SecAgg
from veil.learn import LogisticRegression

from .test_secagg import _setup_request


def _strategy(known_updates, ledgers, rounds, z=0.8, budgets=None):
    """SecAgg+DPFedAvg with distributed noise whose clients get their own ledgers, kept in
    ``ledgers`` (client id -> Ledger; epsilon from ``budgets``, default 50)."""
    inner = DPFedAvg(known_updates(scale=0.1), noise_multiplier=z, clip_norm=0.5,
                     noise="distributed")
    budgets = budgets or {}
    return SecAgg(inner, bits=48, min_survivors=0.6, rounds=rounds,
                  client_ledgers=lambda i: ledgers.setdefault(
                      i, Ledger(budgets.get(i, 50.0), 1e-5)))


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_each_clients_ledger_ends_with_the_servers_spend(clients, known_updates, accountant):
    ledgers = {}
    strategy = _strategy(known_updates, ledgers, 3)
    server = Ledger(50.0, 1e-5, accountant=accountant)
    for ledger in ledgers.values():
        assert not ledger.history()
    history = Federation(clients(6), LogisticRegression(), strategy, 3, rng=0, classes=[0, 1],
                         ledger=server).run()
    assert [r["status"] for r in history.rounds] == ["ok"] * 3
    assert server.spent()[0] > 0
    for i in range(6):
        # the same planned block of 3 rounds and its 3 steps, on the client's own ledger
        assert len(ledgers[i].history()) == len(server.history()) == 4
        assert ledgers[i].spent()[0] == pytest.approx(server.spent()[0], rel=1e-12)


def test_a_client_whose_ledger_cannot_pay_drops_out_and_its_ledger_does_not_move(
        clients, known_updates):
    ledgers = {}
    one_round = Ledger(50.0, 1e-5)
    one_round.charge(_setup_plan_event(clients, known_updates))   # what one round costs
    budget = 1.5 * one_round.spent()[0]   # one round fits, two do not
    strategy = _strategy(known_updates, ledgers, 2, budgets={0: budget, 1: 1e-3})
    fed = Federation(clients(6), LogisticRegression(), strategy, 2, rng=0, classes=[0, 1],
                     ledger=Ledger(50.0, 1e-5))
    runtime = LocalRuntime()
    fed.runtime = runtime
    reports = []
    runtime_round = runtime.run_round
    runtime.run_round = lambda *a: reports.append(runtime_round(*a)) or reports[-1]
    history = fed.run()
    assert [r["status"] for r in history.rounds] == ["ok", "ok"]
    # client 1 pays nothing ever, client 0 only its first round: each drops out, named
    assert 1 not in reports[0].result.clients and 0 in reports[0].result.clients
    assert "BudgetExceededError" in dict(reports[0].rejected)[1]
    assert 0 not in reports[1].result.clients
    assert "client 0: fl round 1" in dict(reports[1].rejected)[0]
    assert not ledgers[1].history()
    # its plan held one round (reserved, then charged as its step); round 1 left no row
    assert [c.label for c in ledgers[0].history()] == ["client 0: fl rounds from 0",
                                                       "client 0: fl round 0"]
    assert ledgers[0].spent()[0] == pytest.approx(one_round.spent()[0], rel=1e-9)


def _setup_plan_event(clients, known_updates):
    ledgers = {}
    strategy = _strategy(known_updates, ledgers, 1)
    fed = Federation(clients(6), LogisticRegression(), strategy, 1, rng=0, classes=[0, 1])
    return strategy.plan(0, fed.params, sorted(fed.clients)).event


def test_a_server_claiming_another_noise_level_changes_nothing_a_client_charges(
        clients, known_updates):
    # a forged setup plan (less noise, or none): refused before anything is charged
    for noise_std in (0.0, 1.0):
        ledgers = {}
        fed, forged = _setup_request(_strategy(known_updates, ledgers, 2), clients(6),
                                     noise_std=noise_std)
        with pytest.raises(ProtocolError, match="own plan"):
            fed.clients[0].handle(forged, fed._round_rng(0))
        assert not ledgers[0].history()
    # a server configured with half the noise runs a round over clients with their own
    # plan (z = 0.8): every client refuses, the round aborts, no client's ledger moves
    ledgers = {}
    mine = Federation(clients(6), LogisticRegression(),
                      _strategy(known_updates, ledgers, 1), 1, rng=0, classes=[0, 1])
    other = _strategy(known_updates, {}, 1, z=0.4)
    server = other.server(0, mine.params, sorted(mine.clients), mine._round_rng(0))
    report = LocalRuntime().run_round(server, mine.clients, 0)
    assert not report.completed
    assert sorted(c for c, why in report.rejected if "own plan" in why) == list(range(6))
    assert all(not ledger.history() for ledger in ledgers.values())


def test_a_round_is_charged_once_and_the_plan_survives_a_move(tmp_path, clients,
                                                              known_updates):
    event = _setup_plan_event(clients, known_updates)
    own = RoundLedger(Ledger(50.0, 1e-5, path=tmp_path / "party.sqlite"), 3, fixed=True,
                      who="client 0")
    own.charge(0, event)
    own.charge(0, event)   # a retried stage: not charged twice
    assert [c.kind for c in own.ledger.history()] == ["plan", "step"]
    moved = pickle.loads(pickle.dumps(own))   # a Flower node keeps its party this way
    moved.charge(0, event)
    moved.charge(1, event)
    assert [c.kind for c in moved.ledger.history()] == ["plan", "step", "step"]
    with pytest.raises(ConfigError, match="outside its own plan of 3 rounds"):
        moved.charge(3, event)
    spent = RoundLedger(Ledger(50.0, 1e-5), 3, fixed=False, who="client 1")
    spent.charge(0, event)
    with pytest.raises(ConfigError, match="spent in-memory ledger cannot move"):
        pickle.dumps(spent)
    with pytest.raises(ConfigError, match="rounds="):
        SecAgg(DPFedAvg(known_updates(), noise_multiplier=1.0, noise="distributed"),
               client_ledgers=lambda i: Ledger(1.0, 1e-5))

