"""The local runtime: runs a federated round in one process, with simulated faults.

:class:`LocalRuntime` moves the messages of one round between a
:class:`~veil.fl.protocol.ServerRound` and the clients' :class:`~veil.fl.protocol.ClientProtocol`
objects. Every message is serialized to bytes and parsed again on the other side (so the
wire format is exercised and every byte is counted), and faults are simulated from
:class:`Faults`, deterministically under a seeded ``rng``:

* **dropout** — a sampled client goes offline at some stage of the round (uniformly chosen
  among the protocol's stages, or ``dropout_stage``) and answers nothing from then on;
  each with probability ``dropout``, or (``dropout_exact=True``) exactly
  ``round(dropout * m)`` of the m sampled clients, chosen uniformly;
* **crash** — a client goes offline at some stage and never comes back in later rounds;
* **stragglers and the deadline** — each answer has a simulated latency, exponential with
  mean ``latency`` (a straggler's is ``slowdown`` times longer); a stage closes
  ``deadline`` simulated seconds after its requests, and later answers reach the server
  after that (it must reject them as late or replayed);
* **duplicates** — an answer is delivered twice;
* **reordering** — answers reach the server in order of arrival rather than sending order;
* **replays** — an answer from an earlier round is sent to the server again.

Time is simulated (no sleeping), so runs are fast and reproducible; CPU time is measured.

With ``workers=k > 1`` the clients live in k persistent worker processes
(:mod:`veil.fl.runtime.workers`): each is pickled to its worker once, the first time the runtime
sees it (in :meth:`LocalRuntime.run_round` or :meth:`LocalRuntime.call`), and keeps its
state there until :meth:`LocalRuntime.close`; requests and answers travel between server
and workers as the protocol's bytes, and the workers serve their clients in parallel.
Faults are simulated here, and randomness is derived per delivery from the round's
``rng`` in a fixed order, so results do not depend on ``workers``. From then on the
objects in the caller's ``clients`` mapping keep the state they were shipped with: reach
the live clients with :meth:`LocalRuntime.call`. A worker that dies or hangs (no answer
within ``timeout`` seconds) raises :class:`~veil.fl.runtime.workers.WorkerLost`, a ProtocolError
naming the clients it held.
"""

from __future__ import annotations

import logging
import math
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from veil._validation import check_int, check_positive, check_probability
from veil.errors import ConfigError, ProtocolError
from veil.fl.messages import SERVER, Message
from veil.fl.protocol import ClientProtocol, RoundResult, ServerRound
from veil.fl.runtime.workers import Served, WorkerLost, Workers, serve
from veil.random import Generator, RngLike, check_rng

__all__ = ["Faults", "LocalRuntime", "RoundReport", "Traffic"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Faults:
    """Faults to simulate (probabilities are per client and round unless stated)."""

    dropout: float = 0.0
    dropout_stage: str | None = None
    dropout_exact: bool = False
    crash: float = 0.0
    straggler: float = 0.0
    latency: float = 0.01
    slowdown: float = 1000.0
    deadline: float = 1.0
    duplicate: float = 0.0  # per answer
    reorder: bool = True
    replay: float = 0.0     # per stage: one earlier-round answer is replayed

    def __post_init__(self) -> None:
        for name in ("dropout", "crash", "straggler", "duplicate", "replay"):
            check_probability(getattr(self, name), name)
        for name in ("latency", "slowdown", "deadline"):
            check_positive(getattr(self, name), name)
        if self.dropout_stage is not None and not isinstance(self.dropout_stage, str):
            raise ConfigError(f"dropout_stage={self.dropout_stage!r} is not allowed: expected "
                              "a stage name or None")


@dataclass(frozen=True)
class Traffic:
    """One message on the wire."""

    round: int
    stage: str
    sender: int
    recipient: int
    nbytes: int


@dataclass
class RoundReport:
    """What happened in one round: the result (or why it aborted), traffic, time, faults."""

    round: int
    result: RoundResult | None = None
    error: str | None = None
    messages: list[Traffic] = field(default_factory=list)
    client_cpu: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    server_cpu: float = 0.0
    wall_time: float = 0.0
    dropped: dict[int, str] = field(default_factory=dict)
    crashed: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    late: int = 0
    duplicates: int = 0
    replays: int = 0
    server_inbox: list[bytes] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.result is not None

    @property
    def bytes_up(self) -> int:
        """Bytes sent by clients to the server."""
        return sum(m.nbytes for m in self.messages if m.recipient == SERVER)

    @property
    def bytes_down(self) -> int:
        """Bytes sent by the server to clients."""
        return sum(m.nbytes for m in self.messages if m.sender == SERVER)

    def client_bytes(self) -> dict[int, tuple[int, int]]:
        """Per client: (bytes sent, bytes received)."""
        out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for m in self.messages:
            if m.sender == SERVER:
                out[m.recipient][1] += m.nbytes
            else:
                out[m.sender][0] += m.nbytes
        return {c: (s, r) for c, (s, r) in sorted(out.items())}

    def stage_bytes(self) -> dict[str, tuple[int, int]]:
        """Per stage: (bytes up, bytes down)."""
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for m in self.messages:
            out[m.stage][0 if m.recipient == SERVER else 1] += m.nbytes
        return {s: (u, d) for s, (u, d) in out.items()}


class LocalRuntime:
    """Runs rounds here, simulating :class:`Faults`; client work in this process, or in
    ``workers`` persistent worker processes (see the module docstring).

    ``record=True`` keeps every message the server received (as bytes) in the report, for
    inspection. ``timeout``: seconds a worker process may take to answer one stage's
    requests before it is declared hung. With ``workers > 1`` use it as a context manager
    (or call :meth:`close`): the processes are started now and stopped on exit.
    """

    #: whether the parties live outside this process's reach (on their own nodes)
    remote = False

    def __init__(self, faults: Faults | None = None, *, workers: int = 1,
                 record: bool = False, timeout: float = 600.0) -> None:
        self.faults = faults or Faults()
        if not isinstance(self.faults, Faults):
            raise ConfigError(f"faults={faults!r} is not allowed: expected a Faults")
        self.workers = check_int(workers, "workers", low=1)
        self.timeout = check_positive(timeout, "timeout")
        self.record = bool(record)
        self.crashed: set[int] = set()
        self._late: list[bytes] = []
        self._previous: list[bytes] = []
        self._processes: Workers | None = None
        if self.workers > 1:
            self._processes = Workers(self.workers, self.timeout)
            self._stop = weakref.finalize(self, self._processes.close)  # also at exit

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (if any); the runtime then refuses further work."""
        if self._processes is not None:
            self._stop()

    @property
    def pids(self) -> list[int]:
        """Process ids of the worker processes (empty without, or once closed)."""
        return self._processes.pids if self._processes is not None else []

    def call(self, clients: Mapping[int, ClientProtocol], fn: Callable[..., Any],
             *args: Any) -> dict[int, Any]:
        """``fn(client, *args)`` for every client of ``clients`` where the client lives:
        here, or in its worker process (shipped there first if new; ``fn`` -- a
        module-level function or a method -- ``args`` and the results are pickled).
        Returns the results by client id. E.g. fill every hybrid party's noise pool
        before the rounds: ``runtime.call(clients, HybridClient.precompute, count)``."""
        if self._processes is None:
            return {cid: fn(clients[cid], *args) for cid in sorted(clients)}
        self._processes.place(clients)
        return self._processes.call(sorted(clients), fn, args)

    def state_dict(self) -> dict[str, Any]:
        """What persists across rounds, for checkpoints: the crashed clients and the
        messages still on the wire (late answers, candidates for replay)."""
        return {"crashed": sorted(self.crashed), "late": list(self._late),
                "previous": list(self._previous)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.crashed = set(int(c) for c in state.get("crashed", []))
        self._late = [bytes(b) for b in state.get("late", [])]
        self._previous = [bytes(b) for b in state.get("previous", [])]

    # -- one round ------------------------------------------------------------------------
    def run_round(self, server: ServerRound, clients: dict[int, ClientProtocol],
                  rng: RngLike = None) -> RoundReport:
        """Run ``server``'s round to completion or abort; returns the report.

        ``clients`` maps ids to client objects (with ``workers > 1``, those not yet in a
        worker are shipped now). A ProtocolError from the server (the round cannot
        complete) is caught: the report then has ``error`` set and no result. A lost
        worker process (:class:`~veil.fl.runtime.workers.WorkerLost`) is raised.
        """
        rng = check_rng(rng)
        report = RoundReport(round=server.round)
        began = time.perf_counter()
        if self._processes is not None:
            self._processes.place(clients)
        offline = self._plan(server, rng, report)
        stages = server.stages
        this_round: list[bytes] = []
        try:
            requests = self._timed(report, server.start)
            while True:
                arrivals, late = self._send(requests, clients, offline, stages, rng, report)
                self._receive(server, arrivals, rng, report)
                self._late = late  # they reach the server during the next stage (or round)
                this_round.extend(data for _, data in arrivals)
                requests = self._timed(report, server.close_stage)
                if server.done:
                    break
            report.result = server.result
        except WorkerLost:
            raise
        except ProtocolError as exc:
            report.error = str(exc)
            log.warning("round %d aborted: %s", server.round, exc)
        self._previous = this_round or self._previous
        report.wall_time = time.perf_counter() - began
        return report

    def _plan(self, server: ServerRound, rng: Generator,
              report: RoundReport) -> dict[int, int]:
        """For each sampled client, the stage index from which it is offline (if any)."""
        f, stages = self.faults, server.stages
        if f.dropout_stage is not None and f.dropout_stage not in stages:
            raise ConfigError(f"dropout_stage={f.dropout_stage!r} is not a stage of the "
                              f"{server.protocol} protocol ({', '.join(stages)})")
        offline: dict[int, int] = {}
        m = len(server.clients)
        chosen = set(rng.permutation(m)[:int(math.floor(f.dropout * m + 0.5))].tolist())
        for index, c in enumerate(server.clients):
            crash, drop = rng.random(2)
            at = int(rng.integers(0, len(stages)))
            drops = index in chosen if f.dropout_exact else drop < f.dropout
            if c in self.crashed:
                offline[c] = 0
            elif crash < f.crash:
                offline[c] = at
                self.crashed.add(c)
                report.crashed.append(c)
            elif drops:
                offline[c] = stages.index(f.dropout_stage) if f.dropout_stage else at
            if c in offline:
                report.dropped[c] = stages[offline[c]]
        return offline

    def _timed(self, report: RoundReport, fn: Any, *args: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args)
        finally:
            report.server_cpu += time.process_time() - start

    def _send(self, requests: list[Message], clients: dict[int, ClientProtocol],
              offline: dict[int, int], stages: tuple[str, ...], rng: Generator,
              report: RoundReport) -> tuple[list[tuple[float, bytes]], list[bytes]]:
        """Deliver the requests; the answers in time (with their simulated arrival times)
        and the late ones."""
        deliveries = []
        for msg in requests:
            data = self._timed(report, msg.to_bytes)
            report.messages.append(Traffic(msg.round, msg.stage, SERVER, msg.recipient,
                                           len(data)))
            if msg.recipient in clients and offline.get(msg.recipient, math.inf) > \
                    stages.index(msg.stage):
                deliveries.append((msg.recipient, data, rng.bytes(32)))
        f = self.faults
        arrivals: list[tuple[float, bytes]] = []
        late: list[bytes] = []
        served = self._execute(deliveries, clients, rng.kind)
        for (cid, _, _), (answers, cpu, error) in zip(deliveries, served):
            report.client_cpu[cid] += cpu
            if error is not None:
                report.rejected.append((cid, error))
                log.info("client %d did not answer: %s", cid, error)
            for data in answers:
                msg = Message.from_bytes(data)
                report.messages.append(Traffic(msg.round, msg.stage, cid, SERVER, len(data)))
                slow, dup, delay, extra = rng.random(4)
                arrival = -f.latency * math.log1p(-delay)
                if slow < f.straggler:
                    arrival *= f.slowdown
                if arrival > f.deadline:
                    report.late += 1
                    late.append(data)
                    continue
                arrivals.append((arrival, data))
                if dup < f.duplicate:
                    report.duplicates += 1
                    arrivals.append((arrival - f.latency * math.log1p(-extra), data))
        if f.reorder:
            arrivals.sort(key=lambda a: a[0])
        return arrivals, late

    def _execute(self, deliveries: list[tuple[int, bytes, bytes]],
                 clients: dict[int, ClientProtocol], kind: str) -> list[Served]:
        """Each delivery's (answers, CPU seconds, error), in the order of ``deliveries``."""
        if self._processes is None:
            return [serve(clients[cid], data, seed, kind) for cid, data, seed in deliveries]
        return self._processes.deliver(deliveries, kind)

    def _receive(self, server: ServerRound, arrivals: list[tuple[float, bytes]],
                 rng: Generator, report: RoundReport) -> None:
        """Hand the answers (after late ones from before, and replays) to the server."""
        inbox = list(self._late)
        replay = rng.random() < self.faults.replay  # drawn every stage: runs stay in step
        if replay and self._previous:
            report.replays += 1
            inbox.append(self._previous[int(rng.integers(0, len(self._previous)))])
        inbox.extend(data for _, data in arrivals)
        for data in inbox:
            if self.record:
                report.server_inbox.append(data)
            try:
                self._timed(report, lambda d=data: server.receive(Message.from_bytes(d)))
            except ProtocolError as exc:
                report.rejected.append((_sender(data), str(exc)))
                log.info("server rejected a message: %s", exc)


def _sender(data: bytes) -> int:
    try:
        return Message.from_bytes(data).sender
    except ProtocolError:
        return SERVER
