"""Session: the entry point of veil's secure multi-party computation.

::

    from veil.mpc import Session

    with Session(parties=3, rng=0) as s:          # rng=int only for tests
        x = s.share([1.5, -2.0, 3.25], owner=0)   # party 0's private input
        y = s.share([2.0, 4.0, -1.0], owner=1)    # party 1's
        z = (x * y).sum()                         # a SharedTensor: nobody sees z
        print(z.reveal())                         # -> -8.25, opened to every party
        print(s.cost())                           # rounds and bytes per party

Threat model
------------
*Semi-honest* (honest-but-curious) parties, any number n >= 2: the parties follow the
protocol; any coalition of up to n - 1 of them learns nothing beyond its inputs and the
revealed outputs (additive sharing is perfectly private against n - 1 parties; the
comparison, multiplication and masking protocols reveal only uniformly masked values).
Correlated randomness comes from a *trusted dealer* (``correlation="dealer"``, the
default): it must not collude with any party and must not see their messages; the session
plays that role and never receives shares, only the results it asks to reveal. For two
parties ``correlation="paillier"`` removes the dealer (multiplication triples from Paillier
encryption; comparisons then are not available). Malicious parties (who deviate from the
protocol) are *not* covered: they could change results undetected.

A session owns a runtime that moves the parties' messages: ``runtime="local"`` (all
parties in this process, deterministic under a seed), ``runtime="process"`` (one process
per party over loopback sockets, with a ``timeout`` after which a silent party is named in
a :class:`~veil.mpc.runtime.PartyTimeout`) or ``runtime="hosts"`` (each party a process
on its own host, ``veil mpc party``, linked by mutually authenticated TLS; the session
connects as the hosts file's driver). A party's private data can stay on its host: the
party loads it (``veil mpc party --data NAME=FILE``, or ``data=`` under the local runtime)
and :meth:`Session.share_data` shares it by name; only its shape leaves the party. Every
party counts its rounds and bytes; :meth:`Session.cost` reports them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._validation import check_choice, check_int, check_positive
from veil.errors import ConfigError, DataError, ProtocolError
from veil.mpc.fixedpoint import encode
from veil.mpc.runtime import HostsRuntime, LocalRuntime, ProcessRuntime, make_party
from veil.mpc.tensor import SharedTensor
from veil.mpc.triples import Dealer
from veil.mpc.wire import pack_arrays, pack_instruction
from veil.net.hosts import Hosts, load_hosts
from veil.net.mesh import Identity
from veil.random import check_rng

__all__ = ["Session", "Cost"]

log = logging.getLogger(__name__)

_FREE_BATCH = 256
_LTZ_LEVELS = 6


@dataclass(frozen=True)
class Cost:
    """Communication per party: ``rounds[i]``, bytes ``sent[i]`` and ``received[i]`` to and
    from other parties, bytes from the ``dealer[i]``; ``seconds`` of wall time (when
    measured)."""

    rounds: tuple[int, ...]
    sent: tuple[int, ...]
    received: tuple[int, ...]
    dealer: tuple[int, ...]
    seconds: float | None = field(default=None, compare=False)

    def __sub__(self, other: Cost) -> Cost:
        diff = [tuple(a - b for a, b in zip(mine, theirs)) for mine, theirs in
                ((self.rounds, other.rounds), (self.sent, other.sent),
                 (self.received, other.received), (self.dealer, other.dealer))]
        return Cost(*diff)

    def __str__(self) -> str:
        lines = ["party  rounds  sent bytes  received bytes  dealer bytes"]
        for i, row in enumerate(zip(self.rounds, self.sent, self.received, self.dealer)):
            lines.append(f"{i:>5}  {row[0]:>6}  {row[1]:>10}  {row[2]:>14}  {row[3]:>12}")
        if self.seconds is not None:
            lines.append(f"wall time: {self.seconds:.4f} s")
        return "\n".join(lines)


class Measurement:
    """What :meth:`Session.measure` fills in when its block ends."""

    cost: Cost | None = None


def _driver_hosts(hosts: Any, parties: int | None) -> Hosts:
    """The hosts file of a session across hosts, checked: it names a driver, and as many
    parties as asked (when asked)."""
    if hosts is None:
        raise ConfigError("runtime='hosts' needs hosts=PATH, the hosts file")
    hosts = hosts if isinstance(hosts, Hosts) else load_hosts(hosts)
    if hosts.driver is None:
        raise ConfigError(f"hosts file {hosts.path}: driver is missing; runtime='hosts' "
                          "connects as that identity")
    if parties is not None and parties != len(hosts):
        raise ConfigError(f"parties={parties!r} is not allowed: the hosts file "
                          f"{hosts.path} lists {len(hosts)} parties")
    return hosts


class Session:
    """A secure computation among ``parties`` parties (see the module docstring).

    Parameters: ``frac_bits`` fractional bits of the fixed-point format (values must stay
    below 2^(31 - frac_bits) in magnitude); ``runtime`` ``"local"`` or ``"process"``;
    ``correlation`` ``"dealer"`` or ``"paillier"`` (two parties only, with
    ``paillier_bits``; keys under 2048 bits need ``insecure_ok=True``); ``timeout`` seconds
    a party waits for another before reporting it (process and hosts runtimes); ``rng``
    randomness (None: secure; an int: a deterministic session for tests). ``parties``
    defaults to 3, or to the hosts file's parties. Runtime ``"hosts"``: ``hosts`` the hosts
    file (:mod:`veil.net.hosts`, with a ``driver``), ``cert`` / ``key`` the driver's
    certificate and key (default: beside the CA). ``data``: party -> {name: array} each
    party holds on its own (local runtime), shared with :meth:`share_data`.
    """

    def __init__(self, parties: int | None = None, *, frac_bits: int = 16,
                 runtime: str = "local", correlation: str = "dealer", timeout: float = 30.0,
                 paillier_bits: int = 2048, insecure_ok: bool = False, rng=None,
                 hosts: Any = None, cert: Any = None, key: Any = None,
                 data: dict[int, dict[str, Any]] | None = None) -> None:
        self.runtime = check_choice(runtime, "runtime", ("local", "process", "hosts"))
        if self.runtime == "hosts":
            hosts = _driver_hosts(hosts, parties)
            parties = len(hosts)
        elif hosts is not None:
            raise ConfigError(f"hosts={hosts!r} is not allowed with runtime={runtime!r}: the "
                              "hosts file is for runtime='hosts'")
        self.parties = check_int(3 if parties is None else parties, "parties", low=2, high=64)
        if data is not None and self.runtime != "local":
            raise ConfigError(f"data= is not allowed with runtime={runtime!r}: it hands "
                              "arrays to parties in this process (runtime='local'); on "
                              "other hosts each party loads its own (veil mpc party --data)")
        data = dict(data or {})
        for owner in data:
            self._check_party(owner, "data")
        self.frac_bits = check_int(frac_bits, "frac_bits", low=1, high=28)
        self.correlation = check_choice(correlation, "correlation", ("dealer", "paillier"))
        self.timeout = check_positive(timeout, "timeout")
        if self.correlation == "paillier":
            if self.parties != 2:
                raise ConfigError(f"correlation='paillier' is not allowed with parties="
                                  f"{parties}: the dealer-free option is for two parties")
            from veil.crypto.paillier import check_key_bits

            check_key_bits(paillier_bits, insecure_ok)
        rng = check_rng(rng)
        self.id = rng.bytes(16)
        self._dealer = Dealer(self.parties, rng=rng) if self.correlation == "dealer" else None
        configs = []
        for i in range(self.parties):
            configs.append({
                "correlation": self.correlation,
                "seed": self._dealer.seeds[i].hex() if self._dealer else None,
                "rng": rng.bytes(32).hex() if rng.seeded else None,
                "paillier_bits": paillier_bits, "insecure_ok": bool(insecure_ok)})
        if self.runtime == "local":
            self._runtime = LocalRuntime([make_party(i, self.parties, self.id, configs[i],
                                                     data.get(i))
                                          for i in range(self.parties)])
        elif self.runtime == "process":
            self._runtime = ProcessRuntime(self.parties, self.id, configs, self.timeout)
        else:
            self._runtime = HostsRuntime(hosts, Identity(hosts, hosts.driver, cert, key),
                                         self.id, configs, self.timeout)
        self._seq = 0
        self._next_key = 0
        self._garbage: list[int] = []
        self._closed = False
        if self.correlation == "paillier":
            self._issue({"op": "setup"})
        log.info("MPC session %s: %d parties, %s runtime, %s correlation", self.id.hex()[:8],
                 self.parties, self.runtime, self.correlation)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the parties (and their processes); the session cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            self._runtime.close()

    def __repr__(self) -> str:
        return (f"Session(parties={self.parties}, frac_bits={self.frac_bits}, "
                f"runtime={self.runtime!r}, correlation={self.correlation!r}, "
                f"id={self.id.hex()[:8]})")

    # -- inputs ---------------------------------------------------------------------------
    def _check_party(self, index: Any, name: str) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or \
                not 0 <= index < self.parties:
            raise ConfigError(f"{name}={index!r} is not allowed: parties are numbered 0.."
                              f"{self.parties - 1}")
        return int(index)

    def _frac_of(self, arr: np.ndarray) -> int:
        return 0 if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer) else \
            self.frac_bits

    def share(self, value: Any, owner: int) -> SharedTensor:
        """Secret-share party ``owner``'s private array among all parties.

        Floats become fixed-point numbers, integers and booleans stay integers. ``value`` is
        handed to the owner only (in the process runtime it travels to the owner's process).
        """
        owner = self._check_party(owner, "owner")
        arr = np.asarray(value)
        frac = self._frac_of(arr)
        encoded = encode(arr, frac, "value")
        return self._apply("input", [], arr.shape, frac, owner=owner, shape=list(arr.shape),
                           payloads={owner: [encoded]})

    def share_data(self, name: str, owner: int) -> SharedTensor:
        """Secret-share the array ``name`` that party ``owner`` holds on its own (loaded on
        its host): the values never pass through this session; only their shape (and
        whether they are integers) is asked of the owner first."""
        owner = self._check_party(owner, "owner")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"name={name!r} is not allowed: the name of a party's data")
        shape_arr, real = self._issue({"op": "describe", "owner": owner, "name": name},
                                      want=[owner])[owner]
        shape = tuple(int(d) for d in shape_arr)
        frac = self.frac_bits if int(real[0]) else 0
        return self._apply("input", [], shape, frac, owner=owner, shape=list(shape),
                           name=name, frac_bits=frac)

    def public(self, value: Any) -> SharedTensor:
        """A public array as a (trivially) shared tensor: party 0 holds it, the others 0."""
        arr = np.asarray(value)
        frac = self._frac_of(arr)
        return self._apply("public", [], arr.shape, frac, shape=list(arr.shape),
                           payloads={0: [encode(arr, frac, "value")]})

    # -- cost -----------------------------------------------------------------------------
    def cost(self) -> Cost:
        """Rounds and bytes so far, per party."""
        results = self._issue({"op": "stats"}, want=range(self.parties))
        rows = [results[i][0].astype(np.int64).tolist() for i in range(self.parties)]
        return Cost(*(tuple(r[k] for r in rows) for k in range(4)))

    @contextmanager
    def measure(self) -> Iterator[Measurement]:
        """``with s.measure() as m: ...`` then ``m.cost``: rounds, bytes and time of the block."""
        m = Measurement()
        before = self.cost()
        start = time.perf_counter()
        yield m
        seconds = time.perf_counter() - start
        diff = self.cost() - before
        m.cost = Cost(diff.rounds, diff.sent, diff.received, diff.dealer, seconds)

    # -- the instruction stream -------------------------------------------------------------
    def _release(self, key: int) -> None:
        if not self._closed:
            self._garbage.append(key)

    def _issue(self, op: dict, payloads: dict[int, list[np.ndarray]] | None = None,
               want: Sequence[int] = ()) -> dict[int, list[np.ndarray]]:
        if self._closed:
            raise ProtocolError("this session is closed")
        if len(self._garbage) >= _FREE_BATCH:
            garbage, self._garbage = self._garbage, []
            self._issue({"op": "free", "args": garbage})
        self._seq += 1
        items = op.get("corr")
        dealer = [b""] * self.parties
        if items and self._dealer is not None:
            dealer[0] = pack_arrays(self._dealer.deal(self._seq, items))
        if payloads:
            instructions = [pack_instruction(self._seq, op, payloads.get(i, ()))
                            for i in range(self.parties)]
        else:
            instructions = [pack_instruction(self._seq, op)] * self.parties
        try:
            return self._runtime.execute(instructions, dealer, list(want))
        except BaseException:
            self.close()
            raise

    def _apply(self, op: str, inputs: Sequence[SharedTensor], out_shape: tuple, frac: int, *,
               corr: list | None = None, public: np.ndarray | None = None,
               payloads: dict[int, list[np.ndarray]] | None = None,
               **params: Any) -> SharedTensor:
        """Issue ``op`` on ``inputs`` and return the handle of its result."""
        for t in inputs:
            if t.session is not self:
                raise ProtocolError(f"{t!r} belongs to another session than {self!r}")
        if corr and self.correlation == "paillier" and any(
                item[0] == "matmul" and max(len(item[1]), len(item[2])) > 2 for item in corr):
            raise ConfigError("correlation='paillier' makes matrix triples for 1-d and 2-d "
                              "operands only; use the dealer for batched matmul")
        key = self._next_key
        self._next_key += 1
        instr = {"op": op, "out": key, "args": [t.key for t in inputs], **params}
        if corr:
            instr["corr"] = corr
        if public is not None:
            payloads = {0: [public]} if op == "linear" else \
                {i: [public] for i in range(self.parties)}
        self._issue(instr, payloads)
        return SharedTensor(self, key, out_shape, frac)

    # -- protocols the tensors call ---------------------------------------------------------
    def _needs_dealer(self, what: str) -> None:
        if self._dealer is None:
            raise ConfigError(f"{what} is not available with correlation="
                              f"{self.correlation!r}: it needs the trusted dealer's "
                              "correlated randomness (correlation='dealer')")

    def _truncate(self, t: SharedTensor, bits: int) -> SharedTensor:
        # With the dealer: the exact-wrap truncation (1 round); without (two parties,
        # Paillier triples): SecureML's local rule (0 rounds), see veil.mpc.party.
        corr = [["trunc", list(t.shape), bits]] if self._dealer is not None else None
        return self._apply("trunc", [t], t.shape, t.frac - bits, bits=bits, corr=corr)

    def _ltz(self, t: SharedTensor) -> SharedTensor:
        self._needs_dealer("secure comparison")
        s = list(t.shape)
        corr = [["edabit", s]] + [["and", [2, *s]]] * (_LTZ_LEVELS - 1) + [["and", s],
                                                                             ["dabit", s]]
        return self._apply("ltz", [t], t.shape, 0, corr=corr)

    def _reveal(self, t: SharedTensor, to: int | None) -> np.ndarray:
        if not isinstance(t, SharedTensor) or t.session is not self:
            raise ProtocolError("reveal() of a tensor from another session")
        if to is not None:
            to = self._check_party(to, "to")
        results = self._issue({"op": "reveal", "args": [t.key], "to": to},
                              want=[0 if to is None else to])
        value = results[0 if to is None else to][0]
        if value.shape != t.shape:
            raise DataError(f"revealed shape {value.shape} differs from {t.shape}")
        return value
