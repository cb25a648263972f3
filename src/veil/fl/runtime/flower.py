"""veil's federated protocols on Flower: every party on its own (virtual or real) node.

The protocols are sans-I/O (:mod:`veil.fl.protocol`), so Flower only has to move their
bytes. Two pieces, one per side of a Flower 1.42 app:

* **Server** -- :class:`FlowerRuntime`, a :class:`~veil.fl.runtime.LocalRuntime` whose
  deliveries go through a Flower ``Grid`` (inside a ``ServerApp``) instead of to objects in
  this process. It drives *any* :class:`~veil.fl.protocol.ServerRound` (plain FedAvg /
  FedProx, DP-FedAvg, SecAgg / SecAgg+, the hybrid approach) stage by stage: each request of
  a stage becomes one Flower ``Message`` of type ``query.<stage>`` to the node hosting the
  recipient, whose ``ConfigRecord`` ``"veil"`` carries the veil message as *bytes*
  (:meth:`veil.fl.messages.Message.to_bytes`; big integers are never Flower record ints,
  which are 64-bit). The answers come back the same way and are parsed and checked by the
  protocol as under the local runtime. Everything else -- the order of random draws,
  byte counts, simulated :class:`~veil.fl.runtime.Faults`, the round report -- is the local
  runtime's, so a seeded run gives the same model under both runtimes.
* **Nodes** -- :func:`client_app`, a ``ClientApp`` hosting one veil
  :class:`~veil.fl.protocol.ClientProtocol` per node.

Node ids and party indices. Flower's node ids are random and change when a node restarts.
Before the first round, :meth:`FlowerRuntime.connect` sends ``query.party`` to every node;
each answers with the party index from its own node configuration (``party-id`` in a
deployment: ``flower-supernode --node-config "party-id=3"``; ``partition-id`` in
simulation). Two nodes claiming one index, or an index outside the federation, are refused
(:class:`~veil.errors.ProtocolError`) before anything is sent.

The plan. Each party trusts only its own configuration: a node built with ``plan=``
(a function of its context giving the node's own plan, e.g. its copy of the run's
configuration) compares it, at ``query.party``, with the plan the server was started
with (:class:`FlowerRuntime`'s ``plan``); a node whose plan differs refuses, naming every
difference, and :meth:`FlowerRuntime.connect` raises :class:`~veil.errors.ProtocolError`
before any round runs, so nothing is charged anywhere. Every later message carries the
plan's digest (SHA-256 of its canonical JSON), and a node refuses one whose digest is not
the one it agreed to.

Failures are dropouts, exactly as under the local runtime: a node that does not answer
within ``timeout`` seconds, whose ClientApp failed (Flower error replies: code 2 the app
raised, 3 the node stopped, 5 the node was lost), whose party refused the request (a veil
error on the node), or that answered with bytes that do not parse as a veil message from
that very party, gives no answer for that stage; its reason is in ``report.rejected``. The
protocol then carries on with the others (SecAgg+ recovers a dropped party's mask), or
aborts the round if too few remain.

Party state across messages. Flower starts a fresh ClientApp process for every message a
node receives (in simulation, a Ray actor serves many nodes). The party object -- its keys,
key shares, model, data, round counters -- is pickled into the node's ``context.state``
after every message and restored from it before the next. ``context.state`` is held by the
node itself -- in a deployment the SuperNode's own node state, handed to its ClientApp
processes over the node's local runtime API (``--host 127.0.0.1 --port``, token per task;
flwr 1.42 ``supernode/servicer/runtime``); in simulation the engine's per-node state -- and
is never sent to the SuperLink or the server, so the pickle only ever round-trips inside the
party's own machine; it is never read from a message. (Pickle is why this must stay so: a
node never unpickles anything that came over the network.)

Randomness. A node uses secure randomness (:class:`veil.random.Generator`) unless its
ClientApp was built with ``seeded=True`` *and* the server sends a seed -- simulations and
tests only, so that runs are reproducible (the same rule as the local runtime's seeded
mode: such a run's privacy is not certified).

Threat model: as the protocols' own (honest-but-curious server; parties check every
message). Flower adds transport only; TLS between nodes and SuperLink in a deployment is
Flower's. A node only answers for its own party: answers claiming another sender are
dropped here, and the protocols reject them too.

Offline by default: importing this module sets ``FLWR_TELEMETRY_ENABLED=0`` and
``FLWR_DISABLE_UPDATE_CHECK=1`` unless they are set already.

:func:`simulate` runs a whole :class:`~veil.fl.Federation` on Flower's simulation engine
(one virtual node per party, 1 CPU each), as ``veil fl run CONFIG --runtime flower-sim``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

try:
    from flwr.app import ConfigRecord, Context, RecordDict
    from flwr.app import Message as FlowerMessage
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("the Flower runtime needs flwr: pip install 'veil[flower]'") from exc

from veil._json import canonical
from veil._validation import check_int, check_positive
from veil.errors import ConfigError, ProtocolError, VeilError
from veil.fl.messages import Message
from veil.fl.protocol import ClientProtocol, ServerRound
from veil.fl.runtime.local import Faults, LocalRuntime, RoundReport
from veil.fl.runtime.workers import Served, serve

__all__ = ["PARTY_STAGE", "FlowerRuntime", "client_app", "lost", "plan_differences",
           "send_and_receive", "simulate"]

log = logging.getLogger(__name__)

#: the stage that maps node ids to party indices (``query.party``)
PARTY_STAGE = "party"
_RECORD = "veil"      # the ConfigRecord every message carries
_STATE = "veil"       # the ConfigRecord of context.state holding the pickled party
_PLAN = "veil-plan"   # the ConfigRecord of context.state holding the agreed plan digest
#: the largest plan (canonical JSON) a node reads from the server
MAX_PLAN_BYTES = 1 << 20
#: seconds between two polls of the SuperLink for a stage's answers
POLL = 0.2


def _record(**fields: Any) -> RecordDict:
    return RecordDict({_RECORD: ConfigRecord({k: v for k, v in fields.items()
                                              if v is not None})})


def _field(content: RecordDict, name: str, kind: type) -> Any:
    """One field of a veil record (ProtocolError when missing or of another type)."""
    try:
        value = content.config_records[_RECORD][name]
    except (KeyError, TypeError, AttributeError):
        raise ProtocolError(f"the Flower message lacks the veil field {name!r}") from None
    if kind is list:
        ok = isinstance(value, list) and all(isinstance(v, bytes) for v in value)
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ProtocolError(f"the veil field {name!r} of a Flower message has type "
                            f"{type(value).__name__}; expected {kind.__name__}")
    return value


def _digest(plan: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical(plan)).hexdigest()


def plan_differences(mine: Mapping[str, Any], theirs: Mapping[str, Any],
                     prefix: str = "") -> list[str]:
    """Where two plans (nested mappings) differ, one line per key: ``section.key: this
    party's X, the server's Y`` (a key missing on one side reads ``(none)``)."""
    out = []
    for key in sorted(set(mine) | set(theirs), key=str):
        a, b = mine.get(key, "(none)"), theirs.get(key, "(none)")
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += plan_differences(a, b, f"{name}.")
        elif a != b:
            out.append(f"{name}: this party's {a!r}, the server's {b!r}")
    return out


# -- the node side ---------------------------------------------------------------------
def client_app(party: Callable[[Context], ClientProtocol], stages: Iterable[str], *,
               seeded: bool = False,
               plan: Callable[[Context], Mapping[str, Any]] | None = None) -> ClientApp:
    """A ClientApp hosting one veil party per node.

    ``party(context)`` builds the node's party the first time the node gets a message of a
    run (e.g. from ``context.node_config``: its index and its data file); from then on the
    party lives in ``context.state`` (see the module docstring). ``stages``: the stage
    names of the hosted protocol (``type(party).stages``), each served as ``query.<stage>``.
    ``seeded=True`` lets the server's seeds drive the party's randomness (simulations and
    tests only). ``plan(context)``: the node's own plan, compared with the server's (see
    the module docstring).
    """
    app = ClientApp()

    def index(context: Context) -> int:
        config = context.node_config
        value = config.get("party-id", config.get("partition-id"))
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"node config party-id={value!r} is not allowed: expected the "
                              "party index, an integer >= 0 (--node-config 'party-id=I')")
        return value

    def load(context: Context) -> ClientProtocol:
        if _STATE in context.state.config_records:
            # the party's own state, written by this node into its context.state: never
            # read from a message (module docstring)
            return pickle.loads(context.state.config_records[_STATE]["party"])  # noqa: S301
        hosted = party(context)
        if hosted.client_id != index(context):
            raise ConfigError(f"the party built for node party-id={index(context)} has "
                              f"client_id={hosted.client_id}")
        return hosted

    def hello(message: FlowerMessage, context: Context) -> FlowerMessage:
        refused = None
        if plan is not None:
            try:
                refused = _check_plan(plan(context), message.content, context)
            except VeilError as exc:    # its own files refuse it: the server is told why
                refused = str(exc)
        return FlowerMessage(_record(party=index(context), refused=refused),
                             reply_to=message)

    def handle(message: FlowerMessage, context: Context) -> FlowerMessage:
        record = message.content.config_records.get(_RECORD)
        if plan is not None:
            agreed = context.state.config_records.get(_PLAN, {}).get("digest")
            if agreed is None or record is None or record.get("plan") != agreed:
                kind = message.metadata.message_type
                raise ProtocolError(f"party {index(context)} refuses a {kind} message: it "
                                    "is not of the plan this party agreed to")
        hosted = load(context)
        data = _field(message.content, "message", bytes)
        seed, kind = record.get("seed"), record.get("kind")
        use_seed = (seeded and isinstance(seed, bytes) and len(seed) == 32
                    and kind in ("seeded", "simulation"))
        answers, cpu, error = serve(hosted, data, seed if use_seed else os.urandom(32),
                                    kind if use_seed else "secure")
        context.state.config_records[_STATE] = ConfigRecord(
            {"party": pickle.dumps(hosted, protocol=pickle.HIGHEST_PROTOCOL)})
        return FlowerMessage(_record(answers=answers, cpu=float(cpu), error=error),
                             reply_to=message)

    app.query(PARTY_STAGE)(hello)
    for stage in sorted(set(stages)):
        if stage == PARTY_STAGE:
            raise ConfigError(f"a protocol stage may not be named {PARTY_STAGE!r} on Flower")
        app.query(stage)(handle)
    return app


def _check_plan(mine: Mapping[str, Any], content: RecordDict, context: Context) -> str | None:
    """Why this node refuses the server's plan (None: it agrees, and keeps the digest)."""
    try:
        sent = _field(content, "plan", bytes)
        if len(sent) > MAX_PLAN_BYTES:
            raise ProtocolError(f"the server's plan has {len(sent)} bytes (at most "
                                f"{MAX_PLAN_BYTES})")
        theirs = json.loads(sent.decode())
        if not isinstance(theirs, dict):
            raise ProtocolError("the server's plan is not a JSON object")
    except (ProtocolError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return f"the server sent no readable plan ({exc})"
    mine = json.loads(canonical(mine))       # as the server's went: through JSON
    differences = plan_differences(mine, theirs)
    if differences:
        return "its plan differs from the server's: " + "; ".join(differences)
    context.state.config_records[_PLAN] = ConfigRecord({"digest": _digest(mine)})
    return None


# -- the server side -------------------------------------------------------------------
class FlowerRuntime(LocalRuntime):
    """Runs rounds through a Flower ``grid`` (see the module docstring).

    ``faults``: simulated faults on top of the real ones (default none); ``timeout``:
    seconds a stage waits for the nodes' answers. :meth:`run_round` has the local runtime's
    signature; the ``clients`` it is given are ignored (the parties live on the nodes), and
    the nodes are mapped to parties on the first call (:meth:`connect`). ``plan``: the
    run's plan (a JSON-able mapping), which nodes built with a plan check (module
    docstring); every message then carries its digest.
    """

    remote = True

    def __init__(self, grid: Grid, faults: Faults | None = None, *, timeout: float = 600.0,
                 record: bool = False, plan: Mapping[str, Any] | None = None) -> None:
        super().__init__(faults, record=record, timeout=timeout)
        self.grid = grid
        #: per stage delivered: round, stage, nodes asked, wall seconds from sending to the
        #: last answer, and the most CPU seconds one party spent on it (the rest of the
        #: wall time is Flower's own latency: polling, process start-up, transport)
        self.timeline: list[dict[str, Any]] = []
        self.plan = None if plan is None else json.loads(canonical(plan))
        self._plan_digest = None if plan is None else _digest(self.plan)
        self.nodes: dict[int, int] | None = None   # party index -> Flower node id
        #: the report of the latest round (:func:`lost` says why an aborted one failed)
        self.last_report: RoundReport | None = None

    def connect(self, parties: Iterable[int] | None = None) -> dict[int, int]:
        """Ask every node for its party index; returns (and keeps) party -> node id.

        ``parties``: the indices the federation expects (others are refused). A node that
        does not answer within ``timeout``, or answers something else than an index, is
        left out (its party is a dropout in every round);
        two nodes claiming one index, or a node refusing the plan, are a ProtocolError.
        Waits up to ``timeout`` seconds for as many nodes as ``parties`` to connect.
        """
        expected = None if parties is None else set(parties)
        node_ids = self._wait_for_nodes(len(expected) if expected else 1)
        plan = None if self.plan is None else canonical(self.plan)
        replies = send_and_receive(
            self.grid, [(node, PARTY_STAGE, _record(plan=plan)) for node in node_ids],
            self.timeout)
        nodes: dict[int, int] = {}
        for node, reply in zip(node_ids, replies):
            if reply is None or reply.has_error():
                log.warning("node %d did not say which party it hosts: %s", node,
                            "no answer" if reply is None else reply.error.reason)
                continue
            try:
                party = _field(reply.content, "party", int)
            except ProtocolError as exc:
                log.warning("node %d is left out: %s", node, exc)
                continue
            if expected is not None and party not in expected:
                raise ProtocolError(f"node {node} claims party {party}, which is not one of "
                                    f"the federation's {len(expected)} parties")
            if party in nodes:
                raise ProtocolError(f"nodes {nodes[party]} and {node} both claim party "
                                    f"{party}: give each node its own party-id")
            refused = reply.content.config_records[_RECORD].get("refused")
            if refused is not None:
                raise ProtocolError(f"party {party} (node {node}) refuses the run: {refused}")
            nodes[party] = node
        log.info("%d Flower node(s) host parties %s", len(nodes), sorted(nodes))
        self.nodes = nodes
        return nodes

    def _wait_for_nodes(self, count: int) -> list[int]:
        deadline = time.monotonic() + self.timeout
        while True:
            node_ids = sorted(int(n) for n in self.grid.get_node_ids())
            if len(node_ids) >= count or time.monotonic() > deadline:
                return node_ids
            time.sleep(0.2)

    def run_round(self, server: ServerRound, clients: Any = None,
                  rng: Any = None) -> RoundReport:
        if self.nodes is None:
            self.connect(clients)
        report = super().run_round(server, self.nodes, rng)
        for party in server.clients:
            if party not in self.nodes:
                report.rejected.append((party, "no Flower node hosts this party"))
        self.last_report = report
        return report

    def _execute(self, deliveries: list[tuple[int, bytes, bytes]], clients: Mapping[int, int],
                 kind: str) -> list[Served]:
        """Each delivery as one Flower message to the party's node; the answers (the seed
        travels only for a seeded run: veil.random's kinds)."""
        out: list[Served] = []
        seeded = kind != "secure"
        sent = [(clients[cid], Message.from_bytes(data).stage,
                 _record(message=data, seed=seed if seeded else None,
                         kind=kind if seeded else None, plan=self._plan_digest))
                for cid, data, seed in deliveries]
        began = time.perf_counter()
        replies = send_and_receive(self.grid, sent, self.timeout)
        seconds = time.perf_counter() - began
        for (cid, _, _), (_, stage, _), reply in zip(deliveries, sent, replies):
            out.append(_answers(cid, stage, reply))
        if deliveries:
            first = Message.from_bytes(deliveries[0][1])
            self.timeline.append({"round": first.round, "stage": first.stage,
                                  "nodes": len(sent), "seconds": seconds,
                                  "client_cpu": max(cpu for _, cpu, _ in out)})
        return out


def send_and_receive(grid: Grid, sent: Iterable[tuple[int, str, RecordDict]],
                     timeout: float) -> list[FlowerMessage | None]:
    """Send (node id, stage, content) messages as ``query.<stage>`` through ``grid``; the
    reply to each, in order (None: none within ``timeout`` seconds). Polls the SuperLink
    every :data:`POLL` seconds: Flower's own ``Grid.send_and_receive`` sleeps 3 s between
    polls, adding up to 3 s to every exchange (the horizontal rounds' stages and the
    vertical runs' calls, :mod:`veil.fl.runtime.flower_vertical`, both go through here)."""
    messages = [FlowerMessage(content, dst_node_id=node, message_type=f"query.{stage}")
                for node, stage, content in sent]
    waiting = set(grid.push_messages(messages))
    by_id: dict[str, FlowerMessage] = {}
    deadline = time.monotonic() + timeout
    while waiting:
        for reply in grid.pull_messages(waiting):
            by_id[reply.metadata.reply_to_message_id] = reply
            waiting.discard(reply.metadata.reply_to_message_id)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    return [by_id.get(m.metadata.message_id) for m in messages]


def lost(report: RoundReport, *, aborted: bool = True) -> str:
    """Why a round aborted, naming every party that gave no answer and at which stage (a
    deployed run that fails says who and where; :data:`RoundReport.rejected` reasons from
    :meth:`FlowerRuntime._execute` carry the stage). ``aborted=False``: a round that went
    on without them: only the parties lost ("" when none was)."""
    who = [f"party {party} {why}" for party, why in report.rejected]
    who += [f"party {party} dropped out at stage {stage} (a simulated fault)"
            for party, stage in report.dropped.items()]
    if not aborted:
        return "; ".join(who)
    return "; ".join([report.error or f"round {report.round} aborted", *who])


def _answers(party: int, stage: str, reply: FlowerMessage | None) -> Served:
    """A node's reply as (answers, CPU seconds, why none): bad replies are dropouts; the
    reason names the stage (a failed run names the party and where it was lost)."""
    answers, cpu, error = [], 0.0, None
    if reply is None:
        error = "no answer from its Flower node in time"
    elif reply.has_error():
        error = f"Flower error {reply.error.code}: {reply.error.reason}"
    else:
        try:
            answers = list(_field(reply.content, "answers", list))
            cpu = _field(reply.content, "cpu", float)
            error = reply.content.config_records[_RECORD].get("error")
            error = error if isinstance(error, str) else None
            for data in answers:
                if Message.from_bytes(data).sender != party:
                    raise ProtocolError(f"the node of party {party} answered for another "
                                        "party")
        except ProtocolError as exc:
            answers, cpu, error = [], 0.0, f"bad answer from its Flower node: {exc}"
    return answers, cpu, None if error is None else f"at stage {stage}: {error}"


# -- the simulation engine -------------------------------------------------------------
def simulate(federation: Any, *, faults: Faults | None = None, timeout: float = 600.0,
             cpus_per_client: float = 1.0, resume: bool = False) -> Any:
    """Run ``federation`` (a :class:`veil.fl.Federation`) on Flower's simulation engine:
    one virtual node per party (``partition-id`` = its index), ``cpus_per_client`` CPUs
    each; returns its History. The federation's seeded ``rng`` also seeds the parties
    (as under the local runtime); with secure randomness the nodes use their own.
    """
    from flwr.simulation import run_simulation

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no GPUs asked for

    timeout = check_positive(timeout, "timeout")
    check_positive(cpus_per_client, "cpus_per_client")
    parties = {cid: pickle.dumps(c) for cid, c in federation.clients.items()}
    stages = {s for c in federation.clients.values() for s in type(c).stages}
    seeded = federation._seed is not None or bool(getattr(federation._rng, "seeded", False))
    outcome: dict[str, Any] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            federation.runtime = FlowerRuntime(grid, faults, timeout=timeout)
            federation.runtime.connect(federation.clients)
            outcome["history"] = federation.run(resume=resume)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    def build(context: Context) -> ClientProtocol:
        index = check_int(context.node_config["partition-id"], "partition-id", low=0)
        # the simulation's own parties, pickled by this function's caller in this process
        return pickle.loads(parties[index])  # noqa: S301

    run_simulation(server_app=server, client_app=client_app(build, stages, seeded=seeded),
                   num_supernodes=len(parties),
                   backend_config={"client_resources": {"num_cpus": cpus_per_client,
                                                        "num_gpus": 0.0}})
    if "error" in outcome:
        raise outcome["error"]
    if "history" not in outcome:
        raise ProtocolError("the Flower simulation ended without running the federation")
    return outcome["history"]
