"""The Flower runtime: the same rounds as the local runtime; bad nodes are dropouts.

Most tests drive :class:`FlowerRuntime` through a loopback grid that runs each node's
ClientApp in this process (Flower's own Message, Context and ClientApp objects; no Ray), so
they are fast; two run Flower's simulation engine (Ray, ~20 s each).
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")

from flwr.app import Context, Error, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402

from veil.dp.trust import Trust
from veil.errors import ProtocolError  # noqa: E402
from veil.fl import Federation, LocalRuntime  # noqa: E402
from veil.fl.messages import Message  # noqa: E402
from veil.fl.runtime.flower import FlowerRuntime, _record, client_app, simulate  # noqa: E402
from veil.fl.strategies import FedAvg, SecAgg  # noqa: E402
from veil.learn import LogisticRegression  # noqa: E402

from .conftest import make_clients  # noqa: E402


@pytest.fixture(autouse=True)
def _task_identity():
    """Flower messages are made inside a run: what its runners set, the loopback grid sets."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    yield
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = saved


class _LoopbackGrid:
    """A stand-in for Flower's Grid: node ``n`` runs ``apps[n]`` here, with its own Context
    kept across messages (as a SuperNode does); a node in ``silent`` never answers; an app
    that raises gives Flower's error reply (code 2, as a deployment does)."""

    def __init__(self, apps, configs, silent=()):
        self.apps = apps
        self.silent = set(silent)
        self.contexts = {n: Context(run_id=1, node_id=n, node_config=configs[n],
                                    state=RecordDict(), run_config={}) for n in apps}

    def get_node_ids(self):
        return list(self.apps)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            node = m.metadata.dst_node_id
            if node in self.silent:
                continue
            try:
                replies.append(self.apps[node](m, self.contexts[node]))
            except Exception as exc:
                replies.append(FlowerMessage(Error(code=2, reason=str(exc)), reply_to=m))
        return replies

    def push_messages(self, messages):
        messages = list(messages)
        self._replies = self.send_and_receive(messages)
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids):
        replies, self._replies = self._replies, []
        return replies


def _grid(parties, silent=(), claims=None):
    """One loopback node per party (node id 1000 + index, config party-id = index)."""
    stages = {s for p in parties.values() for s in type(getattr(p, "party", p)).stages}
    apps, configs = {}, {}
    for cid, party in parties.items():
        node = 1000 + cid
        apps[node] = client_app(lambda context, p=party: p, stages, seeded=True)
        configs[node] = {"party-id": (claims or {}).get(cid, cid)}
    return _LoopbackGrid(apps, configs, {1000 + c for c in silent})


class _Tampered:
    """Hosts ``party`` but, in ``stage``, answers bad bytes (``"junk"``), answers as
    party 0 (``"impostor"``), crashes (``"crash"``) or refuses (``"refuse"``: a veil error,
    no answer -- a dropout under the local runtime at exactly the point where a bad node
    drops out under Flower). Picklable, as every party kept in a node's context must be."""

    def __init__(self, party, stage, how):
        self.party, self.stage, self.how = party, stage, how
        self.client_id = party.client_id

    def handle(self, msg, rng):
        if msg.stage == self.stage and self.how == "refuse":
            raise ProtocolError("refused")
        if msg.stage == self.stage and self.how == "crash":
            raise RuntimeError("the node's app crashed")
        answers = self.party.handle(msg, rng)
        if msg.stage != self.stage:
            return answers
        if self.how == "junk":
            return [_Bytes(b"VMSG\x02 not a veil message")]
        return [Message(a.protocol, a.round, a.stage, 0, a.recipient, a.body) for a in answers]


class _Bytes:
    def __init__(self, data):
        self.data = data

    def to_bytes(self):
        return self.data


def _round(strategy, data, runtime, clients, seed=3, fed=None):
    fed = fed or Federation(data, LogisticRegression(), strategy, 1, rng=seed)
    rng = fed._round_rng(0)
    sampled = strategy.sample(0, sorted(fed.clients), rng)
    server = strategy.server(0, fed.params, sampled, rng)
    return runtime.run_round(server, clients(fed), rng)


def _secagg():
    return SecAgg(FedAvg(weighted=False), neighbours=4, threshold=0.5, min_survivors=0.5)


@pytest.mark.parametrize("how, reason", [
    ("junk", "bad answer from its Flower node"),
    ("impostor", "answered for another party"),
])
def test_a_node_sending_bad_bytes_is_a_dropout_like_under_the_local_runtime(how, reason):
    data = make_clients(5)
    local = _round(_secagg(), data, LocalRuntime(), lambda fed: {
        **fed.clients, 3: _Tampered(fed.clients[3], "masked_input", "refuse")})
    strategy = _secagg()   # the nodes' clients and the server share its identity table
    fed = Federation(data, LogisticRegression(), strategy, 1, rng=3)
    grid = _grid({**fed.clients, 3: _Tampered(fed.clients[3], "masked_input", how)})
    flower = _round(strategy, data, FlowerRuntime(grid, timeout=5.0), lambda _: None,
                    fed=fed)
    assert any(c == 3 and reason in why for c, why in flower.rejected), flower.rejected
    assert flower.completed and 3 not in flower.result.clients
    assert flower.result.clients == local.result.clients
    np.testing.assert_array_equal(flower.result.params, local.result.params)


def test_silent_and_failing_nodes_are_dropouts_and_the_round_completes():
    data = make_clients(4)
    fed = Federation(data, LogisticRegression(), FedAvg(), 1, rng=0)
    # party 2's app crashes on its node (a Flower error reply), party 3 refuses (a veil
    # error), party 1's node never answers
    grid = _grid({**fed.clients, 2: _Tampered(fed.clients[2], "fit", "crash"),
                  3: _Tampered(fed.clients[3], "fit", "refuse")}, silent=[1])
    report = _round(FedAvg(), data, FlowerRuntime(grid, timeout=0.5), lambda _: None, seed=0)
    reasons = dict(report.rejected)
    assert "no Flower node hosts this party" in reasons[1]
    assert report.result.clients == (0,), report.rejected
    assert "Flower error 2" in reasons[2] and "crashed" in reasons[2]
    assert "refused" in reasons[3]


def test_two_nodes_claiming_one_party_are_refused_before_any_round():
    data = make_clients(3)
    fed = Federation(data, LogisticRegression(), FedAvg(), 1, rng=0)
    runtime = FlowerRuntime(_grid(fed.clients, claims={2: 1}), timeout=0.5)
    with pytest.raises(ProtocolError, match="both claim party 1"):
        runtime.connect([0, 1, 2])
    runtime = FlowerRuntime(_grid(fed.clients, claims={2: 7}), timeout=0.5)
    with pytest.raises(ProtocolError, match="claims party 7"):
        runtime.connect([0, 1, 2])


def test_party_state_lives_in_the_node_context_between_messages():
    data = make_clients(4)
    fed = Federation(data, LogisticRegression(), _secagg(), 2, rng=1)
    grid = _grid(fed.clients)
    fed.runtime = FlowerRuntime(grid, timeout=5.0)
    flower = fed.run()
    local = Federation(data, LogisticRegression(), _secagg(), 2, rng=1).run()
    np.testing.assert_array_equal(flower.params, local.params)
    for context in grid.contexts.values():       # each node holds its own party's state
        assert "veil" in context.state.config_records
    assert [r["bytes_up"] for r in flower.rounds] == [r["bytes_up"] for r in local.rounds]


def test_flower_simulation_gives_the_local_runtime_model():
    data = make_clients(6)
    local = Federation(data, LogisticRegression(), FedAvg(local_epochs=2), 2, rng=11).run()
    flower = simulate(Federation(data, LogisticRegression(), FedAvg(local_epochs=2), 2,
                                 rng=11), timeout=120.0)
    assert [r["status"] for r in flower.rounds] == ["ok", "ok"]
    np.testing.assert_array_equal(flower.params, local.params)
    assert [r["bytes_down"] for r in flower.rounds] == [r["bytes_down"] for r in local.rounds]


SECAGG_PLUS = """
[data]
dataset = "digits"
partition = "dirichlet"
alpha = 1.0
clients = 6
min_size = 30

[model]
type = "softmax_regression"

[training]
rounds = 2
learning_rate = 0.3
batch_size = 32

[secagg]
bits = 32
clip_range = 2.0
neighbours = 4

[faults]
dropout = 0.2

[run]
seed = 3
"""


def test_cli_secagg_plus_on_flower_simulation_gives_the_local_run(tmp_path, capsys):
    from veil.cli.main import main

    config = tmp_path / "plus.toml"
    config.write_text(SECAGG_PLUS)
    runs = {}
    for runtime in ("local", "flower-sim"):
        out = tmp_path / runtime
        assert main(["fl", "run", str(config), "--out", str(out), "--runtime", runtime,
                     "--json"]) == 0
        runs[runtime] = json.loads((out / "results.json").read_text())
    capsys.readouterr()
    local, flower = runs["local"]["rounds"], runs["flower-sim"]["rounds"]
    assert [(r["status"], r["dropped"]) for r in flower] == [("ok", 0), ("ok", 1)]
    for key in ("accuracy", "loss", "aggregated", "dropped", "bytes_up", "bytes_down"):
        assert [r[key] for r in flower] == [r[key] for r in local], key
    assert main(["fl", "run", str(config), "--runtime", "flower"]) == 2
    assert "not allowed" in capsys.readouterr().err


HYBRID = """
[data]
dataset = "digits"
partition = "iid"
clients = 4

[model]
type = "softmax_regression"

[training]
strategy = "hybrid"
rounds = 2

[privacy]
epsilon = 1.0
delta = 1e-5

[hybrid]
honest = 3
key_bits = 256
insecure_ok = true

[run]
seed = 3
"""


def test_veil_fl_app_and_certs_write_a_flower_app_and_a_tls_chain(tmp_path, capsys):
    import tomllib

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from veil.cli.main import main

    config = tmp_path / "plus.toml"
    config.write_text(SECAGG_PLUS)
    assert main(["fl", "app", str(config), "--out", str(tmp_path / "no")]) == 2
    assert "identity table" in capsys.readouterr().err   # SecAgg needs the parties' keys
    assert main(["fl", "identities", str(tmp_path / "keys"), "--parties", "6"]) == 0
    deployed = SECAGG_PLUS.replace(
        "[secagg]\n", f'[secagg]\nidentities = "{tmp_path / "keys" / "identities.json"}"\n')
    config.write_text(deployed)
    assert main(["fl", "app", str(config), "--out", str(tmp_path / "app")]) == 0
    project = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert project["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "veil_app:server", "clientapp": "veil_app:client"}
    assert (tmp_path / "app" / "run.toml").read_text() == deployed
    unseeded = tmp_path / "unseeded.toml"
    unseeded.write_text(deployed.replace("seed = 3", ""))
    assert main(["fl", "app", str(unseeded), "--out", str(tmp_path / "no")]) == 2
    assert "seed is required" in capsys.readouterr().err

    hybrid = tmp_path / "hybrid.toml"
    hybrid.write_text(HYBRID)
    assert main(["fl", "app", str(hybrid), "--out", str(tmp_path / "no")]) == 2
    assert "dealer" in capsys.readouterr().err

    assert main(["fl", "certs", str(tmp_path / "tls"), "--host", "127.0.0.1"]) == 0
    ca = x509.load_pem_x509_certificate((tmp_path / "tls" / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "tls" / "server.crt").read_bytes())
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes,
                           ec.ECDSA(cert.signature_hash_algorithm))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert (tmp_path / "tls" / "server.key").stat().st_mode & 0o077 == 0


def test_a_hybrid_round_with_a_party_lost_mid_round_matches_the_local_runtime():
    """Threshold Paillier + distributed noise through Flower messages (key shares live on
    the nodes); party 1 fails in the decryption stage on both runtimes."""
    from veil.dp import Ledger
    from veil.fl.strategies import Hybrid

    data = make_clients(3, d=3)

    def federation(broken):
        strategy = Hybrid(Trust(3, 2), rounds=2, noise_multiplier=1.0, key_bits=256,
                          insecure_ok=True, rng=1)
        # the same model needs the same noise: a labelled simulation (seeded noise)
        fed = Federation(data, LogisticRegression(), strategy, 2, rng=4, simulate_noise=True,
                         ledger=Ledger(50.0, 1e-5))
        fed.clients[1] = _Tampered(fed.clients[1], "decrypt", broken)
        return fed

    local = federation("refuse").run()
    fed = federation("crash")
    grid = _grid(fed.clients)
    fed.runtime = FlowerRuntime(grid, timeout=5.0)
    flower = fed.run()
    assert [r["status"] for r in flower.rounds] == ["ok", "ok"]
    np.testing.assert_array_equal(flower.params, local.params)
    assert [r["rejected"] for r in flower.rounds] == [r["rejected"] for r in local.rounds]
    assert sum(r["rejected"] for r in flower.rounds) > 0   # party 1 was asked and failed


class _PollingGrid:
    """A grid whose nodes answer only from the ``ready``-th pull on, in reverse order; a
    node in ``silent`` never answers. Time is a fake clock advanced by ``time.sleep``."""

    def __init__(self, ready=3, silent=()):
        self.ready, self.silent, self.pulls, self.clock, self.sleeps = ready, set(silent), 0, \
            0.0, []
        self.pushed = []

    def push_messages(self, messages):
        self.pushed = list(messages)
        for m in self.pushed:
            m.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        return [m.metadata.message_id for m in self.pushed]

    def pull_messages(self, message_ids):
        self.pulls += 1
        if self.pulls < self.ready:
            return []
        return [FlowerMessage(_record(answers=[str(m.metadata.dst_node_id).encode()]),
                              reply_to=m) for m in reversed(self.pushed)
                if m.metadata.message_id in message_ids
                and m.metadata.dst_node_id not in self.silent]

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.clock += seconds


def test_one_exchange_polls_every_poll_seconds_and_matches_replies_to_messages(monkeypatch):
    """The one exchange both Flower runtimes use (horizontal stages, vertical calls):
    Flower's Grid.send_and_receive sleeps 3 s between polls; this polls every POLL s, gives
    each message its own reply whatever order they come in, and None for a silent node once
    the timeout has passed."""
    from veil.fl.runtime import flower

    grid = _PollingGrid(ready=3, silent={12})
    monkeypatch.setattr(flower.time, "sleep", grid.sleep)
    monkeypatch.setattr(flower.time, "monotonic", lambda: grid.clock)
    sent = [(node, "fit", _record(message=b"m")) for node in (10, 11, 12)]
    replies = flower.send_and_receive(grid, sent, timeout=2.0)
    assert [None if r is None else r.content.config_records["veil"]["answers"]
            for r in replies] == [[b"10"], [b"11"], None]
    assert set(grid.sleeps) == {flower.POLL} and flower.POLL < 1
    assert grid.clock == pytest.approx(2.0, abs=flower.POLL)   # waited the timeout, no more
    grid = _PollingGrid(ready=3)      # all answer: the third pull ends the exchange
    monkeypatch.setattr(flower.time, "sleep", grid.sleep)
    assert all(flower.send_and_receive(grid, sent, timeout=2.0))
    assert grid.pulls == 3 and grid.sleeps == [flower.POLL] * 2

