"""Vertical runs on Flower: each organisation a node that holds only its own table.

A ``[vertical]`` run (:mod:`veil.experiments.vertical_run`) runs here with every party on its own
Flower node: the label holder (the *guest*) and each feature holder (a *host*), each with
only its own table, and -- for ``model = "logistic"`` or ``"linear"`` with ``protocol =
"paillier"`` -- the *arbiter*, which holds the Paillier key (FATE's Coordinated-LR shape);
``model = "split"`` (split learning) needs no key: a bottom network at every table's node,
the top at the guest's. The parties are the sans-I/O objects of
:mod:`veil.fl.vertical.align` (ECDH-PSI), :mod:`veil.fl.vertical.paillier_lr` (Hardy et
al. 2017) and :mod:`veil.fl.vertical.split`;
:class:`~veil.fl.vertical.parties.VerticalParty` hosts them on a node and the
ServerApp (:class:`VerticalRelay`, :func:`~veil.fl.vertical.parties.train`) only
moves their bytes, in the order of the local runners
(:func:`veil.fl.vertical.linear.train_paillier`, :func:`veil.fl.vertical.split.train_split`):
a Flower message ``query.call`` carries a list of calls ``{"method", "args"}``
(:func:`veil.fl.messages.encode`, bytes in a ``ConfigRecord``, as the horizontal runtime
:mod:`veil.fl.runtime.flower` does) and its reply the list of their answers (bytes).

Who sees what (threat model: semi-honest parties and server, no collusion of the arbiter
with the server or another party; the protocols' own, :mod:`veil.fl.vertical.align` and
:mod:`veil.fl.vertical.paillier_lr`):

* the server relays and so sees every message: blinded PSI points, row positions of the
  batches (positions in the guest's training order, not ids), ciphertexts under the
  arbiter's key, the arbiter's decryptions of *masked* gradients (uniform up to
  2^-(key bits - 8 - bits of g), as the arbiter sees them), the guest's final metrics, and
  at the handshake each party's column names and row count (the schema, no values);
* no id leaves a node in the clear: the one message of the alignment that names ids (the
  guest's order of the common ids, with the held-out rows) and each host's partial scores
  (or embeddings) of the held-out rows (for the guest's metrics, as FATE's prediction)
  are sealed end to end between the guest and that host (ephemeral X25519, RFC 7748,
  HKDF-SHA256, AES-256-GCM with numbered nonces:
  :mod:`veil.fl.vertical.parties`), so the relay sees only their
  lengths. So are split learning's cut layer -- each host's embeddings and the top's
  gradients of them, which would show the relay features and labels (Li et al. 2022) --
  and the guest's own embeddings never leave its node. The channel keys are signed: each
  organisation has an Ed25519 identity key (node config ``identity-key``) whose public key
  is its entry -- its index in ``parties`` -- of the identity table named in the run file
  (``[vertical] identities``, read from the node's own copy beside its plan; made with
  ``veil fl identities DIR --parties N`` or by each organisation with ``veil fl
  identity``); a party seals only to a channel key signed (with the plan's digest, the
  signer's name and role) under its peer's entry of its own table, so a server that puts
  its own keys in the parties' place is refused by name (Flower's TLS ends at the
  SuperLink, so this is what binds the channels to the organisations). A host takes the
  guest's key from whichever other party of the table signed it in the guest's role: the
  parties are semi-honest; the server is not trusted with the channels;
* why the arbiter is a node of its own, the default, and not the server: the server sees
  every ciphertext, so a server holding the key would read the residuals (hence the
  labels) and the hosts' scores. The arbiter sees only masked gradients. Threshold
  decryption among the parties (``decryption = "threshold"``) is refused here: veil's
  threshold Paillier needs a dealer at key generation (:mod:`veil.crypto.threshold`),
  which a deployment would have to run out of band; it runs under the local runtime.

The deployment's app (``veil fl app``: its ServerApp and the ClientApp built from a node's
own files) is :mod:`veil.experiments.flower_vertical_app`.

Each party trusts only its own files. A node's configuration (``flower-supernode
--node-config``; :data:`NODE_KEYS`) names its party, its own copy of the run file (in
``plans``), its own table (``data``; none for the arbiter), its ledger and its output
folder::

    party  = "guest"                   # its name in [vertical] parties, or "arbiter"
    plans  = "/bank/plans"             # its own copies of the run files
    data   = "/bank/guest.csv"         # its own table (id column, features, the label)
    ledger = "/bank/ledger.sqlite"     # the guest with label_epsilon: its budget
    identity-key = "/bank/identity-0.key"  # its Ed25519 key (a table owner; below)
    out    = "/bank/model"             # its own part of the model: coef.npy (its
                                       # coefficient block) or model.npz (its networks)

At ``query.party`` every node answers its party name and the schema of its own table, and
compares its plan (:meth:`VerticalSettings.message
<veil.fl.vertical.parties.VerticalSettings.message>`: the settings with the party names but
not their files) with the server's (:func:`veil.fl.runtime.flower._check_plan`); the
server refuses before anything runs (:class:`~veil.errors.ProtocolError`) two nodes
claiming one party, a party not in the plan, a missing party, a node refusing the plan,
the label at no party or at two, and a feature column at two parties. Every later message
carries the plan's digest; a node refuses one of another plan. A party checks every peer
message (the protocols' readers, naming the peer); a refusal on a node stops the run with
a ProtocolError naming that node's party and the peer it blames. A vertical run has no
dropouts: every feature holder is needed for every step. The guest charges label DP
(``label_epsilon``) to its own ledger (node config ``ledger``): the Paillier guest before
each epoch's noise is drawn, the split top once before its labels are randomized (after
the alignment); a run refused at the handshake or in the alignment charges nothing.

Party state across messages lives in the node's ``context.state`` as a pickle that never
leaves the node (as in :mod:`veil.fl.runtime.flower`); :func:`_dumps` stores a
secure generator as "a fresh one" (so no CSPRNG stream is ever replayed from a copy), an
X25519 key as its bytes, a seeded generator as its key (its whole state) and a ledger as
its file.

Randomness: PSI keys, masks, encryption noise, channel keys and DP noise come from the
CSPRNG; ``seed`` (``[run] seed``) drives only the held-out rows, the batch order and the
networks' initialisation, drawn as under the local runtime (each node replays the draws
it needs), so a seeded run gives the local runtime's model (:func:`simulate`, ``veil fl
run CONFIG --runtime flower-sim``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from veil._json import canonical
from veil.errors import ConfigError, ProtocolError, VeilError
from veil.fl.messages import decode, encode
from veil.fl.runtime.flower import (
    _RECORD,
    PARTY_STAGE,
    ClientApp,
    ConfigRecord,
    Context,
    FlowerMessage,
    Grid,
    ServerApp,
    _check_plan,
    _digest,
    _field,
    _record,
    send_and_receive,
)
from veil.fl.vertical.parties import (
    ARBITER,
    VerticalParty,
    VerticalSettings,
    check_flower,
    nodes_of,
    train,
)
from veil.random import Generator

__all__ = ["NODE_KEYS", "VerticalRelay", "client_app", "simulate"]

log = logging.getLogger(__name__)

#: what a vertical node's configuration may name, and the type of each
NODE_KEYS = {"party": str, "plans": str, "data": str, "ledger": str, "out": str,
             "identity-key": str}
_CALL = "call"            # query.call: a list of calls to the node's party
_STATE = "veil-vertical"  # the ConfigRecord of context.state holding the pickled party
_PLAN = "veil-plan"       # as in flower.py: the digest the node agreed to


class _Pickler(pickle.Pickler):
    """Party state for the node's own context.state (module docstring)."""

    def reducer_override(self, obj: Any) -> Any:
        # no Ledger exists unless its module is loaded (importing it loads dp_accounting
        # and scipy: most parties have no ledger)
        ledgers = sys.modules.get("veil.dp.ledger")
        if isinstance(obj, Generator):
            return _generator, ((obj._key, obj.simulate_noise) if obj.seeded else None,)
        if isinstance(obj, X25519PrivateKey):
            return X25519PrivateKey.from_private_bytes, (obj.private_bytes_raw(),)
        if ledgers is not None and isinstance(obj, ledgers.Ledger):
            if obj.path is None:
                raise ConfigError("a party's ledger on Flower must be a file")
            return ledgers.Ledger.open, (str(obj.path),)
        return NotImplemented


def _generator(seeded: tuple[bytes, bool] | None) -> Generator:
    """A seeded generator where it stopped (its key is its whole state); a secure one
    fresh from the OS (module docstring)."""
    if seeded is None:
        return Generator()
    return Generator(_key=seeded[0], _seeded=True, simulate_noise=seeded[1])


def _dumps(party: VerticalParty) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(party)
    return buffer.getvalue()


def client_app(build: Callable[[Context], VerticalParty],
               plan: Callable[[Context], VerticalSettings]) -> ClientApp:
    """A ClientApp hosting one vertical party per node: ``build(context)`` makes it from
    the node's own files (at ``query.party``), ``plan(context)`` is the node's own
    settings."""
    app = ClientApp()

    def load(context: Context) -> VerticalParty:
        # the party's own state, written by this node: never read from a message
        return pickle.loads(context.state.config_records[_STATE]["party"])  # noqa: S301

    @app.query(PARTY_STAGE)
    def hello(message: FlowerMessage, context: Context) -> FlowerMessage:
        name, refused, schema = context.node_config.get("party"), None, None
        try:
            refused = _check_plan(plan(context).message(), message.content, context)
            if refused is None:
                party = build(context)
                name, schema = party.name, encode(party.describe())
                context.state.config_records[_STATE] = ConfigRecord({"party": _dumps(party)})
        except VeilError as exc:          # its own files refuse it: the server is told why
            refused = str(exc)
        return FlowerMessage(_record(party=str(name), refused=refused, schema=schema),
                             reply_to=message)

    @app.query(_CALL)
    def handle(message: FlowerMessage, context: Context) -> FlowerMessage:
        record = message.content.config_records.get(_RECORD)
        agreed = context.state.config_records.get(_PLAN, {}).get("digest")
        if agreed is None or record is None or record.get("plan") != agreed or \
                _STATE not in context.state.config_records:
            raise ProtocolError(f"party {context.node_config.get('party')!r} refuses a "
                                "call: it is not of the plan this party agreed to")
        began = time.process_time()
        party = load(context)
        answers, error = [], None
        try:
            for data in _field(message.content, "calls", list):
                call = decode(data)
                if not isinstance(call, dict) or not isinstance(call.get("method"), str) \
                        or not isinstance(call.get("args"), dict):
                    raise ProtocolError("a call is not {method, args}")
                answers.append(party.call(call["method"], call["args"]))
        except VeilError as exc:
            error = str(exc)
        context.state.config_records[_STATE] = ConfigRecord({"party": _dumps(party)})
        return FlowerMessage(_record(answers=answers, error=error,
                                     cpu=time.process_time() - began), reply_to=message)

    return app


# -- the server side -------------------------------------------------------------------
class VerticalRelay:
    """The ServerApp's side: maps nodes to parties (:meth:`connect`) and relays calls
    (:meth:`call`) through a Flower ``grid``; ``settings``: the run's; ``timeout``:
    seconds each exchange waits for its answers."""

    def __init__(self, grid: Grid, settings: VerticalSettings, *, timeout: float = 600.0
                 ) -> None:
        self.grid = grid
        self.settings = settings
        self.plan = json.loads(canonical(settings.message()))
        self._digest = _digest(self.plan)
        self.timeout = float(timeout)
        self.nodes: dict[str, int] = {}
        self.schemas: dict[str, dict] = {}
        self.guest = ""
        self.hosts: list[str] = []
        #: bytes each party's answers carried (what it sent through the relay)
        self.sent: dict[str, int] = {}
        #: per exchange: each party's calls, wall seconds from sending to the last answer,
        #: and the most CPU seconds one party spent on its calls (restoring and storing its
        #: state included; the rest of the wall time is Flower's: polls, a fresh ClientApp
        #: process per message and its imports, transport)
        self.timeline: list[dict[str, Any]] = []

    def connect(self) -> dict[str, int]:
        """Ask every node which party it hosts and whether it agrees to the plan; returns
        (and keeps) party -> node id. Refusals are ProtocolErrors (module docstring)."""
        expected = nodes_of(self.settings)
        deadline = time.monotonic() + self.timeout
        while len(node_ids := sorted(int(n) for n in self.grid.get_node_ids())) < \
                len(expected) and time.monotonic() < deadline:
            time.sleep(0.2)
        replies = send_and_receive(self.grid, [(n, PARTY_STAGE, _record(
            plan=canonical(self.plan))) for n in node_ids], self.timeout)
        for node, reply in zip(node_ids, replies):
            if reply is None or reply.has_error():
                raise ProtocolError(f"node {node} did not say which party it hosts: "
                                    + ("no answer" if reply is None else reply.error.reason))
            party = _field(reply.content, "party", str)
            if party not in expected:
                raise ProtocolError(f"node {node} claims party {party!r}, which is not one "
                                    f"of the run's {expected}")
            if party in self.nodes:
                raise ProtocolError(f"nodes {self.nodes[party]} and {node} both claim party "
                                    f"{party!r}: give each node its own party")
            refused = reply.content.config_records[_RECORD].get("refused")
            if refused is not None:
                raise ProtocolError(f"party {party!r} (node {node}) refuses the run: "
                                    f"{refused}")
            self.nodes[party] = node
            self.schemas[party] = self._schema(party, _field(reply.content, "schema", bytes))
        missing = sorted(set(expected) - set(self.nodes))
        if missing:
            raise ProtocolError(f"no node hosts parties {missing} (within {self.timeout:g} s)")
        self._check_schemas()
        return self.nodes

    def _schema(self, party: str, data: bytes) -> dict:
        try:
            schema = decode(data)
        except ProtocolError as exc:
            raise ProtocolError(f"party {party!r} described its table badly: {exc}") from None
        if not (isinstance(schema, dict) and schema.get("party") == party
                and schema.get("role") in ("guest", "host", "arbiter")
                and (schema["role"] == "arbiter") == (party == ARBITER)
                and isinstance(schema.get("columns"), list)
                and all(isinstance(c, str) for c in schema["columns"])):
            raise ProtocolError(f"party {party!r} described its table badly: {schema!r:.200}")
        return schema

    def _check_schemas(self) -> None:
        """The label at exactly one party; no feature column at two."""
        label = self.settings.label
        guests = sorted(p for p, s in self.schemas.items() if s["role"] == "guest")
        if len(guests) != 1:
            raise ProtocolError(f"the label {label!r} is held by {guests or 'no party'}; "
                                "exactly one party (the guest) must hold it")
        owner: dict[str, str] = {}
        for party, schema in sorted(self.schemas.items()):
            for column in schema["columns"]:
                if column in owner:
                    raise ProtocolError(f"column {column!r} is held by both "
                                        f"{owner[column]!r} and {party!r}")
                owner[column] = party
        self.guest = guests[0]
        self.hosts = [p for p in self.settings.parties if p != self.guest]
        if "guest" in self.hosts:
            raise ProtocolError("party 'guest' holds no label: a feature holder may not be "
                                "named 'guest' (the protocol's name of the label holder)")

    def call(self, calls: Mapping[str, list[tuple[str, dict]]]) -> dict[str, list[bytes]]:
        """Send each party its calls (in parallel: one Flower message per party); returns
        each party's answers. A node that fails, refuses or answers badly stops the run."""
        parties = list(calls)
        sent = [(self.nodes[p], _CALL, _record(
            calls=[encode({"method": m, "args": a}) for m, a in calls[p]], plan=self._digest))
            for p in parties]
        out, cpu = {}, 0.0
        began = time.perf_counter()
        replies = send_and_receive(self.grid, sent, self.timeout)
        self.timeline.append({"calls": {p: [m for m, _ in calls[p]] for p in parties},
                              "seconds": time.perf_counter() - began})
        for party, reply in zip(parties, replies):
            method = ", ".join(m for m, _ in calls[party])
            if reply is None:
                raise ProtocolError(f"party {party!r} did not answer {method} within "
                                    f"{self.timeout:g} s")
            if reply.has_error():
                raise ProtocolError(f"party {party!r} failed at {method}: "
                                    f"{reply.error.reason}")
            error = reply.content.config_records[_RECORD].get("error")
            if error is not None:
                raise ProtocolError(f"party {party!r} refused {method}: {error}")
            try:
                answers = _field(reply.content, "answers", list)
            except ProtocolError as exc:
                raise ProtocolError(f"party {party!r} answered {method} badly: {exc}") \
                    from None
            if len(answers) != len(calls[party]):
                raise ProtocolError(f"party {party!r} gave {len(answers)} answers to "
                                    f"{len(calls[party])} calls")
            self.sent[party] = self.sent.get(party, 0) + sum(map(len, answers))
            used = reply.content.config_records[_RECORD].get("cpu")
            cpu = max(cpu, used if isinstance(used, float) else 0.0)
            out[party] = answers
        self.timeline[-1]["client_cpu"] = cpu
        return out


# -- the simulation engine -------------------------------------------------------------
def simulate(settings: VerticalSettings, tables: Mapping[str, Any], *,
             out: str | os.PathLike | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """A vertical run on Flower's simulation engine: one virtual node per party and one for
    the arbiter, each given only its own table of ``tables`` (party name -> DataFrame,
    checked by :func:`veil.fl.vertical.data.check_tables`); returns the results of
    :func:`~veil.fl.vertical.parties.train`. ``out``: the folder of the guest's ledger
    (``ledger.sqlite``, with ``label_epsilon``) and of each party's ``<party>/coef.npy``.
    """
    from flwr.simulation import run_simulation

    from veil.crypto.identity import make_identities
    from veil.fl.vertical.data import check_tables

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no GPUs asked for
    check_flower(settings)
    if sorted(tables) != sorted(settings.parties):
        raise ConfigError(f"tables of {sorted(tables)}; the run's parties are "
                          f"{sorted(settings.parties)}")
    check_tables(dict(tables), settings.id, settings.label)
    if settings.label_epsilon is not None and out is None:
        raise ConfigError("label_epsilon on Flower needs out= (the guest's ledger file)")
    names = nodes_of(settings)
    # the simulation makes the organisations' identities (a deployment: each its own)
    private, public = make_identities(len(settings.parties))
    identity = dict(zip(settings.parties, private))
    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            relay = VerticalRelay(grid, settings, timeout=timeout)
            relay.connect()
            outcome["results"] = train(relay)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    def build(context: Context) -> VerticalParty:
        name = names[int(context.node_config["partition-id"])]
        folder = None if out is None else Path(out) / name
        return VerticalParty(name, settings, tables.get(name),
                             ledger=None if out is None else Path(out) / "ledger.sqlite",
                             out=folder, identity=identity.get(name),
                             identities=dict(enumerate(public)))

    run_simulation(server_app=server_app, client_app=client_app(build, lambda _: settings),
                   num_supernodes=len(names),
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "error" in outcome:
        raise outcome["error"]
    if "results" not in outcome:
        raise ProtocolError("the Flower simulation ended without running the vertical run")
    return outcome["results"]
