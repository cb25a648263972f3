"""Vertical runs on Flower (:mod:`veil.fl.runtime.flower_vertical`): each organisation a
node with only its own table, the server a relay; the local runtime's model; refusals
naming the node, nothing charged.

The nodes run the real ClientApp of a generated app in this process through the loopback
grid of ``test_flower`` (fast); Flower's simulation engine and a deployment with real
processes and TLS are the last two tests."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from veil._json import canonical  # noqa: E402
from veil.crypto.identity import make_identities, sign, write_identities  # noqa: E402
from veil.dp import Ledger  # noqa: E402
from veil.errors import ConfigError, ProtocolError  # noqa: E402
from veil.experiments.fl_config import load_config  # noqa: E402
from veil.experiments.flower_vertical_app import (  # noqa: E402
    _node_party,
    _own_plan,
    client,
    vertical_app,
)
from veil.experiments.vertical_config import (  # noqa: E402
    flower_settings,
    vertical_settings,
)
from veil.experiments.vertical_run import run_vertical  # noqa: E402
from veil.fl.messages import decode, encode  # noqa: E402
from veil.fl.runtime.flower_vertical import VerticalRelay, client_app  # noqa: E402
from veil.fl.secagg.masks import public_key  # noqa: E402
from veil.fl.vertical import VerticalLogisticRegression  # noqa: E402
from veil.fl.vertical.data import held_out  # noqa: E402
from veil.fl.vertical.parties import VerticalParty, VerticalSettings, train  # noqa: E402
from veil.random import check_rng  # noqa: E402

from .test_flower import _LoopbackGrid, _PollingGrid, _task_identity  # noqa: E402, F401

RUN = """
[vertical]
model = "logistic"
protocol = "paillier"
parties = {{ bank = "bank.csv", insurer = "insurer.csv" }}
epochs = {epochs}
batch_size = {batch}
learning_rate = 0.3
test_fraction = 0.3
key_bits = 512
insecure_ok = true
identities = "identities.json"
{extra}
[run]
seed = 4
"""


def _tables():
    """The bank holds the label and 8 columns, the insurer 22 columns of other rows (ids
    as strings, its rows in another order)."""
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    ids = [f"c{i:04d}" for i in range(len(y))]
    bank = pd.DataFrame(X[:, :8], columns=[f"b{j}" for j in range(8)]).assign(y=y)
    bank.insert(0, "id", ids)
    insurer = pd.DataFrame(X[:, 8:], columns=[f"i{j}" for j in range(22)])
    insurer.insert(0, "id", ids)
    return bank.iloc[:500], insurer.iloc[60:].sample(frac=1.0, random_state=1)


def _organisations(tmp_path, epochs=1, extra="", plans=None, batch=200):
    """The run file, and each organisation's folder: its own table (the run's copy
    lists every file for the local runtime), its own plan copy, ledger and model folder."""
    bank, insurer = _tables()
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "run.toml"
    config.write_text(RUN.format(epochs=epochs, extra=extra, batch=batch))
    bank.to_csv(tmp_path / "bank.csv", index=False)
    insurer.to_csv(tmp_path / "insurer.csv", index=False)
    nodes = {}
    for name in ("bank", "insurer", "arbiter"):
        org = tmp_path / f"org-{name}"
        (org / "plans").mkdir(parents=True)
        text = (plans or {}).get(name, config.read_text())
        (org / "plans" / "run.toml").write_text(text)
        nodes[name] = {"party": name, "plans": str(org / "plans"), "out": str(org / "model")}
        if name != "arbiter":
            shutil.copyfile(tmp_path / f"{name}.csv", org / f"{name}.csv")
            nodes[name]["data"] = str(org / f"{name}.csv")
    nodes["bank"]["ledger"] = str(tmp_path / "org-bank" / "ledger.sqlite")
    _identities(tmp_path, nodes, ["bank", "insurer"])
    return config, nodes


def _identities(tmp_path, nodes, parties):
    """Each organisation's identity key (node config identity-key) and its own copy of the
    table beside its plan (the run file names it: identities = "identities.json")."""
    keys = tmp_path / "keys"
    table = write_identities(keys, len(parties))
    for name, node in nodes.items():
        shutil.copyfile(table, Path(node["plans"]) / "identities.json")
        if name in parties:
            node["identity-key"] = str(keys / f"identity-{parties.index(name)}.key")


class _Recording(_LoopbackGrid):
    """The loopback grid, keeping every byte string the relay sends and receives."""

    relayed: list[bytes]
    exchanges = 0     # messages sent together (each a fresh process per node deployed)

    def push_messages(self, messages):
        self.exchanges += 1
        return super().push_messages(messages)

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        for m in [*messages, *replies]:
            if not m.has_error():
                for value in m.content.config_records["veil"].values():
                    self.relayed += value if isinstance(value, list) else [value]
        return replies


def _relay(config, nodes, apps=None):
    """The server's relay over loopback nodes running the app's real ClientApp."""
    node_app = client(config)
    ids = {name: 2000 + k for k, name in enumerate(nodes)}
    grid = _Recording({ids[n]: (apps or {}).get(n, node_app) for n in nodes},
                         {ids[n]: c for n, c in nodes.items()})
    for context in grid.contexts.values():
        context.run_config = {"plan": "run.toml"}
    grid.relayed = []
    return VerticalRelay(grid, flower_settings(load_config(config)["vertical"]), timeout=30)


def _local_model(config):
    """The local runtime's model on the same aligned rows (joined here in the bank's
    order), drawn from the seed as run_vertical draws it."""
    section = load_config(config)["vertical"]
    bank, insurer = _tables()
    joined = bank.merge(insurer, on="id", how="inner", sort=False)
    y = joined["y"].to_numpy()
    blocks = [joined[[f"b{j}" for j in range(8)]].to_numpy(),
              joined[[f"i{j}" for j in range(22)]].to_numpy()]
    rng = check_rng(section["seed"])
    test = held_out(y.size, section["test_fraction"], rng)
    model = VerticalLogisticRegression("paillier", key_bits=512, insecure_ok=True,
                                       random_state=rng.spawn(1)[0],
                                       **vertical_settings(section).schedule())
    return model.fit([b[~test] for b in blocks], y[~test])


def _spent(path):
    return Ledger.open(path, read_only=True).spent()[0] if path.exists() else 0.0


def test_nodes_with_their_own_tables_train_the_local_runtime_model(tmp_path):
    config, nodes = _organisations(tmp_path, epochs=2)
    relay = _relay(config, nodes)
    assert relay.connect().keys() == {"bank", "insurer", "arbiter"}
    results = train(relay)
    local = run_vertical(load_config(config)["vertical"], base=tmp_path)
    model = _local_model(config)
    assert results["guest"] == "bank" and results["aligned"] == local["aligned"] == 440
    assert results["batches"] == 2 * 2
    # calls that do not wait for each other share an exchange: the handshake, the
    # alignment 4, each batch 4 (was 5), the end 2 (was 5 + 5 per batch + 3)
    assert relay.grid.exchanges == 1 + 4 + 4 * 4 + 2
    # after the alignment a party's state (restored in every message's process) holds its
    # aligned arrays, not its table: restoring it needs no pandas
    for context in relay.grid.contexts.values():
        assert b"pandas" not in context.state.config_records["veil-vertical"]["party"]
    np.testing.assert_array_equal(np.load(tmp_path / "org-bank" / "model" / "coef.npy"),
                                  [*model.coefs_[0], model.intercept_])
    np.testing.assert_array_equal(np.load(tmp_path / "org-insurer" / "model" / "coef.npy"),
                                  model.coefs_[1])
    assert results["accuracy"] == local["accuracy"] > 0.9
    assert results["auc"] == pytest.approx(local["auc"], abs=1e-12)
    assert set(results["bytes_sent"]) == {"bank", "insurer", "arbiter"}
    # no id crosses the relay in the clear: the order of the common ids is sealed
    relayed = b"".join(v for v in relay.grid.relayed if isinstance(v, bytes))
    assert len(relayed) > 100_000 and b"c0100" not in relayed and b"c0499" not in relayed


class _Garbling(VerticalParty):
    """An insurer whose answers to one call (``garbled``) arrive garbled."""

    garbled = "align_setup"

    def call(self, method, args):
        answer = super().call(method, args)
        return answer[:20] + bytes(len(answer) - 20) if method == self.garbled else answer


def _garbling(config, nodes, method):
    """The relay, the insurer's real node with its party made to garble ``method``."""
    return _altered(config, nodes, "insurer", _Garbling, garbled=method)


def _altered(config, nodes, name, cls, **attributes):
    """The relay, node ``name`` real but its party of class ``cls`` (with ``attributes``)."""

    def build(context):
        party = _node_party(context)
        party.__class__ = cls
        party.__dict__.update(attributes)
        return party

    apps = {name: client_app(build, lambda c: flower_settings(_own_plan(c)[1]))}
    relay = _relay(config, nodes, apps)
    relay.connect()
    return relay


def test_garbled_bytes_a_stolen_role_and_another_plan_are_refused_by_name(tmp_path):
    dp = "label_epsilon = 1.0\nlabel_delta = 1e-5\n"
    config, nodes = _organisations(tmp_path, extra=dp)
    ledger = tmp_path / "org-bank" / "ledger.sqlite"

    with pytest.raises(ProtocolError, match="party 'bank' refused align_request: alignment "
                                            "message from 'insurer'"):
        train(_garbling(config, nodes, "align_setup"))
    assert _spent(ledger) == 0.0

    # a second node claiming the bank
    thief = {**nodes, "thief": {**nodes["insurer"], "party": "bank"}}
    with pytest.raises(ProtocolError, match="both claim party 'bank'"):
        _relay(config, thief).connect()
    # an insurer holding the label too
    insurer = pd.read_csv(nodes["insurer"]["data"]).assign(y=1)
    insurer.to_csv(nodes["insurer"]["data"], index=False)
    both = {**nodes, "insurer": {**nodes["insurer"], "ledger": str(tmp_path / "i.sqlite")}}
    with pytest.raises(ProtocolError, match=r"held by \['bank', 'insurer'\]"):
        _relay(config, both).connect()
    # an arbiter whose own copy of the plan has another key size
    other = config.read_text().replace("key_bits = 512", "key_bits = 1024")
    _, nodes = _organisations(tmp_path / "again", extra=dp, plans={"arbiter": other})
    with pytest.raises(ProtocolError, match="party 'arbiter' .* refuses the run: its plan "
                                            "differs .*vertical.key_bits: this party's 1024, "
                                            "the server's 512"):
        _relay(config, nodes).connect()
    assert _spent(ledger) == 0.0 and _spent(tmp_path / "again" / "org-bank" /
                                             "ledger.sqlite") == 0.0


class _KeySwapping(VerticalRelay):
    """A server that relays its own channel key, properly signed with an Ed25519 key of its
    own, in place of ``victim``'s (to read the sealed order of the common ids)."""

    def __init__(self, relay, victim, role):
        self.__dict__.update(relay.__dict__)
        self.secret = check_rng(None).bytes(32)
        (forger,), _ = make_identities(1)
        key = public_key(self.secret)
        statement = b"|".join([b"veil.vertical.channel", hashlib.sha256(
            canonical(self.plan["vertical"])).digest(), victim.encode(), role.encode(), key])
        self.forged = encode({"party": victim, "key": key,
                              "signature": sign(forger, statement)})

    def call(self, calls):
        return super().call({p: [(m, {**a, "key": self.forged} if "key" in a else a)
                                 for m, a in cs] for p, cs in calls.items()})


def test_a_server_putting_its_own_channel_keys_in_place_is_refused_by_name(tmp_path):
    config, nodes = _organisations(tmp_path)
    relay = _relay(config, nodes)
    relay.connect()
    with pytest.raises(ProtocolError, match="party 'bank' refused align_request: message "
                                            "from 'insurer': its channel key is not signed"):
        train(_KeySwapping(relay, "insurer", "host"))
    relayed = b"".join(v for v in relay.grid.relayed if isinstance(v, bytes))
    assert b"c0100" not in relayed and b"c0499" not in relayed     # no order was sealed
    config, nodes = _organisations(tmp_path / "b")
    relay = _relay(config, nodes)
    relay.connect()
    with pytest.raises(ProtocolError, match="party 'bank' refused align_request"):
        train(_KeySwapping(relay, "bank", "guest"))   # the host's key is relayed first


def test_a_node_without_its_own_identity_is_refused_before_anything_runs(tmp_path):
    config, nodes = _organisations(tmp_path)
    for change, match in (({"identity-key": nodes["bank"]["identity-key"]},
                           "party 'insurer': this identity key is not entry 1"),
                          ({"identity-key": None}, "needs its identity key")):
        bad = {**nodes, "insurer": {k: v for k, v in {**nodes["insurer"], **change}.items()
                                    if v is not None}}
        with pytest.raises(ProtocolError, match=match):
            _relay(config, bad).connect()


def test_garbled_training_messages_stop_the_run_naming_the_sender(tmp_path):
    config, nodes = _organisations(tmp_path)
    with pytest.raises(ProtocolError, match="party 'bank' refused residual, gradient: "
                                            "message from 'insurer'"):
        train(_garbling(config, nodes, "forward"))
    config, nodes = _organisations(tmp_path / "b")
    # the arbiter decrypts the guest's gradient beside the hosts' backward pass, then the
    # hosts' gradients (here the insurer's alone)
    with pytest.raises(ProtocolError, match="party 'arbiter' refused decrypt: the gradient "
                                            "relayed from 'insurer'"):
        train(_garbling(config, nodes, "backward"))


def test_the_guest_charges_label_dp_to_its_own_ledger(tmp_path):
    config, nodes = _organisations(tmp_path, extra="label_epsilon = 1.0\n")
    results = train(_connected(config, nodes))
    spent = _spent(tmp_path / "org-bank" / "ledger.sqlite")
    assert 0 < spent <= 1.0 and results["label_epsilon_spent"] == pytest.approx(spent)


def _connected(config, nodes):
    relay = _relay(config, nodes)
    relay.connect()
    return relay


def test_what_flower_cannot_run_is_refused_before_anything_runs(tmp_path):
    for extra, match in (('decryption = "threshold"', "decryption='threshold'"),):
        config, _ = _organisations(tmp_path / "t", extra=extra)
        with pytest.raises(ConfigError, match=match):
            vertical_app(config, tmp_path / "app")
    with pytest.raises(ConfigError, match="protocol='ss' does not run on Flower"):
        flower_settings({"protocol": "ss", "parties": {"a": "a.csv", "b": "b.csv"}})
    with pytest.raises(ConfigError, match="may not name a party 'arbiter'"):
        flower_settings({"parties": {"arbiter": "a.csv", "b": "b.csv"}})


@pytest.mark.slow  # Flower's simulation engine (Ray) starts in ~20 s
def test_veil_fl_run_on_flower_simulation_gives_the_local_model(tmp_path, capsys):
    from veil.cli.main import main

    config, _ = _organisations(tmp_path, epochs=2)
    main(["fl", "run", str(config), "--runtime", "flower-sim", "--out",
          str(tmp_path / "sim"), "--json"])
    results = json.loads((tmp_path / "sim" / "results.json").read_text())
    model = _local_model(config)
    np.testing.assert_array_equal(np.load(tmp_path / "sim" / "bank" / "coef.npy"),
                                  [*model.coefs_[0], model.intercept_])
    np.testing.assert_array_equal(np.load(tmp_path / "sim" / "insurer" / "coef.npy"),
                                  model.coefs_[1])
    assert results["runtime"] == "flower" and results["accuracy"] > 0.9
    capsys.readouterr()


@pytest.mark.slow  # 1-4 min on the shared 2-core machine: 11 exchanges (the handshake
#                   and 10), each a fresh ClientApp process per party
def test_alignment_and_paillier_lr_on_a_tls_deployment(tmp_path, capsys):
    """A SuperLink and three SuperNodes as processes on 127.0.0.1 with TLS, each
    organisation with its own folder; the app written by ``veil fl app``."""
    from veil.cli.main import main
    from veil.experiments.flower_app import Loopback

    config, nodes = _organisations(tmp_path, batch=400)
    main(["fl", "app", str(config), "--out", str(tmp_path / "app"), "--results",
          str(tmp_path / "results")])
    with Loopback(tmp_path / "deployment", parties=3, nodes=list(nodes.values())) as d:
        d.run(tmp_path / "app", timeout=500)
    assert d.pids() == []
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    model = _local_model(config)
    assert results["guest"] == "bank" and results["aligned"] == 440
    np.testing.assert_array_equal(np.load(tmp_path / "org-bank" / "model" / "coef.npy"),
                                  [*model.coefs_[0], model.intercept_])
    np.testing.assert_array_equal(np.load(tmp_path / "org-insurer" / "model" / "coef.npy"),
                                  model.coefs_[1])
    capsys.readouterr()


def test_three_organisations_align_on_the_ids_all_of_them_hold(tmp_path):
    """A bank and two feature holders with overlapping rows: the nodes' model is the local
    runtime's on the ids common to all three."""
    bank, insurer = _tables()
    telco = insurer[["id", *(f"i{j}" for j in range(11, 22))]].iloc[:-50]
    telco.columns = ["id", *(f"t{j}" for j in range(11))]
    insurer = insurer[["id", *(f"i{j}" for j in range(11))]]
    run = RUN.format(epochs=1, batch=200, extra="").replace(
        'insurer = "insurer.csv" }', 'insurer = "insurer.csv", telco = "telco.csv" }')
    config = tmp_path / "run.toml"
    config.write_text(run)
    nodes = {}
    for name, table in (("bank", bank), ("insurer", insurer), ("telco", telco), ("arbiter", None)):
        org = tmp_path / f"org-{name}"
        (org / "plans").mkdir(parents=True)
        (org / "plans" / "run.toml").write_text(run)
        nodes[name] = {"party": name, "plans": str(org / "plans"), "out": str(org / "model")}
        if table is not None:
            table.to_csv(tmp_path / f"{name}.csv", index=False)
            nodes[name]["data"] = str(tmp_path / f"{name}.csv")
    _identities(tmp_path, nodes, ["bank", "insurer", "telco"])
    results = train(_connected(config, nodes))
    local = run_vertical(load_config(config)["vertical"], base=tmp_path)
    assert results["aligned"] == local["aligned"] == len(set(bank.id) & set(telco.id)
                                                         & set(insurer.id))
    assert results["accuracy"] == local["accuracy"] and results["auc"] == local["auc"]
    section = load_config(config)["vertical"]
    joined = bank.merge(insurer, on="id").merge(telco, on="id")
    y = joined["y"].to_numpy()
    blocks = [joined[list(t.columns[1:])].to_numpy() for t in (bank.drop(columns="y"),
                                                               insurer, telco)]
    rng = check_rng(section["seed"])
    test = held_out(y.size, section["test_fraction"], rng)
    model = VerticalLogisticRegression("paillier", key_bits=512, insecure_ok=True,
                                       random_state=rng.spawn(1)[0],
                                       **vertical_settings(section).schedule())
    model.fit([b[~test] for b in blocks], y[~test])
    for name, coef in (("insurer", model.coefs_[1]), ("telco", model.coefs_[2])):
        np.testing.assert_array_equal(np.load(tmp_path / f"org-{name}" / "model" /
                                              "coef.npy"), coef)


def test_split_learning_on_nodes_gives_the_local_runtime_networks(tmp_path, one_torch_thread):
    """Bottom networks at the bank and the insurer, the top at the bank; the cut layer as
    bytes through the relay, no arbiter node."""
    pytest.importorskip("torch")
    from veil.fl.vertical.split import SplitNN

    extra = 'model = "split"\nhidden = 16\nembedding = 4\n'
    config, nodes = _organisations(tmp_path, epochs=2, extra=extra)
    config.write_text(config.read_text().replace('model = "logistic"\n', "").replace(
        "learning_rate = 0.3", "learning_rate = 0.03"))
    for name in ("bank", "insurer"):
        shutil.copyfile(config, tmp_path / f"org-{name}" / "plans" / "run.toml")
    del nodes["arbiter"]
    relay = _relay(config, nodes)
    assert relay.connect().keys() == {"bank", "insurer"}
    results = train(relay)
    section = load_config(config)["vertical"]
    local = run_vertical(section, base=tmp_path)
    assert results["accuracy"] == local["accuracy"] > 0.8
    assert results["auc"] == local["auc"] and results["batches"] == 2 * 2
    assert relay.grid.exchanges == 1 + 4 + 2 * 4 + 2   # a batch: the bottoms, the top
    # the local runtime's networks, on the same aligned rows (joined here)
    bank, insurer = _tables()
    joined = bank.merge(insurer, on="id")
    y = joined["y"].to_numpy()
    blocks = [joined[[f"b{j}" for j in range(8)]].to_numpy(),
              joined[[f"i{j}" for j in range(22)]].to_numpy()]
    rng = check_rng(section["seed"])
    test = held_out(y.size, section["test_fraction"], rng)
    model = SplitNN(hidden=16, embedding=4, epochs=2, batch_size=200, learning_rate=0.03,
                    random_state=rng.spawn(1)[0]).fit([b[~test] for b in blocks], y[~test])
    saved = {n: np.load(tmp_path / f"org-{n}" / "model" / "model.npz")
             for n in ("bank", "insurer")}
    for name, module in (("bank", model.bottoms_[0].module), ("insurer",
                                                              model.bottoms_[1].module)):
        for key, value in module.state_dict().items():
            np.testing.assert_array_equal(saved[name][f"bottom.{key}"], value.numpy())
    for key, value in model.top_.module.state_dict().items():
        np.testing.assert_array_equal(saved["bank"][f"top.{key}"], value.numpy())
    assert not any(k.startswith("top.") for k in saved["insurer"])


def test_a_garbled_cut_layer_is_refused_naming_the_host(tmp_path, one_torch_thread):
    pytest.importorskip("torch")
    config, nodes = _organisations(tmp_path, extra='model = "split"\n')
    text = config.read_text().replace('model = "logistic"\n', "")
    config.write_text(text)
    for name in ("bank", "insurer"):
        (tmp_path / f"org-{name}" / "plans" / "run.toml").write_text(text)
    del nodes["arbiter"]
    with pytest.raises(ProtocolError, match="party 'bank' refused step, next_batch: message "
                                            "from 'insurer': the sealed cut does not "
                                            "authenticate"):
        train(_garbling(config, nodes, "forward"))


class _Repeating(VerticalParty):
    """A guest whose top asks, in every batch of a pass, for the rows of its first batch."""

    first = None

    def call(self, method, args):
        answer = super().call(method, args)
        if method != "next_batch" or not answer:
            return answer
        batch = decode(answer)
        if self.first is None:
            self.first = batch["rows"]
        return encode({**batch, "rows": self.first})


def test_a_top_asking_a_host_for_rows_twice_in_a_pass_is_refused(tmp_path, one_torch_thread):
    """Issue #28, item 4 on Flower: the host's bottom releases each row once per pass
    (repeated noisy copies of a row would average its noise away for one charge), so a
    guest that asks again for rows it had in the same epoch stops the run naming the
    host's refusal."""
    pytest.importorskip("torch")
    config, nodes = _organisations(tmp_path, extra='model = "split"\n')
    text = config.read_text().replace('model = "logistic"\n', "")
    config.write_text(text)
    for name in ("bank", "insurer"):
        (tmp_path / f"org-{name}" / "plans" / "run.toml").write_text(text)
    del nodes["arbiter"]
    with pytest.raises(ProtocolError, match=r"'insurer'.*already served in pass"):
        train(_altered(config, nodes, "bank", _Repeating))


def test_the_relay_polls_through_the_runtimes_one_exchange(monkeypatch):
    """A vertical call waits POLL s between polls, as a horizontal stage does (it went
    through Flower's Grid.send_and_receive: 3 s per poll, on every call of a run)."""
    from veil.fl.runtime import flower

    grid = _PollingGrid(ready=2)
    monkeypatch.setattr(flower.time, "sleep", grid.sleep)
    relay = VerticalRelay(grid, VerticalSettings(parties=("bank", "insurer")), timeout=5.0)
    relay.nodes = {"bank": 7, "insurer": 8}
    assert relay.call({"bank": [("describe", {})], "insurer": [("describe", {})]}) == \
        {"bank": [b"7"], "insurer": [b"8"]}
    assert grid.sleeps == [flower.POLL]
