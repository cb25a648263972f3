"""Vertical runs on Flower: each organisation a node that holds only its own table.

A ``[vertical]`` run (:mod:`veil.fl.vertical.run`) with ``model = "logistic"`` or
``"linear"`` and ``protocol = "paillier"`` runs here with every party on its own Flower
node: the label holder (the *guest*), each feature holder (a *host*) and the *arbiter*,
which holds the Paillier key (FATE's Coordinated-LR shape). The parties are the sans-I/O
objects of :mod:`veil.fl.vertical.align` (ECDH-PSI) and :mod:`veil.fl.vertical.paillier_lr`
(Hardy et al. 2017); :class:`VerticalParty` hosts one of them per node and the ServerApp
(:class:`VerticalRelay`, :func:`train`) only moves their bytes, in the order of the local
runner (:func:`veil.fl.vertical.linear.train_paillier`): a Flower message ``query.call``
carries a list of calls ``{"method", "args"}`` (:func:`veil.fl.messages.encode`, bytes in a
``ConfigRecord``, as the horizontal runtime :mod:`veil.fl.runtime.flower` does) and its
reply the list of their answers (bytes).

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
  of the held-out rows (for the guest's metrics, as FATE's prediction) are sealed end to
  end between the guest and that host (:class:`_Channel`: ephemeral X25519, RFC 7748,
  HKDF-SHA256, AES-256-GCM), so the relay sees only their lengths. The channel keys are
  not authenticated: this holds against a server that relays faithfully (honest but
  curious), not one that substitutes keys (Flower's TLS ends at the SuperLink);
* why the arbiter is a node of its own, the default, and not the server: the server sees
  every ciphertext, so a server holding the key would read the residuals (hence the
  labels) and the hosts' scores. The arbiter sees only masked gradients. Threshold
  decryption among the parties (``decryption = "threshold"``) is refused here: veil's
  threshold Paillier needs a dealer at key generation (:mod:`veil.crypto.threshold`),
  which a deployment would have to run out of band; it runs under the local runtime.

Each party trusts only its own files. A node's configuration (``flower-supernode
--node-config``; :data:`NODE_KEYS`) names its party, its own copy of the run file (in
``plans``), its own table (``data``; none for the arbiter), its ledger and its output
folder::

    party  = "guest"                   # its name in [vertical] parties, or "arbiter"
    plans  = "/bank/plans"             # its own copies of the run files
    data   = "/bank/guest.csv"         # its own table (id column, features, the label)
    ledger = "/bank/ledger.sqlite"     # the guest with label_epsilon: its budget
    out    = "/bank/model"             # where it writes its own coefficient block

At ``query.party`` every node answers its party name and the schema of its own table, and
compares its plan (:func:`vertical_plan`: the ``[vertical]`` section with the party names
but not their files) with the server's (:func:`veil.fl.runtime.flower._check_plan`); the
server refuses before anything runs (:class:`~veil.errors.ProtocolError`) two nodes
claiming one party, a party not in the plan, a missing party, a node refusing the plan,
the label at no party or at two, and a feature column at two parties. Every later message
carries the plan's digest; a node refuses one of another plan. A party checks every peer
message (the protocols' readers, naming the peer); a refusal on a node stops the run with
a ProtocolError naming that node's party and the peer it blames. A vertical run has no
dropouts: every feature holder is needed for every step. The guest charges label DP
(``label_epsilon``) to its own ledger (node config ``ledger``) before each epoch's noise
is drawn; nothing is charged before the first batch, so a run refused at the handshake or
in the alignment charges nothing.

Party state across messages lives in the node's ``context.state`` as a pickle that never
leaves the node (as in :mod:`veil.fl.runtime.flower`); :func:`_dumps` stores a
secure generator as "a fresh one" (so no CSPRNG stream is ever replayed from a copy), an
X25519 key as its bytes, a seeded generator as its key (its whole state) and a ledger as
its file.

Randomness: PSI keys, masks, encryption noise, channel keys and DP noise come from the
CSPRNG; ``seed`` (``[run] seed``) drives only the guest's held-out rows and batch order,
exactly as under the local runtime, so a seeded run gives the local runtime's model
(:func:`simulate`, ``veil fl run CONFIG --runtime flower-sim``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil.errors import ConfigError, DataError, ProtocolError, VeilError
from veil.fl.messages import decode, encode
from veil.fl.runtime.flower import (
    _RECORD,
    PARTY_STAGE,
    ClientApp,
    ConfigRecord,
    Context,
    FlowerMessage,
    Grid,
    RecordDict,
    ServerApp,
    _canonical,
    _check_plan,
    _digest,
    _field,
    _record,
)
from veil.random import Generator, check_rng

__all__ = ["ARBITER", "NODE_KEYS", "VerticalParty", "VerticalRelay", "check_flower",
           "client", "server", "simulate", "train", "vertical_app", "vertical_plan"]

log = logging.getLogger(__name__)

#: the party name of the key holder
ARBITER = "arbiter"
#: what a vertical node's configuration may name, and the type of each
NODE_KEYS = {"party": str, "plans": str, "data": str, "ledger": str, "out": str}
_CALL = "call"            # query.call: a list of calls to the node's party
_STATE = "veil-vertical"  # the ConfigRecord of context.state holding the pickled party
_PLAN = "veil-plan"       # as in flower.py: the digest the node agreed to


# -- the plan --------------------------------------------------------------------------
def check_flower(section: Mapping[str, Any]) -> None:
    """ConfigError unless the ``[vertical]`` section can run on Flower (module docstring)."""
    settings = {"model": ("logistic", ("logistic", "linear")),
                "protocol": ("paillier", ("paillier",)),
                "decryption": ("arbiter", ("arbiter",))}
    for key, (default, allowed) in settings.items():
        value = section.get(key, default)
        if value not in allowed:
            raise ConfigError(f"[vertical] {key}={value!r} does not run on Flower: allowed "
                              f"{list(allowed)} (the others run under the local runtime)")
    if "dataset" in section:
        raise ConfigError("[vertical] dataset does not run on Flower: each organisation "
                          "brings its own table (parties = { name = \"file.csv\" })")
    parties = section.get("parties")
    if not isinstance(parties, Mapping) or len(parties) < 2:
        raise ConfigError("[vertical] parties must map at least two party names to their "
                          "tables")
    if ARBITER in parties:
        raise ConfigError(f"[vertical] parties may not name a party {ARBITER!r}: that is "
                          "the key holder's node")


def vertical_plan(section: Mapping[str, Any]) -> dict[str, Any]:
    """What every party and the server agree on: the ``[vertical]`` section, with
    ``parties`` as the party names (each organisation's file is its own business)."""
    check_flower(section)
    plan = {k: v for k, v in section.items() if k != "parties"}
    plan["parties"] = sorted(str(p) for p in section["parties"])
    return {"vertical": plan}


# -- the node side ---------------------------------------------------------------------
class _Channel:
    """A sealed channel between the guest and one host through the relay: an ephemeral
    X25519 key each (RFC 7748), HKDF-SHA256 of the shared secret bound to the host and the
    message kind (:func:`veil.fl.secagg.masks.agree`), AES-256-GCM. Each key seals one
    message, so the nonce is fixed."""

    def __init__(self) -> None:
        from veil.fl.secagg.masks import public_key

        self._secret = check_rng(None).bytes(32)
        self.public = public_key(self._secret)

    def _aead(self, peer: Any, host: str, kind: str, who: str) -> AESGCM:
        from veil.fl.secagg.masks import agree

        if not isinstance(peer, bytes) or len(peer) != 32:
            raise ProtocolError(f"message from {who!r}: its channel key is not 32 bytes")
        return AESGCM(agree(self._secret, peer, f"veil vertical|{kind}|{host}".encode()))

    def seal(self, peer: bytes, host: str, kind: str, data: bytes, who: str) -> bytes:
        return self._aead(peer, host, kind, who).encrypt(bytes(12), data, None)

    def open(self, peer: Any, host: str, kind: str, data: Any, who: str) -> bytes:
        if not isinstance(data, bytes):
            raise ProtocolError(f"message from {who!r}: the sealed {kind} is not bytes")
        try:
            return self._aead(peer, host, kind, who).decrypt(bytes(12), data, None)
        except InvalidTag:
            raise ProtocolError(f"message from {who!r}: the sealed {kind} does not "
                                "authenticate") from None


def _arg(args: Mapping[str, Any], name: str, kind: type, method: str) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProtocolError(f"call {method}: argument {name!r} is {type(value).__name__}; "
                            f"expected {kind.__name__}")
    return value


class VerticalParty:
    """One organisation's side of a vertical run on Flower (sans-I/O).

    ``name``: its party name (``"arbiter"``: the key holder, no table); ``section``: its
    own ``[vertical]`` section; ``table``: its own table (a DataFrame with the id column;
    the guest's holds the label); ``ledger``: the guest's ledger file when the section has
    ``label_epsilon``; ``out``: a folder for its coefficient block (``coef.npy``; the
    guest's ends with the intercept). :meth:`call` answers the server's calls; which are
    allowed depends on the role, and each party checks the messages the calls carry.
    """

    _METHODS = {"guest": ("channel_key", "align_request", "align_finish", "align_order",
                          "key", "update", "next_batch", "residual", "gradient", "evaluate",
                          "save"),
                "host": ("channel_key", "align_setup", "align_respond", "align_order", "key",
                         "update", "forward", "backward", "test_scores", "save"),
                "arbiter": ("key", "decrypt")}

    def __init__(self, name: str, section: Mapping[str, Any], table: pd.DataFrame | None,
                 *, ledger: str | os.PathLike | None = None,
                 out: str | os.PathLike | None = None) -> None:
        from veil.fl.vertical.align import read_ids
        from veil.fl.vertical.paillier_lr import Plan
        from veil.fl.vertical.run import check_section, schedule

        self.section = dict(check_section(dict(section), "vertical"))
        self.plan = vertical_plan(self.section)["vertical"]
        self.name = str(name)
        self.out = None if out is None else Path(out)
        self.id_column = self.section.get("id", "id")
        self.label = self.section.get("label", "y")
        self.schedule = Plan(task=self.section.get("model", "logistic"),
                             **schedule(self.section))
        if self.name == ARBITER:
            if table is not None:
                raise ConfigError("the arbiter holds no table (node config data)")
            self.role, self.columns, self.rows = "arbiter", [], 0
        else:
            if self.name not in self.plan["parties"]:
                raise ConfigError(f"party {self.name!r} is not one of the run's parties "
                                  f"{self.plan['parties']}")
            if not isinstance(table, pd.DataFrame):
                raise ConfigError(f"party {self.name!r} has no table (node config data)")
            if self.section.get("prefix_columns", False):
                table = table.rename(columns={c: f"{self.name}.{c}" for c in table.columns
                                              if c not in (self.id_column, self.label)})
            read_ids(table, self.id_column, name=f"ids of {self.name!r}")
            self.role = "guest" if self.label in table.columns else "host"
            self.columns = [c for c in table.columns if c not in (self.id_column, self.label)]
            if not self.columns:
                raise DataError(f"party {self.name!r} holds no feature column")
            self.rows = len(table)
        self._table = table
        self._ledger_file = ledger
        if self.role == "guest" and self.section.get("label_epsilon") is not None \
                and ledger is None:
            raise ConfigError(f"party {self.name!r}: label_epsilon needs this node's own "
                              "ledger file (node config ledger)")
        self._channel: _Channel | None = None
        self._peers: dict[str, bytes] = {}      # the other side's channel keys
        self._align: Any = None
        self._party: Any = None                 # PaillierGuest / PaillierHost / Arbiter
        self._test: np.ndarray | None = None    # the held-out rows: host, features; guest,
        self._test_X: np.ndarray | None = None  # their mask, features and labels
        self._test_y: np.ndarray | None = None
        self._ledger: Any = None                # the guest's, with label_epsilon
        self.aligned = 0

    def describe(self) -> dict[str, Any]:
        """What the server learns at the handshake: the role and the table's schema."""
        return {"party": self.name, "role": self.role, "columns": self.columns,
                "rows": self.rows}

    def call(self, method: str, args: Mapping[str, Any]) -> bytes:
        """Run one call of the server's; its answer as bytes (b"": none)."""
        if method not in self._METHODS[self.role]:
            raise ProtocolError(f"party {self.name!r} ({self.role}) has no call {method!r}")
        answer = getattr(self, f"_{method}")(args)
        return b"" if answer is None else answer

    # the alignment ---------------------------------------------------------------------
    def _hosts(self) -> list[str]:
        return [p for p in self.plan["parties"] if p != self.name]

    def _channel_key(self, args: Mapping[str, Any]) -> bytes:
        if self._channel is None:
            self._channel = _Channel()
        return self._channel.public

    def _align_setup(self, args: Mapping[str, Any]) -> bytes:
        from veil.fl.vertical.align import AlignHost

        if self._align is not None:
            raise ProtocolError(f"{self.name!r} is aligned already: one alignment per run")
        self._align = AlignHost(self.name, self._table, column=self.id_column)
        return self._align.setup()

    def _align_request(self, args: Mapping[str, Any]) -> bytes:
        from veil.fl.vertical.align import AlignGuest

        host = _arg(args, "host", str, "align_request")
        if self._align is None:
            self._align = AlignGuest(self._table, self._hosts(), column=self.id_column)
        self._peers[host] = args.get("key")
        return self._align.request(host, _arg(args, "setup", bytes, "align_request"))

    def _align_finish(self, args: Mapping[str, Any]) -> None:
        self._need(self._align, "align_request")
        self._align.finish(_arg(args, "host", str, "align_finish"),
                           _arg(args, "response", bytes, "align_finish"))

    def _align_respond(self, args: Mapping[str, Any]) -> bytes:
        self._need(self._align, "align_setup")
        return self._align.respond(_arg(args, "request", bytes, "align_respond"))

    def _need(self, value: Any, first: str) -> Any:
        if value is None:
            raise ProtocolError(f"party {self.name!r}: call {first} first")
        return value

    def _align_order(self, args: Mapping[str, Any]) -> bytes | None:
        channel = self._need(self._channel, "channel_key")
        if self.role == "guest":     # the common ids and the held-out rows, sealed per host
            host = _arg(args, "host", str, "align_order")
            self._need(self._align, "align_request")
            if self._party is None:
                self._start_guest()
            body = encode({"order": self._align.order(host), "test": self._test})
            return channel.seal(self._peers.get(host), host, "order", body, host)
        from veil.fl.vertical.paillier_lr import PaillierHost

        sealed = channel.open(args.get("key"), self.name, "order", args.get("order"), "guest")
        try:
            body = decode(sealed)
            if not isinstance(body, dict):
                raise ProtocolError("not a mapping")
        except ProtocolError as exc:
            raise ProtocolError(f"message from 'guest': bad order ({exc})") from None
        rows = self._need(self._align, "align_setup").receive_order(body.get("order"))
        test = body.get("test")
        if not (isinstance(test, np.ndarray) and test.dtype == np.bool_
                and test.shape == rows.shape):
            raise ProtocolError(f"message from 'guest': the held-out rows are not a mask of "
                                f"the {rows.size} aligned rows")
        self._peers["guest"] = args.get("key")
        X = self._features(rows)
        self._test = X[test] if test.any() else X[~test]
        self.aligned = rows.size
        self._party = PaillierHost(self.name, X[~test], self.schedule,
                                   insecure_ok=self.section.get("insecure_ok", False))
        return None

    def _features(self, rows: np.ndarray) -> np.ndarray:
        return self._table.iloc[rows][self.columns].to_numpy(dtype=np.float64)

    def _start_guest(self) -> None:
        """The guest's part once the alignment is done: the held-out rows (drawn by the
        seed as under the local runtime, :func:`veil.fl.vertical.run.run_vertical`) and
        its PaillierGuest on the training rows."""
        from veil._validation import check_probability
        from veil.dp import Ledger
        from veil.fl.vertical.paillier_lr import PaillierGuest
        from veil.fl.vertical.run import held_out

        rows = self._align.result().rows["guest"]
        rng = check_rng(self.section.get("seed"))
        fraction = check_probability(self.section.get("test_fraction", 0.0),
                                     "[vertical] test_fraction", high_open=True)
        test = held_out(rows.size, fraction, rng)
        X, y = self._features(rows), self._table.iloc[rows][self.label].to_numpy()
        self._test, self.aligned = test, rows.size
        self._test_X = X[test] if test.any() else X[~test]
        self._test_y = y[test] if test.any() else y[~test]
        epsilon = self.section.get("label_epsilon")
        if epsilon is not None:
            self._ledger = Ledger(epsilon=epsilon, delta=self.section.get("label_delta", 1e-5),
                            accountant="rdp", path=self._ledger_file)
        model_rng = check_rng(rng.spawn(1)[0])   # as VerticalLogisticRegression.fit draws
        hosts = self._hosts()
        self._party = PaillierGuest(X[~test], y[~test], hosts, self.schedule,
                                    label_epsilon=epsilon,
                                    label_delta=self.section.get("label_delta", 1e-5),
                                    ledger=self._ledger,
                                    insecure_ok=self.section.get("insecure_ok", False),
                                    rng=model_rng.spawn(1)[0])

    # training --------------------------------------------------------------------------
    def _key(self, args: Mapping[str, Any]) -> bytes | None:
        if self.role != "arbiter":
            self._need(self._party, "align_order").receive_key(
                _arg(args, "key", bytes, "key"))
            return None
        from veil.fl.vertical.paillier_lr import Arbiter

        if self._party is not None:
            raise ProtocolError("the arbiter has a key already: one key per run")
        sizes, parties = args.get("sizes"), set(self.plan["parties"])
        if not (isinstance(sizes, dict) and "guest" in sizes and len(sizes) == len(parties)
                and set(sizes) - {"guest"} < parties):
            raise ProtocolError(f"call key: sizes must name 'guest' (the label holder) and "
                                f"the other parties of {sorted(parties)}")
        self._party = Arbiter(sizes, key_bits=self.section.get("key_bits", 2048),
                              insecure_ok=self.section.get("insecure_ok", False))
        return self._party.key_message()

    def _update(self, args: Mapping[str, Any]) -> None:
        self._need(self._party, "align_order").update(_arg(args, "decrypted", bytes, "update"))

    def _next_batch(self, args: Mapping[str, Any]) -> bytes | None:
        return self._need(self._party, "align_order").next_batch()

    def _forward(self, args: Mapping[str, Any]) -> bytes:
        return self._need(self._party, "align_order").forward(_arg(args, "batch", bytes,
                                                                   "forward"))

    def _residual(self, args: Mapping[str, Any]) -> bytes:
        scores = _arg(args, "scores", dict, "residual")
        return self._need(self._party, "align_order").residual(scores)

    def _gradient(self, args: Mapping[str, Any]) -> bytes:
        return self._need(self._party, "align_order").gradient()

    def _backward(self, args: Mapping[str, Any]) -> bytes:
        return self._need(self._party, "align_order").backward(
            _arg(args, "residual", bytes, "backward"))

    def _decrypt(self, args: Mapping[str, Any]) -> bytes:
        """A masked gradient relayed from party ``sender`` (its name in the protocol's
        messages: "guest" for the label holder) -> its decryption, for that party only."""
        arbiter = self._need(self._party, "key")
        sender = _arg(args, "sender", str, "decrypt")
        try:
            answer = arbiter.decrypt(_arg(args, "gradient", bytes, "decrypt"))
        except ProtocolError as exc:
            raise ProtocolError(f"the gradient relayed from {sender!r}: {exc}") from None
        owner = decode(answer)["party"]
        if owner != sender:
            raise ProtocolError(f"the gradient relayed from {sender!r} is {owner!r}'s")
        return answer

    # the end ---------------------------------------------------------------------------
    def _test_scores(self, args: Mapping[str, Any]) -> bytes:
        """This host's partial scores of the held-out rows, sealed for the guest."""
        party = self._need(self._party, "align_order")
        scores = encode(party.scores(self._test))
        return self._channel.seal(self._peers["guest"], self.name, "scores", scores, self.name)

    def _evaluate(self, args: Mapping[str, Any]) -> bytes:
        """The guest's metrics on the held-out rows: its own scores plus each host's."""
        from veil.fl.vertical.run import _auc

        guest = self._need(self._party, "align_order")
        sealed = _arg(args, "scores", dict, "evaluate")
        if sorted(sealed) != self._hosts():
            raise ProtocolError(f"call evaluate: scores from {sorted(sealed)}; expected "
                                f"{self._hosts()}")
        own = guest.coef_[:-1] if guest.fit_intercept else guest.coef_
        z = self._test_X @ own + guest.intercept_
        for host in self._hosts():
            part = decode(self._channel.open(self._peers.get(host), host, "scores",
                                             sealed[host], host))
            if not (isinstance(part, np.ndarray) and part.shape == z.shape
                    and np.all(np.isfinite(part))):
                raise ProtocolError(f"message from {host!r}: its scores are not "
                                    f"{z.size} finite numbers")
            z = z + part
        y = self._test_y
        metrics: dict[str, Any] = {"aligned": self.aligned,
                                   "evaluated_on": "held-out aligned rows"
                                   if self._test.any() else "training rows"}
        if self.schedule.task == "logistic":
            metrics.update(accuracy=float(np.mean((z > 0) == y)), auc=_auc(y, z))
        else:
            metrics["r2"] = float(1 - np.sum((y - z) ** 2) / np.sum((y - y.mean()) ** 2))
        if self._ledger is not None:
            metrics["label_epsilon_spent"] = self._ledger.spent()[0]
        return encode(metrics)

    def _save(self, args: Mapping[str, Any]) -> None:
        party = self._need(self._party, "align_order")
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            np.save(self.out / "coef.npy", party.coef_)
        log.info("party %r: trained block of %d coefficients", self.name, party.coef_.size)


class _Pickler(pickle.Pickler):
    """Party state for the node's own context.state (module docstring)."""

    def reducer_override(self, obj: Any) -> Any:
        from veil.dp import Ledger

        if isinstance(obj, Generator):
            return _generator, ((obj._key, obj.simulate_noise) if obj.seeded else None,)
        if isinstance(obj, X25519PrivateKey):
            return X25519PrivateKey.from_private_bytes, (obj.private_bytes_raw(),)
        if isinstance(obj, Ledger):
            if obj.path is None:
                raise ConfigError("a party's ledger on Flower must be a file")
            return Ledger.open, (str(obj.path),)
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
               plan: Callable[[Context], Mapping[str, Any]]) -> ClientApp:
    """A ClientApp hosting one vertical party per node: ``build(context)`` makes it from
    the node's own files (at ``query.party``), ``plan(context)`` is the node's own plan."""
    app = ClientApp()

    def load(context: Context) -> VerticalParty:
        # the party's own state, written by this node: never read from a message
        return pickle.loads(context.state.config_records[_STATE]["party"])  # noqa: S301

    @app.query(PARTY_STAGE)
    def hello(message: FlowerMessage, context: Context) -> FlowerMessage:
        name, refused, schema = context.node_config.get("party"), None, None
        try:
            refused = _check_plan(plan(context), message.content, context)
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
        return FlowerMessage(_record(answers=answers, error=error), reply_to=message)

    return app


# -- the server side -------------------------------------------------------------------
class VerticalRelay:
    """The ServerApp's side: maps nodes to parties (:meth:`connect`) and relays calls
    (:meth:`call`) through a Flower ``grid``; ``plan`` is the run's
    (:func:`vertical_plan`); ``timeout``: seconds each exchange waits for its answers."""

    def __init__(self, grid: Grid, plan: Mapping[str, Any], *, timeout: float = 600.0
                 ) -> None:
        self.grid = grid
        self.plan = json.loads(_canonical(plan))
        self._digest = _digest(self.plan)
        self.timeout = float(timeout)
        self.nodes: dict[str, int] = {}
        self.schemas: dict[str, dict] = {}
        self.guest = ""
        self.hosts: list[str] = []
        #: bytes each party's answers carried (what it sent through the relay)
        self.sent: dict[str, int] = {}

    def connect(self) -> dict[str, int]:
        """Ask every node which party it hosts and whether it agrees to the plan; returns
        (and keeps) party -> node id. Refusals are ProtocolErrors (module docstring)."""
        expected = [*self.plan["vertical"]["parties"], ARBITER]
        deadline = time.monotonic() + self.timeout
        while len(node_ids := sorted(int(n) for n in self.grid.get_node_ids())) < \
                len(expected) and time.monotonic() < deadline:
            time.sleep(0.2)
        replies = self._exchange([(n, PARTY_STAGE, _record(plan=_canonical(self.plan)))
                                  for n in node_ids])
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
        label = self.plan["vertical"].get("label", "y")
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
        self.hosts = [p for p in self.plan["vertical"]["parties"] if p != self.guest]
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
        out = {}
        for party, reply in zip(parties, self._exchange(sent)):
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
            out[party] = answers
        return out

    def _exchange(self, sent: list[tuple[int, str, RecordDict]]) -> list[FlowerMessage | None]:
        messages = [FlowerMessage(content, dst_node_id=node, message_type=f"query.{stage}")
                    for node, stage, content in sent]
        replies = self.grid.send_and_receive(messages, timeout=self.timeout)
        by_id = {r.metadata.reply_to_message_id: r for r in replies}
        return [by_id.get(m.metadata.message_id) for m in messages]


def train(relay: VerticalRelay) -> dict[str, Any]:
    """A whole run through a connected relay, in the local runner's order (alignment,
    key, every batch of the plan, metrics); returns the results (the guest's metrics, the
    bytes each party sent, the seconds). Calls that do not wait for each other share one
    exchange: a batch costs five (guest, hosts, guest, hosts, arbiter), the whole run
    six more for the alignment and the key and three at the end."""
    start = time.perf_counter()
    guest, hosts = relay.guest, relay.hosts
    parties = [guest, *hosts]
    setups = relay.call({h: [("align_setup", {}), ("channel_key", {})] for h in hosts})
    requests = relay.call({guest: [("align_request", {"host": h, "setup": setups[h][0],
                                                      "key": setups[h][1]}) for h in hosts]})
    responses = relay.call({h: [("align_respond", {"request": r})]
                            for h, r in zip(hosts, requests[guest])})
    done = relay.call({guest: [*(("align_finish", {"host": h, "response": responses[h][0]})
                                 for h in hosts), ("channel_key", {}),
                               *(("align_order", {"host": h}) for h in hosts)]})[guest]
    key, orders = done[len(hosts)], done[len(hosts) + 1:]
    # the gradient entries of each party, by its name in the protocol's messages (the
    # label holder is "guest" there; its intercept is one more entry)
    sizes = {"guest": len(relay.schemas[guest]["columns"]) + 1,
             **{h: len(relay.schemas[h]["columns"]) for h in hosts}}
    started = relay.call({**{h: [("align_order", {"order": o, "key": key})]
                             for h, o in zip(hosts, orders)},
                          ARBITER: [("key", {"sizes": sizes})]})
    # every party takes the public key with its first training call
    first = {p: [("key", {"key": started[ARBITER][0]})] for p in parties}
    decrypted: dict[str, bytes] = {}
    batches = 0
    while True:
        updates = {p: [("update", {"decrypted": decrypted[p]})] if p in decrypted else []
                   for p in parties}
        batch = relay.call({guest: [*first.pop(guest, []), *updates[guest],
                                    ("next_batch", {})]})[guest][-1]
        if not batch:
            break
        scores = relay.call({h: [*first.pop(h, []), *updates[h], ("forward", {"batch": batch})]
                             for h in hosts})
        residual, own = relay.call({guest: [
            ("residual", {"scores": {h: scores[h][-1] for h in hosts}}),
            ("gradient", {})]})[guest]
        gradients = {guest: own, **{h: a[0] for h, a in relay.call(
            {h: [("backward", {"residual": residual})] for h in hosts}).items()}}
        answers = relay.call({ARBITER: [("decrypt", {"gradient": gradients[p],
                                                     "sender": "guest" if p == guest else p})
                                        for p in parties]})[ARBITER]
        decrypted = dict(zip(parties, answers))
        batches += 1
    ends = relay.call({h: [*updates[h], ("test_scores", {}), ("save", {})] for h in hosts})
    metrics = decode(relay.call({guest: [("evaluate", {"scores": {
        h: ends[h][-2] for h in hosts}}), ("save", {})]})[guest][0])
    if not isinstance(metrics, dict):
        raise ProtocolError(f"party {guest!r} sent no metrics")
    return {**metrics, "parties": parties, "guest": guest, "batches": batches,
            "bytes_sent": dict(relay.sent), "seconds": time.perf_counter() - start,
            "runtime": "flower"}


# -- the simulation engine -------------------------------------------------------------
def simulate(section: Mapping[str, Any], *, base: str | os.PathLike = ".",
             out: str | os.PathLike | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """A ``[vertical]`` run on Flower's simulation engine: one virtual node per party and
    one for the arbiter, each given only its own table (read here from the section's
    files, checked as :func:`veil.fl.vertical.run.run_vertical` checks them); returns the
    results of :func:`train`. ``out``: the folder of the guest's ledger
    (``ledger.sqlite``, with ``label_epsilon``) and of each party's ``<party>/coef.npy``.
    """
    from flwr.simulation import run_simulation

    from veil.fl.vertical.run import _read, check_section, check_tables

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # no GPUs asked for
    section = dict(check_section(dict(section), "vertical"))
    plan = vertical_plan(section)
    tables = {str(k): _read(v, Path(base), f"parties.{k}")
              for k, v in section["parties"].items()}
    check_tables(tables, section.get("id", "id"), section.get("label", "y"))
    if section.get("label_epsilon") is not None and out is None:
        raise ConfigError("label_epsilon on Flower needs out= (the guest's ledger file)")
    names = [*plan["vertical"]["parties"], ARBITER]
    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            relay = VerticalRelay(grid, plan, timeout=timeout)
            relay.connect()
            outcome["results"] = train(relay)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    def build(context: Context) -> VerticalParty:
        name = names[int(context.node_config["partition-id"])]
        folder = None if out is None else Path(out) / name
        return VerticalParty(name, section, tables.get(name),
                             ledger=None if out is None else Path(out) / "ledger.sqlite",
                             out=folder)

    run_simulation(server_app=server_app, client_app=client_app(build, lambda _: plan),
                   num_supernodes=len(names),
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    if "error" in outcome:
        raise outcome["error"]
    if "results" not in outcome:
        raise ProtocolError("the Flower simulation ended without running the vertical run")
    return outcome["results"]


# -- a deployment's app ----------------------------------------------------------------
_APP = '''"""veil vertical run: the ServerApp and ClientApp for run.toml (veil fl app)."""

from pathlib import Path

from veil.fl.runtime.flower_vertical import client as _client, server as _server

CONFIG = Path(__file__).with_name("run.toml")
server = _server(CONFIG)
client = _client(CONFIG)
'''


def vertical_app(config: str | os.PathLike, out_dir: str | os.PathLike,
                 results: str | os.PathLike | None = None) -> Path:
    """Write the Flower app of a ``[vertical]`` run file into ``out_dir`` (as
    :func:`veil.experiments.flower_app.write_app` does for horizontal runs; ``flwr run
    DIR CONNECTION`` submits it); ``results``: where the ServerApp writes results.json."""
    import shutil

    from veil.experiments.fl_config import load_config
    from veil.experiments.flower_app import _PYPROJECT

    config, out_dir = Path(config), Path(out_dir)
    cfg = load_config(config)
    if cfg.kind != "vertical":
        raise ConfigError(f"{config}: a [vertical] run file is needed; this run is {cfg.kind}")
    vertical_plan(cfg["vertical"])                    # refuse what Flower cannot run now
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "veil-" + "".join(c if c.isalnum() else "-" for c in config.stem.lower())
    where = Path(results) if results else out_dir / "results"
    (out_dir / "pyproject.toml").write_text(_PYPROJECT.format(
        name=name, out=where.resolve(), plan=config.name))
    (out_dir / "veil_app.py").write_text(_APP)
    shutil.copyfile(config, out_dir / "run.toml")
    return out_dir


def server(config: str | os.PathLike) -> ServerApp:
    """The ServerApp of a vertical run file: connects the nodes, relays the run and
    writes ``results.json`` into the app config's ``out`` folder."""
    from veil._io import atomic_write
    from veil._json import to_jsonable
    from veil.experiments.fl_config import load_config

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = load_config(config)
        relay = VerticalRelay(grid, vertical_plan(cfg["vertical"]),
                              timeout=cfg["run"]["timeout"])
        relay.connect()
        results = train(relay)
        out = Path(str(context.run_config["out"]))
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "results.json", json.dumps(to_jsonable(results), indent=2))

    return app


def _own_plan(context: Context) -> tuple[dict, dict, Path]:
    """The node's configuration, its own ``[vertical]`` section and the file it is read
    from (``<plans>/<run file name>``; module docstring)."""
    from veil.experiments.fl_config import load_config

    config = dict(context.node_config)
    for key, kind in NODE_KEYS.items():
        value = config.get(key)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"node config {key}={value!r} is not allowed: expected a "
                              f"{kind.__name__}")
    party, plans = config.get("party"), config.get("plans")
    if party is None or plans is None:
        raise ConfigError("a vertical node needs node config party=NAME and plans=DIR (its "
                          "own copies of the run files)")
    name = Path(str(context.run_config.get("plan", ""))).name
    plan_file = Path(plans) / name
    if not name or not plan_file.is_file():
        raise ConfigError(f"party {party!r} has no plan {name!r} in its plans folder {plans}: "
                          "it refuses a run it was not configured for")
    return config, load_config(plan_file)["vertical"], plan_file


def _node_party(context: Context) -> VerticalParty:
    """The node's party from its own node configuration and files (module docstring)."""
    from veil.fl.vertical.run import _read

    config, section, plan_file = _own_plan(context)
    party, data = config["party"], config.get("data")
    table = None if data is None else _read(data, plan_file.parent, f"party {party!r} data")
    return VerticalParty(party, section, table, ledger=config.get("ledger"),
                         out=config.get("out"))


def client(config: str | os.PathLike) -> ClientApp:
    """The ClientApp of a vertical run: the node hosts the party its node configuration
    names, built from its own plan copy and table. ``config`` (the copy the server sent)
    is never read by a party."""
    return client_app(_node_party, lambda context: vertical_plan(_own_plan(context)[1]))
