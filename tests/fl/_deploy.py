"""Shared set-up of the deployment tests (test_flower_deploy, test_flower_deploy_scale,
test_dealer_free_setup): each organisation's own folder of files, the threshold key made by
a dealer or by the parties themselves (dealer-free, as the CLI does it), a node killed
mid-round, ledgers, and the local twin of a run that lost parties."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import threading
import time

import dp_accounting
import pytest

from veil.cli.main import main
from veil.crypto import dkg, keyfile
from veil.crypto.identity import write_identities
from veil.dp import Ledger
from veil.dp.trust import Trust
from veil.errors import ProtocolError
from veil.experiments.fl_config import load_config
from veil.experiments.flower_app import _federation, write_app, write_party_data
from veil.fl import LocalRuntime
from veil.fl.hybrid.setup import deal

from .test_flower import _Tampered

COMMON = """
[data]
dataset = "breast_cancer"
clients = {parties}

[model]
type = "logistic_regression"

[run]
seed = 3
timeout = {timeout}
"""
HYBRID = COMMON + """
[training]
strategy = "hybrid"
rounds = 1

[privacy]
epsilon = 2.0
delta = 1e-5

[hybrid]
honest = {honest}
noise = "skellam"
key_bits = 512
insecure_ok = true
"""
SECAGG = COMMON + """
[training]
rounds = 1
learning_rate = 0.3
batch_size = 1000          # one full batch per epoch: training is deterministic

[secagg]
bits = 32
clip_range = 2.0
neighbours = {neighbours}
threshold = 0.5
min_survivors = {min_survivors}
"""

#: how a dead node is reported at its stage: no answer within the stage's timeout, or the
#: SuperLink's own verdict once the node missed two heartbeats (30 s apart in flwr 1.42),
#: whichever comes first
GONE = "(no answer from its Flower node in time|Flower error 5: Error: Node Unavailable)"


def loopback_addresses(parties):
    """127.0.0.2, 127.0.0.3, ...: one address per party at which it reaches the aggregator
    (Linux routes all of 127/8 to lo: no packet leaves this machine)."""
    assert parties <= 250
    return [f"127.0.0.{2 + i}" for i in range(parties)]


def hybrid_plan(parties, timeout=60):
    """A one-round hybrid plan for ``parties`` parties, ``parties // 2`` of them honest;
    each stage waits ``timeout`` s for the nodes' answers."""
    return HYBRID.format(parties=parties, timeout=timeout, honest=parties // 2)


def secagg_plan(parties, timeout=60, *, neighbours=3, min_survivors=0.5, identities=None):
    """A one-round SecAgg+ plan (deterministic training: the model is a function of who
    survived); ``identities``: the parties' identity table (a deployment needs one)."""
    text = SECAGG.format(parties=parties, timeout=timeout, neighbours=neighbours,
                         min_survivors=min_survivors)
    return text if identities is None else text + f'identities = "{identities}"\n'


def keygen(root, name, parties=3, honest=2, *, bits=256):
    """The parties run the dealer-free key generation (test size; ``honest`` of them
    assumed honest: :class:`veil.dp.trust.Trust`); organisation i writes only its own
    share, ``<root>/<name>i/party-i.key``, as ``veil keygen`` does. Returns the public
    key."""
    trust = Trust(parties, honest)
    params = dkg.KeygenParams.make(bits, parties, trust.threshold, insecure_ok=True)
    session = secrets.token_bytes(16)
    results, _ = dkg.run_local([dkg.KeygenParty(i + 1, params, session)
                                for i in range(parties)])
    for i, (_, share) in enumerate(results):
        (root / f"{name}{i}").mkdir(parents=True, exist_ok=True)
        keyfile.save_key_share(root / f"{name}{i}" / f"party-{i}.key", share)
    return results[0][0]


def dealer_free(root, parties=3, honest=2, *, bits=256):
    """Every organisation's hybrid files with no dealer, each made by the CLI on its own
    machine: its key share (:func:`keygen`), its identity (``veil fl identity``), the
    public set-up built from its own share and the published identities (``veil fl
    setup``: ``<root>/org<i>/public.bin``) and its ``party-i.id`` (``veil fl enrol``).
    Returns the public key."""
    public_key = keygen(root, "org", parties, honest, bits=bits)
    for i in range(parties):
        assert main(["fl", "identity", "--party", str(i), "--out", str(root / f"org{i}")]) == 0
    tables = [a for i in range(parties)
              for a in ("--identities", str(root / f"org{i}" / f"identity-{i}.json"))]
    for i in range(parties):
        org = root / f"org{i}"
        assert main(["fl", "setup", "--key-share", str(org / f"party-{i}.key"), *tables,
                     "--out", str(org / "public.bin"), "--insecure-ok"]) == 0
        assert main(["fl", "enrol", "--party", str(i), "--key-share", str(org / f"party-{i}.key"),
                     "--identity-key", str(org / f"identity-{i}.key"),
                     "--setup", str(org / "public.bin"), "--out", str(org / f"party-{i}.id"),
                     *tables, "--insecure-ok"]) == 0
    return public_key


def organisations(root, parties, plans, *, keys="dealer"):
    """``parties`` organisations, each with its own folder ``<root>/org<i>`` (its copies of
    the plans, its data, ledger and files), and the aggregator's app for each plan.

    ``plans``: run name -> plan text (:func:`hybrid_plan`, :func:`secagg_plan`; a SecAgg
    plan's identity table is made here, out of band: write it with ``identities=
    "{identities}"``); ``keys``: how a hybrid plan's threshold key is made, ``"dealer"``
    (:func:`veil.fl.hybrid.setup.deal`, which hands each party its two files) or
    ``"dealer-free"`` (:func:`dealer_free`). Returns (run files, app folders, node
    configurations)."""
    runs = {}
    identities = root / "identities"
    for name, text in plans.items():
        if "{identities}" in text:
            if not identities.exists():
                write_identities(identities, parties)
            text = text.replace("{identities}", str(identities / "identities.json"))
        runs[name] = root / f"{name}.toml"
        runs[name].write_text(text)
    hybrid = any(load_config(path).kind == "hybrid" for path in runs.values())
    public = None
    if hybrid and keys == "dealer":
        dealt = root / "dealer"
        deal(Trust(parties, parties // 2), dealt, bits=512, insecure_ok=True)
        public = dealt / "public.bin"
        for i in range(parties):      # the dealer hands each party its own two files
            (root / f"org{i}").mkdir(parents=True)
            for kind in ("key", "id"):
                shutil.move(dealt / f"party-{i}.{kind}", root / f"org{i}" / f"party-{i}.{kind}")
    elif hybrid:
        dealer_free(root, parties, parties // 2, bits=512)
        public = root / "org0" / "public.bin"    # the aggregator gets it from one party
    data = write_party_data(next(iter(runs.values())), root / "split")
    nodes = []
    for i in range(parties):
        org = root / f"org{i}"
        (org / "plans").mkdir(parents=True)
        for config in runs.values():
            shutil.copyfile(config, org / "plans" / config.name)
        node = {"party-id": i, "plans": str(org / "plans"), "data": str(data[i]),
                "ledger": str(org / "ledger.sqlite")}
        if hybrid:
            node.update({"key-share": str(org / f"party-{i}.key"),
                         "identity": str(org / f"party-{i}.id")})
        if identities.exists():
            node["identity-key"] = str(identities / f"identity-{i}.key")
        nodes.append(node)
    apps = {name: write_app(config, root / f"app-{name}", results=root / f"out-{name}",
                            setup=public if load_config(config).kind == "hybrid" else None)
            for name, config in runs.items()}
    return runs, apps, nodes


@contextlib.contextmanager
def killing(deployment, nodes, stage):
    """While the block runs, SIGKILL each of ``nodes`` (a machine that dies) as soon as its
    SuperNode receives a ``query.<stage>`` message (one logged after the block began: not
    one of an earlier run). Yields the set of the nodes killed so far."""
    logs = {i: deployment.directory / f"node{i}.log" for i in nodes}
    seen = {i: len(path.read_text(errors="replace")) for i, path in logs.items()}
    killed, done = set(), threading.Event()

    def watch():
        while logs and not done.is_set():
            for i, path in list(logs.items()):
                if f"query.{stage}" in path.read_text(errors="replace")[seen[i]:]:
                    deployment.kill(i)
                    killed.add(i)
                    del logs[i]
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield killed
    finally:
        done.set()
        watcher.join()


def spent(path):
    """The epsilon spent in the ledger file ``path`` (0 where there is none)."""
    return Ledger.open(path, read_only=True).spent()[0] if path.exists() else 0.0


def spend(path, config):
    """Spend epsilon ~1 of the run's budget in the ledger file ``path`` beforehand: what a
    plan submitted again finds (its first submission charged it)."""
    p = load_config(config)["privacy"]
    ledger = Ledger(p["epsilon"], p["delta"], accountant=p["accountant"], path=path)
    ledger.charge(dp_accounting.LaplaceDpEvent(1.0), label="an earlier run")
    ledger.close()


def fails(deployment, app, out, timeout=240):
    """Submit ``app``, which must fail: the error (what `veil fl submit` prints before it
    exits 1) once it is checked that no model nor results were written under their final
    names and that failure.json says why."""
    with pytest.raises(ProtocolError, match="ended finished:failed") as failed:
        deployment.run(app, timeout=timeout)
    assert not (out / "results.json").exists() and not (out / "params.npy").exists()
    assert json.loads((out / "failure.json").read_text())["error"] in str(failed.value)
    return str(failed.value)


def local_twin(root, plan_text, lost, stage):
    """The run of ``plan_text`` under the local runtime with the parties ``lost`` refusing
    at ``stage`` (as a killed node is lost there): its History. Simulated: the runner
    makes the parties' identity keys (no identity table); SecAgg+'s masks cancel exactly,
    so a deployed run that lost the same parties gives the same model."""
    config = root / "local-twin.toml"
    config.write_text(plan_text)
    _, federation = _federation(config)
    for party in lost:
        federation.clients[party] = _Tampered(federation.clients[party], stage, "refuse")
    federation.runtime = LocalRuntime()
    return federation.run()
