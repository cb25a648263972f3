"""Parties on their own Flower nodes: their own plan, data, key share and ledger files.

The nodes run the real ClientApp of a generated app (:mod:`veil.experiments.flower_app`)
in this process through the loopback grid of ``test_flower`` (fast); the deployment with
real processes and TLS is ``test_flower_deploy``.
"""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from veil.dp import Ledger  # noqa: E402
from veil.dp.trust import Trust
from veil.errors import ConfigError, CryptoError, ProtocolError  # noqa: E402
from veil.experiments.flower_app import (  # noqa: E402
    _federation,
    app_setup,
    client,
    plan,
    write_app,
    write_party_data,
)
from veil.fl.hybrid.setup import PublicSetup, deal, load_party  # noqa: E402
from veil.fl.runtime.flower import FlowerRuntime  # noqa: E402

from ._deploy import spent  # noqa: E402
from .test_flower import _LoopbackGrid, _task_identity  # noqa: E402, F401

HYBRID = """
[data]
dataset = "breast_cancer"
clients = 3

[model]
type = "logistic_regression"

[training]
strategy = "hybrid"
rounds = 1

[privacy]
epsilon = {epsilon}
delta = 1e-5

[hybrid]
honest = 2
key_bits = 256
insecure_ok = true

[run]
seed = 3
timeout = 30
"""


@pytest.fixture(scope="module")
def dealt(tmp_path_factory):
    """A dealt 3-party set-up (one key for the module: key generation is the slow part)."""
    keys = tmp_path_factory.mktemp("keys")
    deal(Trust(3, 2), keys, bits=256, insecure_ok=True)
    return keys


def _deployment(tmp_path, dealt, *, epsilon=2.0, nodes=None):
    """Three organisations (their own folders) and the aggregator's app; returns the app
    directory and the node configurations."""
    config = tmp_path / "hybrid.toml"
    config.write_text(HYBRID.format(epsilon=epsilon))
    data = write_party_data(config, tmp_path / "data")
    app = write_app(config, tmp_path / "app", setup=dealt / "public.bin")
    configs = {}
    for i in range(3):
        org = tmp_path / f"org{i}"
        (org / "plans").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config, org / "plans" / "hybrid.toml")
        configs[i] = {"party-id": i, "plans": str(org / "plans"), "data": str(data[i]),
                      "ledger": str(org / "ledger.sqlite"),
                      "key-share": str(dealt / f"party-{i}.key"),
                      "identity": str(dealt / f"party-{i}.id"), **(nodes or {}).get(i, {})}
    return app, configs


def _server(app, configs, ledger_path):
    """The aggregator's federation, runtime and ledger, as its ServerApp builds them, over
    nodes running the app's real ClientApp."""
    setup = app_setup(app / "run.toml")
    cfg, federation = _federation(app / "run.toml", seeded=False, remote=True, setup=setup)
    federation.ledger = Ledger(cfg["privacy"]["epsilon"], 1e-5, path=ledger_path)
    node_app = client(app / "run.toml")
    grid = _LoopbackGrid({1000 + i: node_app for i in configs},
                         {1000 + i: c for i, c in configs.items()})
    for context in grid.contexts.values():
        context.run_config = {"plan": "hybrid.toml"}
    federation.runtime = FlowerRuntime(grid, timeout=30.0, plan=plan(cfg, setup))
    return federation


def test_parties_use_their_own_files_and_charge_their_own_ledgers(tmp_path, dealt):
    app, configs = _deployment(tmp_path, dealt)
    federation = _server(app, configs, tmp_path / "server.sqlite")
    history = federation.run()
    assert [r["status"] for r in history.rounds] == ["ok"]
    server = spent(tmp_path / "server.sqlite")
    assert server > 0
    for i in range(3):     # each party charged the same query to its own ledger file
        assert spent(tmp_path / f"org{i}" / "ledger.sqlite") == pytest.approx(server)
    # a server that forgets its budget and asks again: every party refuses on its own
    # node (its ledger cannot pay), the round aborts and no party's ledger moves
    again = _server(app, configs, tmp_path / "server2.sqlite")
    again.ledger = Ledger(100.0, 1e-5)
    (round_,) = again.run().rounds
    assert round_["status"] == "aborted"
    for i in range(3):
        assert spent(tmp_path / f"org{i}" / "ledger.sqlite") == pytest.approx(server)


@pytest.mark.parametrize("node, change, error", [
    # a party configured with another budget: the plans differ, named key by key
    ({"epsilon": 1.0}, None, "privacy.epsilon: this party's 1.0, the server's 2.0"),
    # party 1 started with party 2's key share, or with its identity file
    (None, {"key-share": "party-2.key"}, "holds the share of party 2, not of party 1"),
    (None, {"identity": "party-2.id"}, "is party 2's, not party 1's"),
    (None, {"party-id": 7}, "claims party 7"),
    # party 1's node started with organisation C's whole configuration
    (None, {"party-id": 2, "key-share": "party-2.key", "identity": "party-2.id"},
     "both claim party 2"),
    (None, {"plans": "missing"}, "has no plan 'hybrid.toml'"),
])
def test_a_party_refuses_a_run_not_its_own_before_anything_is_charged(
        tmp_path, dealt, node, change, error):
    app, configs = _deployment(tmp_path, dealt)
    if node is not None:   # party 1's own copy of the plan differs from the server's
        plans = tmp_path / "org1" / "plans" / "hybrid.toml"
        plans.write_text(HYBRID.format(epsilon=node["epsilon"]))
    for key, value in (change or {}).items():
        configs[1][key] = str(dealt / value) if key in ("key-share", "identity") else \
            value if key == "party-id" else str(tmp_path / value)
    federation = _server(app, configs, tmp_path / "server.sqlite")
    # the ServerApp connects before its first round: the run stops here, nothing charged
    with pytest.raises(ProtocolError, match=error):
        federation.runtime.connect(federation.clients)
    assert spent(tmp_path / "server.sqlite") == 0.0
    for i in range(3):
        assert not (tmp_path / f"org{i}" / "ledger.sqlite").exists()


def test_key_share_files_refuse_other_parties_and_other_keys(tmp_path, dealt):
    share, identity = load_party(0, dealt / "party-0.key", dealt / "party-0.id",
                                 insecure_ok=True)
    assert share.index == 1 and identity.index == 0
    assert (dealt / "party-0.key").stat().st_mode & 0o077 == 0
    other = tmp_path / "other"
    deal(Trust(3, 2), other, bits=256, insecure_ok=True)
    with pytest.raises(ConfigError, match="not of this federation's key"):
        load_party(0, other / "party-0.key", dealt / "party-0.id", insecure_ok=True)
    broken = tmp_path / "broken.key"
    broken.write_bytes((dealt / "party-0.key").read_bytes()[:-1] + b"\0")
    with pytest.raises(CryptoError, match="broken.key"):
        load_party(0, broken, dealt / "party-0.id", insecure_ok=True)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_party(0, tmp_path / "absent.key", dealt / "party-0.id", insecure_ok=True)


def test_a_hybrid_app_needs_the_dealers_public_set_up(tmp_path):
    config = tmp_path / "hybrid.toml"
    config.write_text(HYBRID.format(epsilon=2.0))
    with pytest.raises(ConfigError, match="veil fl deal"):
        write_app(config, tmp_path / "app")


def test_cli_deal_split_and_app_write_each_partys_files(tmp_path, capsys):
    import tomllib

    import numpy as np

    from veil.cli.main import main

    config = tmp_path / "hybrid.toml"
    config.write_text(HYBRID.format(epsilon=2.0))
    assert main(["fl", "deal", str(config), "--out", str(tmp_path / "dealt")]) == 0
    assert "party 2 only" in capsys.readouterr().out
    setup = PublicSetup.load(tmp_path / "dealt" / "public.bin", insecure_ok=True)
    for i in range(3):
        share, identity = load_party(i, tmp_path / "dealt" / f"party-{i}.key",
                                     tmp_path / "dealt" / f"party-{i}.id", insecure_ok=True)
        assert share.public_key == setup.public_key and identity.setup == setup
    assert main(["fl", "split", str(config), "--out", str(tmp_path / "split")]) == 0
    sizes = [len(np.load(tmp_path / "split" / f"party-{i}.npz")["y"]) for i in range(3)]
    assert sum(sizes) == int(round(569 * 0.8))       # breast_cancer's training split
    assert main(["fl", "app", str(config), "--out", str(tmp_path / "app"), "--setup",
                 str(tmp_path / "dealt" / "public.bin")]) == 0
    project = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert project["tool"]["flwr"]["app"]["config"]["plan"] == "hybrid.toml"
    assert (tmp_path / "app" / "public.toml").exists()
    capsys.readouterr()
    plain = tmp_path / "plain.toml"
    plain.write_text("[data]\ndataset = 'wine'\n[run]\nseed = 1\n")
    assert main(["fl", "deal", str(plain), "--out", str(tmp_path / "no")]) == 2
    assert "for hybrid runs" in capsys.readouterr().err and not (tmp_path / "no").exists()


DISTRIBUTED = """
[data]
dataset = "breast_cancer"
clients = 4

[model]
type = "logistic_regression"

[training]
rounds = 2

[privacy]
epsilon = 20.0
delta = 1e-5
noise = "distributed"
clip_norm = 0.5

[secagg]
bits = 48
min_survivors = 0.6
consistency = false

[run]
seed = 3
timeout = 30
"""


def test_flower_nodes_charge_their_own_ledger_files(tmp_path):
    """The real ClientApp of a generated app on four in-process nodes :
    each node opens its own ledger file (node config ``ledger``, required) and charges it;
    a node whose ledger cannot pay drops out of every round, its file unmoved."""
    config = tmp_path / "dist.toml"
    config.write_text(DISTRIBUTED)
    app = write_app(config, tmp_path / "app")
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "dist.toml").write_text(DISTRIBUTED)
    nodes = {1000 + i: {"party-id": i, "plans": str(tmp_path / "plans"),
                        "ledger": str(tmp_path / f"party-{i}.sqlite")} for i in range(4)}
    Ledger(1e-3, 1e-5, path=tmp_path / "party-3.sqlite").close()   # party 3: nearly spent

    def server(configs):
        cfg, federation = _federation(app / "run.toml", seeded=False, remote=True)
        federation.ledger = Ledger(20.0, 1e-5)
        grid = _LoopbackGrid({n: client(app / "run.toml") for n in configs}, configs)
        for context in grid.contexts.values():
            context.run_config = {"plan": "dist.toml"}
        federation.runtime = FlowerRuntime(grid, timeout=30.0, plan=plan(cfg))
        return federation

    missing = server({**nodes, 1001: {k: v for k, v in nodes[1001].items() if k != "ledger"}})
    with pytest.raises(ProtocolError, match="node config ledger=FILE is required"):
        missing.runtime.connect(missing.clients)   # refused before any round
    assert not missing.ledger.history() and not (tmp_path / "party-0.sqlite").exists()

    federation = server(nodes)
    federation.runtime.connect(federation.clients)
    history = federation.run()
    assert [(r["status"], r["aggregated"]) for r in history.rounds] == [("ok", 3)] * 2
    spent = federation.ledger.spent()[0]
    assert spent > 0
    for i in range(3):
        own = Ledger.open(tmp_path / f"party-{i}.sqlite", read_only=True)
        assert own.spent()[0] == pytest.approx(spent, rel=1e-12)
    assert not Ledger.open(tmp_path / "party-3.sqlite", read_only=True).history()
