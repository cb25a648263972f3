"""The parties of a vertical run held by different organisations, and the order of their calls.

:class:`VerticalSettings` is what the parties agree on (a configuration file's ``[vertical]``
section becomes one in :mod:`veil.experiments.vertical_config`). :class:`VerticalParty` is
one organisation's side (sans-I/O): the guest, a host or the arbiter, built from its own
settings and table; :meth:`VerticalParty.call`
runs one call of the server's (``{"method", "args"}``) on the sans-I/O objects of
:mod:`veil.fl.vertical.align` (ECDH-PSI), :mod:`veil.fl.vertical.paillier_lr` (Hardy et
al. 2017) or :mod:`veil.fl.vertical.split` (split learning), each of which checks the peer
message it is given and names the peer it blames. :func:`train` is the server's side:
which calls go to whom, in the local runners' order
(:func:`veil.fl.vertical.linear.train_paillier`, :func:`veil.fl.vertical.split.train_split`),
through any relay with a ``call(party -> [(method, args)])``. The runtime that moves the
calls on Flower, and who sees what: :mod:`veil.fl.runtime.flower_vertical` (threat model
there: semi-honest parties and relay, no collusion of the arbiter with the relay or a party).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from veil._json import canonical
from veil._validation import check_probability
from veil.crypto.agreement import agree, public_key
from veil.crypto.identity import check_table, public_identity, sign, verify
from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.messages import decode, encode
from veil.fl.vertical.align import AlignGuest, AlignHost, read_ids
from veil.fl.vertical.paillier_lr import Arbiter, PaillierGuest, PaillierHost, Plan
from veil.random import check_rng

if TYPE_CHECKING:   # loaded where used: a node's process per message imports this module
    import pandas as pd

__all__ = ["ARBITER", "VerticalParty", "VerticalSettings", "check_flower", "nodes_of", "train"]

log = logging.getLogger(__name__)

#: the party name of the key holder
ARBITER = "arbiter"


@dataclass(frozen=True)
class VerticalSettings:
    """What every party of a vertical run and its server agree on (each party holds its own
    copy and refuses a run of other settings: :meth:`message` is what they compare).

    ``parties``: the party names (the tables' owners) in the agreed order; ``model``:
    ``"logistic"``, ``"linear"`` (the Paillier protocol of :mod:`veil.fl.vertical.paillier_lr`
    or ``protocol="ss"``, secret sharing) or ``"split"`` (:mod:`veil.fl.vertical.split`);
    ``id`` / ``label``: the id column of every table and the label column (one party's);
    the schedule (``epochs``, ``batch_size``, ``learning_rate`` -- None: 0.15 for the
    linear models, 1e-3 for split learning --, ``alpha``, ``optimizer``, ``link``);
    ``key_bits``, ``insecure_ok``, ``decryption`` (Paillier); ``test_fraction`` of the
    aligned rows held out for the metrics and ``seed`` (simulation randomness: the split,
    batches and weights; None: the CSPRNG); label DP (``label_epsilon``, ``label_delta``;
    a fresh ledger of that budget at the label holder) or noisy gradients (``epsilon``,
    ``delta``, ``clip``: protocol "ss"); split learning's ``classes``, ``hidden`` and
    ``embedding``; ``prefix_columns``: column names local to each party (read as
    ``"<party>.<column>"``).
    """

    parties: tuple[str, ...] = ()
    model: str = "logistic"
    protocol: str = "paillier"
    decryption: str = "arbiter"
    id: str = "id"
    label: str = "y"
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float | None = None
    alpha: float = 0.0
    optimizer: str = "sgd"
    link: str = "taylor2"
    key_bits: int = 2048
    insecure_ok: bool = False
    test_fraction: float = 0.0
    seed: int | None = None
    label_epsilon: float | None = None
    label_delta: float = 1e-5
    epsilon: float | None = None
    delta: float = 1e-5
    clip: float | tuple[float, ...] = 1.0
    classes: int | None = None
    hidden: int = 64
    embedding: int = 16
    prefix_columns: bool = False

    @property
    def rate(self) -> float:
        """The learning rate: as given, else the model's default."""
        if self.learning_rate is not None:
            return self.learning_rate
        return 1e-3 if self.model == "split" else 0.15

    def schedule(self) -> dict[str, Any]:
        """The training schedule of a logistic / linear run: the arguments of
        :class:`veil.fl.vertical.paillier_lr.Plan` but the task."""
        return {"epochs": self.epochs, "batch_size": self.batch_size,
                "learning_rate": self.rate, "alpha": self.alpha, "optimizer": self.optimizer,
                "link": self.link}

    def message(self) -> dict[str, Any]:
        """The settings as plain data (what the parties and the server compare and sign)."""
        body = asdict(self)
        body["parties"] = list(self.parties)
        if isinstance(self.clip, tuple):
            body["clip"] = list(self.clip)
        return {"vertical": body}


def check_flower(settings: VerticalSettings) -> None:
    """ConfigError unless ``settings`` can run with each party on its own node (what runs,
    and why not threshold decryption: :mod:`veil.fl.runtime.flower_vertical`)."""
    allowed = {"model": ("logistic", "linear", "split"), "protocol": ("paillier",),
               "decryption": ("arbiter",)}
    if settings.model == "split":      # no protocol, no key
        allowed = {"model": allowed["model"]}
    for key, values in allowed.items():
        value = getattr(settings, key)
        if value not in values:
            raise ConfigError(f"[vertical] {key}={value!r} does not run on Flower: allowed "
                              f"{list(values)} (the others run under the local runtime)")
    if len(settings.parties) < 2:
        raise ConfigError("[vertical] parties must map at least two party names to their "
                          "tables")
    if ARBITER in settings.parties:
        raise ConfigError(f"[vertical] parties may not name a party {ARBITER!r}: that is "
                          "the key holder's node")


def nodes_of(settings: VerticalSettings) -> list[str]:
    """The parties with a node each: the tables' owners, and the arbiter unless the model
    is split learning (no key)."""
    return [*settings.parties, *([] if settings.model == "split" else [ARBITER])]


class _Channel:
    """This party's end of its sealed channels through the relay: an ephemeral X25519 key
    (RFC 7748) per party and run; with a peer's public key, HKDF-SHA256 of the shared
    secret bound to the host and the message kind (:func:`veil.fl.secagg.masks.agree`)
    keys AES-256-GCM, one key per direction and kind, and the nonce is the message's
    number on that key (so each nonce is used once, and a replayed, dropped or reordered
    message does not authenticate). The public keys themselves travel signed by the
    parties' identity keys (:meth:`VerticalParty._channel_key`), so the relay cannot put
    its own in their place."""

    def __init__(self) -> None:
        self._secret = check_rng(None).bytes(32)
        self.public = public_key(self._secret)
        self._counts: dict[tuple[str, str], int] = {}

    def _aead(self, peer: Any, host: str, kind: str, who: str) -> tuple[AESGCM, bytes]:
        if not isinstance(peer, bytes) or len(peer) != 32:
            raise ProtocolError(f"message from {who!r}: its channel key is not 32 bytes")
        number = self._counts.get((host, kind), 0)
        self._counts[host, kind] = number + 1
        key = agree(self._secret, peer, f"veil vertical|{kind}|{host}".encode())
        return AESGCM(key), number.to_bytes(12, "big")

    def seal(self, peer: Any, host: str, kind: str, data: bytes, who: str) -> bytes:
        """``data`` for the peer (``host``: the host of the pair; ``who``: the peer)."""
        aead, nonce = self._aead(peer, host, kind, who)
        return aead.encrypt(nonce, data, None)

    def open(self, peer: Any, host: str, kind: str, data: Any, who: str) -> bytes:
        """The peer's sealed ``data`` (ProtocolError naming ``who`` if it does not open)."""
        if not isinstance(data, bytes):
            raise ProtocolError(f"message from {who!r}: the sealed {kind} is not bytes")
        aead, nonce = self._aead(peer, host, kind, who)
        try:
            return aead.decrypt(nonce, data, None)
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

    ``name``: its party name (``"arbiter"``: the key holder, no table); ``settings``: its
    own :class:`VerticalSettings`; ``table``: its own table (a DataFrame with the id column;
    the guest's holds the label); ``ledger``: the guest's ledger file when the settings have
    ``label_epsilon``; ``out``: a folder for its own part of the model (:meth:`_save`);
    ``identity``: its Ed25519 private key and ``identities`` its own identity table (party
    index in the plan's ``parties`` -> public key, :mod:`veil.crypto.identity`): every
    table owner needs both, to sign its channel key and check its peers' (the arbiter
    seals nothing and needs neither).
    :meth:`call` answers the server's calls; which are
    allowed depends on the role, and each party checks the messages the calls carry.
    """

    _ALIGN = {"guest": ("channel_key", "align_request", "align_finish", "align_order"),
              "host": ("channel_key", "align_setup", "align_respond", "align_order")}
    _METHODS = {("guest", "paillier"): (*_ALIGN["guest"], "key", "update", "next_batch",
                                        "residual", "gradient", "evaluate", "save"),
                ("host", "paillier"): (*_ALIGN["host"], "key", "update", "forward",
                                       "backward", "test_scores", "save"),
                ("arbiter", "paillier"): ("key", "decrypt"),
                ("guest", "split"): (*_ALIGN["guest"], "next_batch", "step", "evaluate",
                                     "save"),
                ("host", "split"): (*_ALIGN["host"], "forward", "backward", "test_scores",
                                    "save")}

    def __init__(self, name: str, settings: VerticalSettings, table: pd.DataFrame | None,
                 *, ledger: str | os.PathLike | None = None,
                 out: str | os.PathLike | None = None, identity: bytes | None = None,
                 identities: Mapping[int, bytes] | None = None) -> None:
        if not isinstance(settings, VerticalSettings):
            raise ConfigError(f"settings={settings!r} is not allowed: expected "
                              "VerticalSettings")
        check_flower(settings)
        self.settings = settings
        self.parties = list(settings.parties)
        self.name = str(name)
        self.out = None if out is None else Path(out)
        self.id_column = settings.id
        self.label = settings.label
        self.model = settings.model
        self.schedule = None if self.model == "split" else Plan(task=self.model,
                                                                **settings.schedule())
        if self.name == ARBITER:
            if table is not None:
                raise ConfigError("the arbiter holds no table (node config data)")
            self.role, self.columns, self.rows = "arbiter", [], 0
        else:
            if self.name not in self.parties:
                raise ConfigError(f"party {self.name!r} is not one of the run's parties "
                                  f"{self.parties}")
            import pandas as pd

            if not isinstance(table, pd.DataFrame):
                raise ConfigError(f"party {self.name!r} has no table (node config data)")
            if settings.prefix_columns:
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
        self._identity, self._identities = self._check_identity(identity, identities)
        if self.role == "guest" and settings.label_epsilon is not None and ledger is None:
            raise ConfigError(f"party {self.name!r}: label_epsilon needs this node's own "
                              "ledger file (node config ledger)")
        self._channel: _Channel | None = None
        self._peers: dict[str, bytes] = {}      # the other side's channel keys
        self._align: Any = None
        self._ordered: set[str] = set()          # the hosts the guest sent their order
        self._party: Any = None                 # PaillierGuest / PaillierHost / Arbiter,
        self._bottom: Any = None                # or SplitTop (and the guest's own bottom,
        self._own_cut: bytes | None = None      # its embeddings of the batch and the top's
        self._own_grad: bytes | None = None     # gradient of them: they never leave it)
        self._test: np.ndarray | None = None    # the held-out rows: host, features; guest,
        self._test_X: np.ndarray | None = None  # their mask, features and labels
        self._test_y: np.ndarray | None = None
        self._ledger: Any = None                # the guest's, with label_epsilon
        self._cut = 0                           # split: the top's input width
        self.aligned = 0

    def _check_identity(self, identity: bytes | None, identities: Mapping[int, bytes] | None
                        ) -> tuple[bytes | None, dict[int, bytes]]:
        """This party's identity key and its own table, checked: a table owner needs a key
        that is its entry of a table listing every party."""
        if self.role == "arbiter":
            return None, {}
        if identity is None or identities is None:
            raise ConfigError(f"party {self.name!r} needs its identity key and the identity "
                              "table ([vertical] identities, node config identity-key; "
                              "`veil fl identities DIR --parties N`): without them a relay "
                              "could put its own channel keys in the parties' place")
        table = check_table(identities, "[vertical] identities")
        parties = self.parties
        missing = [p for i, p in enumerate(parties) if i not in table]
        if missing:
            raise ConfigError(f"the identity table has no entry for {missing}: it needs one "
                              f"per party, indexed by their order in parties {parties}")
        index = parties.index(self.name)
        if public_identity(identity) != table[index]:
            raise ConfigError(f"party {self.name!r}: this identity key is not entry {index} "
                              "of the identity table (another party's key, or another table)")
        return identity, table

    def _statement(self, name: str, role: str, key: bytes) -> bytes:
        """What a party signs with its channel key: the run's plan (its SHA-256), the
        party's name and role, the key."""
        return b"|".join([b"veil.vertical.channel", hashlib.sha256(canonical(
            self.settings.message())).digest(), name.encode(), role.encode(), key])

    def describe(self) -> dict[str, Any]:
        """What the server learns at the handshake: the role and the table's schema."""
        return {"party": self.name, "role": self.role, "columns": self.columns,
                "rows": self.rows}

    def call(self, method: str, args: Mapping[str, Any]) -> bytes:
        """Run one call of the server's; its answer as bytes (b"": none)."""
        if method not in self._METHODS[self.role, "split" if self.model == "split"
                                       else "paillier"]:
            raise ProtocolError(f"party {self.name!r} ({self.role}) has no call {method!r}")
        answer = getattr(self, f"_{method}")(args)
        return b"" if answer is None else answer

    # the alignment ---------------------------------------------------------------------
    def _hosts(self) -> list[str]:
        return [p for p in self.parties if p != self.name]

    def _channel_key(self, args: Mapping[str, Any]) -> bytes:
        """This party's channel key, signed with its identity key."""
        if self._channel is None:
            self._channel = _Channel()
        key = self._channel.public
        return encode({"party": self.name, "key": key, "signature": sign(
            self._identity, self._statement(self.name, self.role, key))})

    def _peer_key(self, blob: Any, role: str, peer: str | None) -> bytes:
        """A peer's channel key (its :meth:`_channel_key` answer, relayed), taken only with
        a valid signature of the peer ``peer`` (None: any other party of the plan) in its
        ``role`` under that party's entry of this party's own identity table; otherwise a
        ProtocolError naming the party the key claims to be from."""
        try:
            msg = decode(blob) if isinstance(blob, bytes) else None
        except ProtocolError:
            msg = None
        msg = msg if isinstance(msg, dict) else {}
        name, key = msg.get("party"), msg.get("key")
        parties = self.parties
        who = peer or (name if isinstance(name, str) else "the " + role)
        if (peer is not None and name != peer) or name == self.name or name not in parties \
                or not isinstance(key, bytes) or not verify(
                    self._identities.get(parties.index(name)), msg.get("signature"),
                    self._statement(name, role, key)):
            raise ProtocolError(f"message from {who!r}: its channel key is not signed by its "
                                "identity key (identity table): refusing to seal to it")
        return key

    def _align_setup(self, args: Mapping[str, Any]) -> bytes:
        if self._align is not None or self._table is None:
            raise ProtocolError(f"{self.name!r} is aligned already: one alignment per run")
        self._align = AlignHost(self.name, self._table, column=self.id_column)
        return self._align.setup()

    def _align_request(self, args: Mapping[str, Any]) -> bytes:
        host = _arg(args, "host", str, "align_request")
        if self._table is None:
            raise ProtocolError(f"{self.name!r} is aligned already: one alignment per run")
        if self._align is None:
            self._align = AlignGuest(self._table, self._hosts(), column=self.id_column)
        self._peers[host] = self._peer_key(args.get("key"), "host", host)
        return self._align.request(host, _arg(args, "setup", bytes, "align_request"))

    def _align_finish(self, args: Mapping[str, Any]) -> None:
        self._need(self._align, "align_request")
        self._align.finish(_arg(args, "host", str, "align_finish"),
                           _arg(args, "response", bytes, "align_finish"))

    def _align_respond(self, args: Mapping[str, Any]) -> bytes:
        self._need(self._align, "align_setup")
        return self._align.respond(_arg(args, "request", bytes, "align_respond"))

    def _seal(self, peer: str, kind: str, data: bytes) -> bytes:
        """``data`` sealed for ``peer`` (the guest's hosts, a host's guest)."""
        host = peer if self.role == "guest" else self.name
        channel = self._need(self._channel, "channel_key")
        return channel.seal(self._peers.get(peer), host, kind, data, peer)

    def _open(self, peer: str, kind: str, data: Any) -> bytes:
        host = peer if self.role == "guest" else self.name
        channel = self._need(self._channel, "channel_key")
        return channel.open(self._peers.get(peer), host, kind, data, peer)

    def _need(self, value: Any, first: str) -> Any:
        if value is None:
            raise ProtocolError(f"party {self.name!r}: call {first} first")
        return value

    def _align_order(self, args: Mapping[str, Any]) -> bytes | None:
        if self.role == "guest":     # the common ids and the held-out rows, sealed per host
            host = _arg(args, "host", str, "align_order")
            self._need(self._align, "align_request")
            if self._party is None:
                self._start_guest(args)
            body = encode({"order": self._align.order(host), "test": self._test})
            self._ordered.add(host)
            if self._ordered == set(self._hosts()):
                self._aligned()
            return self._seal(host, "order", body)
        self._peers["guest"] = self._peer_key(args.get("key"), "guest", None)
        sealed = self._open("guest", "order", args.get("order"))
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
        X = self._features(rows)
        self._test = X[test] if test.any() else X[~test]
        self.aligned = rows.size
        if self.model == "split":
            self._party = self._split_bottom(self.name, X[~test], args)
        else:
            self._party = PaillierHost(self.name, X[~test], self.schedule,
                                       insecure_ok=self.settings.insecure_ok)
        self._aligned()
        return None

    def _aligned(self) -> None:
        """The alignment is done: the table and the PSI state go (the party's state, kept
        between the processes of a node's messages, is then its aligned arrays only)."""
        self._table = self._align = None

    def _features(self, rows: np.ndarray) -> np.ndarray:
        return self._table.iloc[rows][self.columns].to_numpy(dtype=np.float64)

    def _draws(self, n: int) -> tuple[np.ndarray, Any]:
        """The held-out rows of ``n`` aligned ones and the model's generator, drawn from
        the seed in the order :func:`veil.experiments.vertical_run.run_vertical` draws them
        (so a seeded run is the local runtime's; no seed: the CSPRNG)."""
        from veil.fl.vertical.data import held_out  # pandas: the alignment's processes

        rng = check_rng(self.settings.seed)
        fraction = check_probability(self.settings.test_fraction, "[vertical] test_fraction",
                                     high_open=True)
        test = held_out(n, fraction, rng)
        return test, check_rng(rng.spawn(1)[0])

    def _split_bottom(self, name: str, X: np.ndarray, args: Mapping[str, Any],
                      model_rng: Any = None) -> Any:
        """A split-learning bottom on ``X``: its network initialised as
        :class:`veil.fl.vertical.split.SplitNN` initialises it (the torch seed drawn from
        the model's generator, every party's bottom built in the plan's order, whose
        widths ``args["widths"]`` the server relays from the handshake's schemas)."""
        from veil.fl.vertical.split import SplitBottom, mlp, seed_networks

        widths, names = args.get("widths"), args.get("names")
        if not (isinstance(widths, list) and isinstance(names, list)
                and len(widths) == len(names) and name in names
                and all(isinstance(w, int) and w > 0 for w in widths)
                and widths[names.index(name)] == X.shape[1]):
            raise ProtocolError(f"call align_order: the bottoms' widths {widths!r} do not "
                                f"give {name!r} its {X.shape[1]} columns")
        if model_rng is None:
            model_rng = self._draws(self.aligned)[1]
        seed_networks(model_rng)
        hidden, embedding = self.settings.hidden, self.settings.embedding
        modules = [mlp([w, hidden, embedding]) for w in widths]
        self._cut = len(modules) * embedding          # the top's input width
        return SplitBottom(name, X, modules[names.index(name)],
                           learning_rate=self.settings.rate, passes=self.settings.epochs)

    def _start_guest(self, args: Mapping[str, Any]) -> None:
        """The guest's part once the alignment is done: the held-out rows and its
        PaillierGuest (or SplitTop and its own bottom) on the training rows."""
        rows = self._align.result().rows["guest"]
        test, model_rng = self._draws(rows.size)
        X, y = self._features(rows), self._table.iloc[rows][self.label].to_numpy()
        self._test, self.aligned = test, rows.size
        self._test_X = X[test] if test.any() else X[~test]
        self._test_y = y[test] if test.any() else y[~test]
        settings = self.settings
        epsilon = settings.label_epsilon
        if self.model == "split":   # checked before a ledger file exists
            from veil.fl.vertical.split import SplitTop, mlp, split_classes

            y_train = y[~test].astype(np.int64)
            classes = split_classes(settings.classes, y_train, epsilon, "[vertical]")
        if epsilon is not None:
            from veil.dp.ledger import Ledger

            self._ledger = Ledger(epsilon=epsilon, delta=settings.label_delta,
                                  accountant="pld" if self.model == "split" else "rdp",
                                  path=self._ledger_file)
        if self.model == "split":
            self._bottom = self._split_bottom("guest", X[~test], args, model_rng)
            self._party = SplitTop(
                y_train, args["names"], mlp([self._cut, settings.hidden, classes]),
                classes=classes, epochs=settings.epochs, batch_size=settings.batch_size,
                learning_rate=settings.rate, label_epsilon=epsilon, ledger=self._ledger,
                rng=model_rng.spawn(1)[0])
            return
        self._party = PaillierGuest(X[~test], y[~test], self._hosts(), self.schedule,
                                    label_epsilon=epsilon, label_delta=settings.label_delta,
                                    ledger=self._ledger, insecure_ok=settings.insecure_ok,
                                    rng=model_rng.spawn(1)[0])

    # training --------------------------------------------------------------------------
    def _key(self, args: Mapping[str, Any]) -> bytes | None:
        if self.role != "arbiter":
            self._need(self._party, "align_order").receive_key(
                _arg(args, "key", bytes, "key"))
            return None
        if self._party is not None:
            raise ProtocolError("the arbiter has a key already: one key per run")
        sizes, parties = args.get("sizes"), set(self.parties)
        if not (isinstance(sizes, dict) and "guest" in sizes and len(sizes) == len(parties)
                and set(sizes) - {"guest"} < parties):
            raise ProtocolError(f"call key: sizes must name 'guest' (the label holder) and "
                                f"the other parties of {sorted(parties)}")
        self._party = Arbiter(sizes, key_bits=self.settings.key_bits,
                              insecure_ok=self.settings.insecure_ok)
        return self._party.key_message()

    def _update(self, args: Mapping[str, Any]) -> None:
        self._need(self._party, "align_order").update(_arg(args, "decrypted", bytes, "update"))

    def _next_batch(self, args: Mapping[str, Any]) -> bytes | None:
        """The guest's next batch message (split learning: its own bottom first steps on
        the last batch's gradient, then embeds the new batch, both on this node)."""
        party = self._need(self._party, "align_order")
        if self._own_grad is not None:
            self._bottom.backward(self._own_grad)
            self._own_grad = None
        batch = party.next_batch()
        if batch is not None and self._bottom is not None:
            self._own_cut = self._bottom.forward(batch)
        return batch

    def _forward(self, args: Mapping[str, Any]) -> bytes:
        """A host's answer to a batch: its encrypted scores (Paillier), or its cut-layer
        embeddings sealed for the guest (split learning)."""
        answer = self._need(self._party, "align_order").forward(
            _arg(args, "batch", bytes, "forward"))
        return self._seal("guest", "cut", answer) if self.model == "split" else answer

    def _step(self, args: Mapping[str, Any]) -> bytes:
        """The split top's step on its own embeddings and each host's (sealed): the
        gradients of the hosts' embeddings, each sealed for its host."""
        top = self._need(self._party, "align_order")
        sealed = _arg(args, "embeddings", dict, "step")
        if set(sealed) != set(self._hosts()) or self._own_cut is None:
            raise ProtocolError(f"call step: embeddings from {sorted(sealed)}; expected "
                                f"{self._hosts()} after a batch")
        grads = top.step({"guest": self._own_cut,
                          **{h: self._open(h, "cut", sealed[h]) for h in self._hosts()}})
        self._own_cut = None
        grads = dict(grads or {})
        self._own_grad = grads.pop("guest", None)
        return encode({h: self._seal(h, "grad", g) for h, g in grads.items()})

    def _residual(self, args: Mapping[str, Any]) -> bytes:
        scores = _arg(args, "scores", dict, "residual")
        return self._need(self._party, "align_order").residual(scores)

    def _gradient(self, args: Mapping[str, Any]) -> bytes:
        return self._need(self._party, "align_order").gradient()

    def _backward(self, args: Mapping[str, Any]) -> bytes | None:
        """A Paillier host's masked gradient for the guest's residual; a split bottom's
        step on the top's (sealed) gradient of its embeddings."""
        message = _arg(args, "message", bytes, "backward")
        if self.model == "split":
            message = self._open("guest", "grad", message)
        return self._need(self._party, "align_order").backward(message)

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
        scores = encode(party.embed(self._test) if self.model == "split"
                        else party.scores(self._test))
        return self._seal("guest", "scores", scores)

    def _evaluate(self, args: Mapping[str, Any]) -> bytes:
        """The guest's metrics on the held-out rows from its own part and each host's
        (sealed) partial scores, or cut-layer embeddings for split learning."""
        party = self._need(self._party, "align_order")
        sealed = _arg(args, "scores", dict, "evaluate")
        hosts = self._hosts()
        if set(sealed) != set(hosts):
            raise ProtocolError(f"call evaluate: scores from {sorted(sealed)}; expected "
                                f"{hosts}")
        n, y = self._test_X.shape[0], self._test_y
        parts = []
        for host in hosts:
            part = decode(self._open(host, "scores", sealed[host]))
            ndim = 2 if self.model == "split" else 1
            if not (isinstance(part, np.ndarray) and part.ndim == ndim
                    and part.shape[0] == n and np.all(np.isfinite(part))):
                raise ProtocolError(f"message from {host!r}: its scores are not {n} rows of "
                                    "finite numbers")
            parts.append(part)
        from veil.fl.vertical.data import auc

        metrics: dict[str, Any] = {"aligned": self.aligned,
                                   "evaluated_on": "held-out aligned rows"
                                   if self._test.any() else "training rows"}
        if self.model == "split":   # as SplitNN.predict_proba
            try:
                logits = party.logits([self._bottom.embed(self._test_X), *parts])
            except RuntimeError as exc:   # torch: widths that do not fit the top
                raise ProtocolError(f"the hosts' embeddings do not fit the top: {exc}") \
                    from None
            e = np.exp(logits - logits.max(axis=1, keepdims=True))
            proba = e / e.sum(axis=1, keepdims=True)
            metrics["accuracy"] = float(np.mean(np.argmax(proba, axis=1) == y))
            if party.classes == 2:
                metrics["auc"] = auc(y, proba[:, 1])
        else:
            own = party.coef_[:-1] if party.fit_intercept else party.coef_
            z = self._test_X @ own + party.intercept_ + sum(parts)
            if self.schedule.task == "logistic":
                metrics.update(accuracy=float(np.mean((z > 0) == y)), auc=auc(y, z))
            else:
                metrics["r2"] = float(1 - np.sum((y - z) ** 2) / np.sum((y - y.mean()) ** 2))
        if self._ledger is not None:
            metrics["label_epsilon_spent"] = self._ledger.spent()[0]
        return encode(metrics)

    def _save(self, args: Mapping[str, Any]) -> None:
        """This party's own part of the model into its ``out`` folder: ``coef.npy`` (its
        coefficient block; the guest's ends with the intercept), or for split learning
        ``model.npz`` (its bottom's parameters, ``bottom.<name>``; the guest's top's,
        ``top.<name>``)."""
        party = self._need(self._party, "align_order")
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        if self.model != "split":
            np.save(self.out / "coef.npy", party.coef_)
            return
        modules = {"bottom": self._bottom or party, "top": party if self._bottom else None}
        np.savez(self.out / "model.npz", **{
            f"{kind}.{key}": value.detach().numpy()
            for kind, holder in modules.items() if holder is not None
            for key, value in holder.module.state_dict().items()})


# -- the order of the calls ----------------------------------------------------------
def train(relay: Any) -> dict[str, Any]:
    """A whole run through a connected ``relay`` (its ``guest``, ``hosts``, ``schemas``,
    ``sent`` and ``call``: :class:`veil.fl.runtime.flower_vertical.VerticalRelay`), in the
    local runner's order: the alignment, every batch of the plan, the metrics. Returns the
    results (the guest's metrics, the bytes each party sent, the seconds).

    Every exchange is a fresh process per party on a deployment (seconds each), so calls
    that do not wait for each other share one exchange, each party's calls in its own
    order: the alignment takes four (the arbiter makes its key during the first; the
    guest's first batch comes with its order of the ids), a batch four for the Paillier
    protocol (hosts; guest; hosts with the arbiter decrypting the guest's gradient; the
    arbiter decrypting the hosts' while the guest steps and draws its next batch) and two
    for split learning (every bottom; the guest's step with its next batch), the end two
    (the hosts' last step and test scores; the guest's metrics)."""
    start = time.perf_counter()
    guest, hosts = relay.guest, relay.hosts
    parties = [guest, *hosts]
    split = relay.settings.model == "split"
    # the gradient entries of each party, by its name in the protocol's messages (the
    # label holder is "guest" there; its intercept is one more entry)
    arbiter = {} if split else {ARBITER: [("key", {"sizes": {
        "guest": len(relay.schemas[guest]["columns"]) + 1,
        **{h: len(relay.schemas[h]["columns"]) for h in hosts}}})]}
    setups = relay.call({**{h: [("align_setup", {}), ("channel_key", {})] for h in hosts},
                         **arbiter})
    requests = relay.call({guest: [("align_request", {"host": h, "setup": setups[h][0],
                                                      "key": setups[h][1]}) for h in hosts]})
    responses = relay.call({h: [("align_respond", {"request": r})]
                            for h, r in zip(hosts, requests[guest])})
    # split learning: the bottoms' widths, in the plan's order, for their initialisation
    widths = {"names": ["guest", *hosts],
              "widths": [len(relay.schemas[p]["columns"]) for p in parties]} if split else {}
    key = [] if split else [("key", {"key": setups[ARBITER][0]})]
    done = relay.call({guest: [*(("align_finish", {"host": h, "response": responses[h][0]})
                                 for h in hosts), ("channel_key", {}),
                               *(("align_order", {"host": h, **widths}) for h in hosts),
                               *key, ("next_batch", {})]})[guest]
    channel, orders = done[len(hosts)], done[len(hosts) + 1:2 * len(hosts) + 1]
    pending = {h: [("align_order", {"order": o, "key": channel, **widths}), *key]
               for h, o in zip(hosts, orders)}
    batches, pending = (_train_split if split else _train_paillier)(relay, done[-1], pending)
    ends = relay.call({h: [*pending[h], ("test_scores", {}), ("save", {})] for h in hosts})
    metrics = decode(relay.call({guest: [("evaluate", {"scores": {
        h: ends[h][-2] for h in hosts}}), ("save", {})]})[guest][0])
    if not isinstance(metrics, dict):
        raise ProtocolError(f"party {guest!r} sent no metrics")
    return {**metrics, "parties": parties, "guest": guest, "batches": batches,
            "bytes_sent": dict(relay.sent), "seconds": time.perf_counter() - start,
            "runtime": "flower"}


def _train_paillier(relay: Any, batch: bytes, pending: dict[str, list]
                    ) -> tuple[int, dict[str, list]]:
    """Every batch of the Paillier protocol (:func:`veil.fl.vertical.linear.train_paillier`)
    from the guest's first ``batch`` (b"": none), the hosts' calls ``pending`` going with
    their first; returns the batches and the hosts' calls still pending (their last
    update)."""
    guest, hosts = relay.guest, relay.hosts
    batches = 0
    while batch:
        scores = relay.call({h: [*pending[h], ("forward", {"batch": batch})] for h in hosts})
        residual, own = relay.call({guest: [
            ("residual", {"scores": {h: scores[h][-1] for h in hosts}}),
            ("gradient", {})]})[guest]
        masked = relay.call({**{h: [("backward", {"message": residual})] for h in hosts},
                             ARBITER: [("decrypt", {"gradient": own, "sender": "guest"})]})
        answers = relay.call({
            ARBITER: [("decrypt", {"gradient": masked[h][0], "sender": h}) for h in hosts],
            guest: [("update", {"decrypted": masked[ARBITER][0]}), ("next_batch", {})]})
        batch = answers[guest][-1]
        pending = {h: [("update", {"decrypted": d})] for h, d in zip(hosts, answers[ARBITER])}
        batches += 1
    return batches, pending


def _train_split(relay: Any, batch: bytes, pending: dict[str, list]
                 ) -> tuple[int, dict[str, list]]:
    """Every batch of split learning (:func:`veil.fl.vertical.split.train_split`): the
    guest's top and own bottom, each host's bottom, from the guest's first ``batch`` (b"":
    none), the hosts' calls ``pending`` going with their first; returns the batches and
    the hosts' calls still pending (their last backward pass)."""
    guest, hosts = relay.guest, relay.hosts
    batches = 0
    while batch:
        cut = relay.call({h: [*pending[h], ("forward", {"batch": batch})] for h in hosts})
        answer, batch = relay.call({guest: [("step", {"embeddings": {
            h: cut[h][-1] for h in hosts}}), ("next_batch", {})]})[guest]
        gradients = decode(answer)
        if not (isinstance(gradients, dict) and set(gradients) <= set(hosts)
                and all(isinstance(g, bytes) for g in gradients.values())):
            raise ProtocolError(f"party {guest!r} sent no gradients of the cut layer")
        pending = {h: [("backward", {"message": gradients[h]})] if h in gradients else []
                   for h in hosts}
        batches += 1
    return batches, pending
