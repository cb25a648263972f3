"""Private sample alignment ("样本对齐") for vertical federated learning, by ECDH-PSI.

Roles: one *label holder* (the guest) and one or more *feature holders* (hosts), each with
a column of sample ids (strings or integers, from a CSV or pandas column). For every host
the guest runs the private set intersection of :mod:`veil.crypto.psi` (ECDH on X25519,
sans-I/O) as the receiver, the host as the sender; with several hosts the guest
intersects the pairwise results. Then (``output="intersection"``) the guest tells each
host the ids of the common samples in one agreed training order (the guest's row order),
so that row k of every party's aligned table is the same sample.

Messages (bytes, :func:`veil.fl.messages.encode`), per host:

1. host -> guest ``setup``: the id kind (``"str"`` or ``"int"``), the PSI setup points;
2. guest -> host ``request``: the guest's id kind, the PSI request;
3. host -> guest ``response``: the PSI response;
4. guest -> host ``order`` (intersection mode only): the common ids in training order.

What each party learns (threat model: semi-honest parties, DDH on Curve25519 with a
random-oracle hash, as in :mod:`veil.crypto.psi`): a host learns the guest's set size, the
id kind, and - in intersection mode - the ids of the samples common to *all* parties
(which it holds itself); nothing about ids outside that intersection. The guest learns the
hosts' set sizes, and with several hosts the pairwise intersections with each host (a
superset of the common ids). In ``output="cardinality"`` mode nobody receives an id: the
guest learns only the size of its intersection with each host, and hosts nothing. A
malicious party could enlarge its set to probe ids; that is not covered (see
:mod:`veil.crypto.psi`). Id kinds are compared before any PSI message is answered, so
mismatched kinds (``"17"`` vs ``17``) are an error, not a silent empty intersection.

Duplicate ids within a party are refused (a row could not be aligned to one sample), as
are missing ids (NaN/None) and an empty intersection.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_choice
from veil.crypto.psi import PSIReceiver, PSISender
from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.messages import encode
from veil.fl.vertical._wire import read_message
from veil.random import check_rng

__all__ = ["read_ids", "AlignGuest", "AlignHost", "Alignment", "align"]

log = logging.getLogger(__name__)

_OUTPUTS = ("intersection", "cardinality")
_KINDS = ("str", "int")


def read_ids(ids: Any, column: str | None = None, *, name: str = "ids"
             ) -> tuple[list[str], str]:
    """A party's ids as strings (integers in decimal) and their kind, ``"str"`` or ``"int"``.

    ``ids``: a sequence, numpy array, pandas Series/Index, or a DataFrame with ``column``.
    Refuses missing values, mixed kinds and duplicates (DataError naming the first one).
    """
    import pandas as pd  # on use: a vertical node's processes after the alignment skip it

    if isinstance(ids, pd.DataFrame):
        if column is None or column not in ids.columns:
            raise DataError(f"{name}: column={column!r} is not a column of the table; "
                            f"columns: {list(ids.columns)[:20]}")
        ids = ids[column]
    elif column is not None:
        raise ConfigError(f"column={column!r} is only allowed with a DataFrame")
    values = pd.Series(ids, dtype=object) if not isinstance(ids, pd.Series) else \
        ids.astype(object)
    if values.empty:
        raise DataError(f"{name} is empty; expected at least one id")
    if values.isna().any():
        raise DataError(f"{name} holds {int(values.isna().sum())} missing id(s) (NaN/None); "
                        "every row needs an id")
    is_str = values.map(lambda v: isinstance(v, str))
    is_int = values.map(lambda v: isinstance(v, (int, np.integer)) and not isinstance(
        v, (bool, np.bool_)))
    if bool(is_str.all()):
        kind, out = "str", values.tolist()
    elif bool(is_int.all()):
        kind, out = "int", [str(int(v)) for v in values]
    else:
        bad = values[~(is_str | is_int)]
        example = bad.iloc[0] if len(bad) else values[~is_str].iloc[0]
        raise DataError(f"{name} mixes id types (e.g. {example!r} of type "
                        f"{type(example).__name__}); ids must be all strings or all integers")
    dup = pd.Series(out).duplicated()
    if dup.any():
        first = out[int(np.flatnonzero(dup.to_numpy())[0])]
        raise DataError(f"{name} holds duplicate ids (e.g. {first!r}, {int(dup.sum())} "
                        "duplicates): each id must name one row; deduplicate first")
    return out, kind


def _message(data: Any, stage: str, party: str) -> dict:
    """A decoded alignment message of ``stage`` (ProtocolError naming ``party`` if not)."""
    return read_message(data, stage, party, "alignment message")


def _field(msg: dict, name: str, kind: type, party: str) -> Any:
    value = msg.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProtocolError(f"alignment message from {party!r}: field {name!r} is "
                            f"{type(value).__name__}; expected {kind.__name__}")
    return value


class AlignHost:
    """A feature holder's side of the alignment (sans-I/O: messages in, messages out); it
    answers a guest's request of at most ``max_request`` ids (default: twice as many as it
    holds; :class:`~veil.crypto.psi.PSISender`)."""

    def __init__(self, name: str, ids: Any, *, column: str | None = None,
                 output: str = "intersection", max_request: int | None = None,
                 rng=None) -> None:
        self.name = str(name)
        self.output = check_choice(output, "output", _OUTPUTS)
        self.ids, self.kind = read_ids(ids, column, name=f"ids of {self.name!r}")
        self._sender = PSISender(self.ids, output=self.output, max_request=max_request,
                                 rng=check_rng(rng))
        self.rows_: np.ndarray | None = None

    def setup(self) -> bytes:
        return encode({"stage": "setup", "kind": self.kind, "psi": self._sender.setup()})

    def respond(self, request: bytes) -> bytes:
        msg = _message(request, "request", "guest")
        kind = _field(msg, "kind", str, "guest")
        if kind != self.kind:
            raise DataError(f"mismatched id types: the guest's ids are {kind!r}, the ids of "
                            f"{self.name!r} are {self.kind!r}; convert one column first")
        return encode({"stage": "response", "psi": self._sender.respond(
            _field(msg, "psi", bytes, "guest"))})

    def receive_order(self, order: bytes) -> np.ndarray:
        """Row indices of this host's table in the agreed training order."""
        if self.output != "intersection":
            raise ProtocolError(f"{self.name!r} agreed to output='cardinality': no ids may "
                                "be sent to it")
        msg = _message(order, "order", "guest")
        common = _field(msg, "ids", list, "guest")
        position = {v: i for i, v in enumerate(self.ids)}
        rows = [position.get(v, -1) if isinstance(v, str) else -1 for v in common]
        if not common or min(rows) < 0 or len(set(common)) != len(common):
            raise ProtocolError(f"the guest's order for {self.name!r} is empty, repeats ids "
                                "or names ids this party does not hold")
        self.rows_ = np.asarray(rows, dtype=np.int64)
        return self.rows_


class AlignGuest:
    """The label holder's side: one PSI receiver per host, then the common order."""

    def __init__(self, ids: Any, hosts: Sequence[str], *, column: str | None = None,
                 output: str = "intersection", rng=None) -> None:
        self.output = check_choice(output, "output", _OUTPUTS)
        self.hosts = [str(h) for h in hosts]
        if not self.hosts or len(set(self.hosts)) != len(self.hosts):
            raise ConfigError(f"hosts={list(hosts)!r} is not allowed: need distinct names "
                              "of at least one host")
        self.ids, self.kind = read_ids(ids, column, name="ids of the guest")
        rng = check_rng(rng)
        self._receivers = {h: PSIReceiver(self.ids, output=self.output, rng=r)
                           for h, r in zip(self.hosts, rng.spawn(len(self.hosts)))}
        self._results: dict[str, Any] = {}
        self._alignment: Alignment | None = None

    def _host(self, host: str) -> PSIReceiver:
        if host not in self._receivers:
            raise ProtocolError(f"unknown host {host!r}; expected one of {self.hosts}")
        return self._receivers[host]

    def request(self, host: str, setup: bytes) -> bytes:
        """Take ``host``'s setup message, return the request for it."""
        receiver = self._host(host)
        msg = _message(setup, "setup", host)
        kind = _field(msg, "kind", str, host)
        if kind not in _KINDS:
            raise ProtocolError(f"host {host!r} sent id kind {kind!r}; expected {_KINDS}")
        if kind != self.kind:
            raise DataError(f"mismatched id types: the guest's ids are {self.kind!r}, the ids "
                            f"of {host!r} are {kind!r}; convert one column first")
        receiver.receive_setup(_field(msg, "psi", bytes, host))
        return encode({"stage": "request", "kind": self.kind, "psi": receiver.request()})

    def finish(self, host: str, response: bytes) -> None:
        msg = _message(response, "response", host)
        self._results[host] = self._host(host).finish(_field(msg, "psi", bytes, host))

    def result(self) -> Alignment:
        """The common rows (or sizes) once every host has answered."""
        if self._alignment is not None:
            return self._alignment
        missing = [h for h in self.hosts if h not in self._results]
        if missing:
            raise ProtocolError(f"no PSI response yet from hosts {missing}")
        if self.output == "cardinality":
            self._alignment = Alignment(ids=None, rows={}, sizes=dict(self._results))
            return self._alignment
        common = set(self.ids)
        for host in self.hosts:
            common &= set(self._results[host])
        if not common:
            sizes = {h: len(self._results[h]) for h in self.hosts}
            raise DataError(f"the intersection of all parties' ids is empty (pairwise sizes "
                            f"with the guest: {sizes}); nothing to align")
        rows = np.asarray([i for i, v in enumerate(self.ids) if v in common], dtype=np.int64)
        ids = [self.ids[i] for i in rows]
        self._alignment = Alignment(ids=ids, rows={"guest": rows},
                                    sizes={h: len(self._results[h]) for h in self.hosts})
        return self._alignment

    def order(self, host: str) -> bytes:
        """The message telling ``host`` the common ids in training order."""
        self._host(host)
        if self.output != "intersection":
            raise ProtocolError("output='cardinality': no ids are sent to hosts")
        return encode({"stage": "order", "ids": self.result().ids})


@dataclass
class Alignment:
    """The outcome: common ``ids`` in training order (None in cardinality mode), each
    party's ``rows`` (indices into its own table, in that order), the pairwise ``sizes``
    of the guest's intersection with each host, and the ``bytes`` exchanged per host."""

    ids: list[str] | None
    rows: dict[str, np.ndarray]
    sizes: dict[str, int]
    bytes: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Number of aligned samples (cardinality mode: the smallest pairwise size)."""
        return len(self.ids) if self.ids is not None else min(self.sizes.values())

    def take(self, party: str, table: Any) -> Any:
        """``party``'s table (DataFrame or array) restricted to the aligned rows, in order."""
        if party not in self.rows:
            raise ConfigError(f"party={party!r} is not aligned; parties: {list(self.rows)}")
        import pandas as pd

        rows = self.rows[party]
        return table.iloc[rows] if isinstance(table, (pd.DataFrame, pd.Series)) else \
            np.asarray(table)[rows]


def align(guest_ids: Any, host_ids: Mapping[str, Any], *, column: str | None = None,
          output: str = "intersection", rng=None) -> Alignment:
    """Run the alignment of the guest and every host in this process (the local runner).

    ``guest_ids`` and each ``host_ids[name]`` are id columns (or tables with ``column``).
    Returns an :class:`Alignment`; ``rows["guest"]`` and ``rows[name]`` index each party's
    table so that the aligned tables can be joined row by row.
    """
    output = check_choice(output, "output", _OUTPUTS)
    if not isinstance(host_ids, Mapping) or not host_ids:
        raise ConfigError("host_ids must map each host's name to its ids (at least one host)")
    rng = check_rng(rng)
    names = list(host_ids)
    if "guest" in names:
        raise ConfigError("a host may not be named 'guest'")
    guest = AlignGuest(guest_ids, names, column=column, output=output, rng=rng.spawn(1)[0])
    hosts = {h: AlignHost(h, host_ids[h], column=column, output=output, rng=r,
                          max_request=max(1, len(guest.ids)))  # this process holds all sets
             for h, r in zip(names, rng.spawn(len(names)))}
    for h in names:  # id kinds are checked before any PSI work is done
        if hosts[h].kind != guest.kind:
            raise DataError(f"mismatched id types: the guest's ids are {guest.kind!r}, the "
                            f"ids of {h!r} are {hosts[h].kind!r}; convert one column first")
    traffic = {}
    for h in names:
        setup = hosts[h].setup()
        request = guest.request(h, setup)
        response = hosts[h].respond(request)
        guest.finish(h, response)
        traffic[h] = len(setup) + len(request) + len(response)
    result = guest.result()
    if output == "intersection":
        for h in names:
            message = guest.order(h)
            result.rows[h] = hosts[h].receive_order(message)
            traffic[h] += len(message)
    result.bytes = traffic
    log.info("aligned %d samples among the guest and %d host(s)", result.size, len(names))
    return result
