"""Where client work runs: :func:`serve` one request, and :class:`Workers`, the persistent
worker processes of ``LocalRuntime(faults, workers=k)`` for k > 1.

A federation's clients are independent parties; the worker processes let a simulation
on one machine run them on all its cores, as a deployment runs them on their own machines:

* **Start** -- the k processes are forked when the runtime is made (before the caller
  starts threads, e.g. a progress bar, whose locks the children would inherit); each
  waits for requests on its pipe and exits when its parent does.
* **Placement** -- a client is pickled to a worker the first time the runtime sees it
  and lives there until the runtime closes: its state (keys, fixed-base tables, noise
  pool, round counters) stays in the worker. A new object under a known id replaces the
  old one. Each client is pickled on its own, so clients in one worker share no object.
  Clients are dealt to the least loaded worker in the order of their ids.
* **Requests** -- a stage's requests travel as the protocol's bytes
  (:meth:`veil.fl.messages.Message.to_bytes`) with each delivery's seed, to every worker
  at once. A worker serves its clients concurrently, one thread per client (at most
  :data:`THREADS`; one client's requests in order): big-integer and numpy work release
  the interpreter lock, so a worker whose clients have more to do than another's uses
  the cores the other leaves idle (in the hybrid protocol the aggregator picks which
  parties decrypt, at random). Answers return as bytes; the runtime puts them back in
  sending order, so every random draw happens as in one process and results are
  identical to the in-process runtime's under a seed. A client's CPU time is then that
  of the thread that served it (``time.thread_time``).
* **Failures** -- a worker that exits, or does not answer within ``timeout`` seconds, is a
  :class:`WorkerLost` (a :class:`~veil.errors.ProtocolError`) naming the clients it held;
  every worker is then stopped, and the runtime refuses further work. An exception raised
  by client code in a worker is raised again here, with the worker's traceback as a note.
* **Close** -- :meth:`Workers.close` stops every worker (and kills one that does not stop);
  the runtime calls it on ``close()``, when leaving its ``with`` block, when it is
  garbage-collected, and at interpreter exit.

Functions given to :meth:`Workers.call` travel by reference: a module-level function or
a method (``HybridClient.precompute``), never a lambda.

Trust: the pipes join the runtime to processes it forked itself, on one machine, in one
trust domain; pickle (which ``multiprocessing`` connections use anyway) carries Python
objects between them and never bytes from another party. What the parties say to each
other inside a request or an answer is the protocol's bytes, parsed and validated as in a
deployment.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from multiprocessing.connection import Connection, wait
from typing import Any

from veil.errors import ConfigError, ProtocolError, VeilError
from veil.fl.messages import Message
from veil.fl.protocol import ClientProtocol
from veil.random import Generator

__all__ = ["WorkerLost", "Workers", "serve"]

log = logging.getLogger(__name__)

#: (answers as bytes, CPU seconds, why the client did not answer or None)
Served = tuple[list[bytes], float, str | None]
#: the most clients a worker serves at the same time
THREADS = 64


def serve(client: ClientProtocol, data: bytes, seed: bytes, kind: str,
          clock: Callable[[], float] = time.process_time) -> Served:
    """Run one request (``data``, a serialized message) on ``client`` with randomness
    from ``seed``: its answers as bytes, the CPU seconds it took, and why it gave none
    (a :class:`~veil.errors.VeilError` from the client: it refused or failed)."""
    rng = Generator() if kind == "secure" else Generator(
        seed, simulate_noise=kind == "simulation")
    start = clock()
    try:
        answers = client.handle(Message.from_bytes(data), rng)
        out, error = [m.to_bytes() for m in answers], None
    except VeilError as exc:
        out, error = [], f"{type(exc).__name__}: {exc}"
    return out, clock() - start, error


class WorkerLost(ProtocolError):
    """A worker process died or stopped answering; ``clients``: the ids it held."""

    def __init__(self, message: str, clients: Sequence[int]) -> None:
        super().__init__(message)
        self.clients = tuple(clients)


# -- the worker process ------------------------------------------------------------------
def _main(conn: Connection, inherited: list[Connection]) -> None:
    for other in inherited:     # the parent's ends of every pipe: only the parent holds them
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    parent = os.getppid()
    clients: dict[int, ClientProtocol] = {}
    while True:
        while not conn.poll(1.0):
            if os.getppid() != parent:
                return
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            return
        try:
            if kind == "ship":
                clients.update((cid, pickle.loads(blob))  # noqa: S301 (our own fork)
                               for cid, blob in payload.items())
                reply: Any = None
            elif kind == "deliver":
                reply = _serve_batch(clients, *payload)
            else:
                fn, args, cids = payload
                reply = {cid: fn(clients[cid], *args) for cid in cids}
            conn.send(("ok", reply))       # pickled whole before anything is written
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            conn.send(("raise", _portable(exc), traceback.format_exc()))


def _serve_batch(clients: dict[int, ClientProtocol], batch: list[tuple[int, bytes, bytes]],
                 kind: str) -> list[Served]:
    """Serve ``batch`` (one thread per client, each client's requests in order)."""
    out: list[Any] = [None] * len(batch)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (cid, _, _) in enumerate(batch):
        groups[cid].append(i)

    def run(indices: list[int]) -> None:
        for i in indices:
            cid, data, seed = batch[i]
            out[i] = serve(clients[cid], data, seed, kind, time.thread_time)

    with ThreadPoolExecutor(min(len(groups), THREADS) or 1,
                            thread_name_prefix="veil-fl-client") as threads:
        futures = [threads.submit(run, indices) for indices in groups.values()]
        wait_all(futures)
    for future in futures:
        future.result()       # re-raises the first failure (by client order) here
    return out


def _portable(exc: BaseException) -> tuple[bytes | None, str]:
    """The exception pickled (None when it cannot be), and its one-line description."""
    try:
        blob: bytes | None = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - unpicklable: the description goes instead
        blob = None
    return blob, f"{type(exc).__name__}: {exc}"


def _rebuilt(portable: tuple[bytes | None, str]) -> BaseException:
    blob, text = portable
    if blob is not None:
        try:
            return pickle.loads(blob)  # noqa: S301 (a worker this runtime forked)
        except Exception:  # noqa: BLE001 - e.g. an exception class whose __init__ differs
            pass
    return RuntimeError(text)


# -- the parent's side -----------------------------------------------------------------------
class Workers:
    """``count`` persistent worker processes holding clients (see the module docstring)."""

    def __init__(self, count: int, timeout: float) -> None:
        if "fork" not in multiprocessing.get_all_start_methods():
            raise ConfigError(f"workers={count} is not allowed here: worker processes are "
                              "forked, which this platform does not offer; use workers=1")
        context = multiprocessing.get_context("fork")
        self.timeout = float(timeout)
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for index in range(count):
            mine, theirs = context.Pipe()
            self._conns.append(mine)
            proc = context.Process(target=_main, args=(theirs, list(self._conns)),
                                   name=f"veil-fl-worker-{index}", daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)
        self._held: dict[int, ClientProtocol] = {}   # id -> the object shipped
        self._home: dict[int, int] = {}              # id -> worker index
        self._failure: str | None = None

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (empty once closed)."""
        return [p.pid for p in self._procs]

    def holding(self, worker: int) -> list[int]:
        """The ids of the clients worker ``worker`` holds."""
        return sorted(c for c, w in self._home.items() if w == worker)

    # -- placement ----------------------------------------------------------------------
    def place(self, clients: Mapping[int, ClientProtocol]) -> None:
        """Ship every client not yet held (or replaced by a new object) to a worker."""
        self._check_running()
        load = Counter(self._home.values())
        shipments: dict[int, dict[int, bytes]] = defaultdict(dict)
        for cid in sorted(clients):
            client = clients[cid]
            if self._held.get(cid) is client:
                continue
            home = self._home.get(cid)
            if home is None:
                home = min(range(len(self._conns)), key=lambda w: (load[w], w))
                load[home] += 1
            try:
                shipments[home][cid] = pickle.dumps(client)
            except (TypeError, AttributeError, pickle.PicklingError) as exc:
                raise ConfigError(f"client {cid} ({type(client).__name__}) cannot be sent to "
                                  f"a worker process: {exc}; run it with workers=1") from None
            self._home[cid] = home
        if shipments:
            self._exchange({w: ("ship", blobs) for w, blobs in shipments.items()})
            for blobs in shipments.values():
                self._held.update((cid, clients[cid]) for cid in blobs)

    # -- work ------------------------------------------------------------------------------
    def deliver(self, deliveries: Sequence[tuple[int, bytes, bytes]],
                kind: str) -> list[Served]:
        """Serve ``(client id, request bytes, seed)`` deliveries; results in their order."""
        batches: dict[int, list[tuple[int, bytes, bytes]]] = defaultdict(list)
        for delivery in deliveries:
            batches[self._home[delivery[0]]].append(delivery)
        replies = self._exchange({w: ("deliver", (batch, kind))
                                  for w, batch in batches.items()})
        results = {w: iter(reply) for w, reply in replies.items()}
        return [next(results[self._home[cid]]) for cid, _, _ in deliveries]

    def call(self, cids: Sequence[int], fn: Callable[..., Any],
             args: tuple[Any, ...]) -> dict[int, Any]:
        """``fn(client, *args)`` for each client in ``cids``, in its worker."""
        groups: dict[int, list[int]] = defaultdict(list)
        for cid in cids:
            groups[self._home[cid]].append(cid)
        replies = self._exchange({w: ("call", (fn, args, group)) for w, group in groups.items()})
        return {cid: replies[self._home[cid]][cid] for cid in cids}

    def _exchange(self, requests: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """Send each worker its request, then collect every reply (or fail)."""
        self._check_running()
        for w, request in requests.items():
            try:
                self._conns[w].send(request)
            except (OSError, ValueError):
                self._lost([w], "cannot be reached")
        pending, replies, errors = set(requests), {}, {}
        deadline = time.monotonic() + self.timeout
        while pending:
            waiting = {self._conns[w]: w for w in pending}
            waiting.update({self._procs[w].sentinel: w for w in pending})
            ready = wait(list(waiting), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self._lost(sorted(pending), f"did not answer within {self.timeout:g} s")
            for w in sorted({waiting[obj] for obj in ready} & pending):
                conn = self._conns[w]
                try:
                    status, *body = conn.recv() if conn.poll() else (None,)
                except (EOFError, OSError, pickle.UnpicklingError):
                    status = None
                if status is None:
                    code = self._procs[w].exitcode
                    self._lost([w], "exited" + ("" if code is None else f" (code {code})"))
                pending.discard(w)
                if status == "ok":
                    replies[w] = body[0]
                else:
                    errors[w] = body
        if errors:
            w = min(errors)
            exc = _rebuilt(errors[w][0])
            exc.add_note(f"raised in veil fl worker {w} (clients {self.holding(w)}):\n"
                         f"{errors[w][1]}")
            raise exc
        return replies

    def _check_running(self) -> None:
        if self._failure is not None:
            raise WorkerLost(f"the runtime's worker processes are gone ({self._failure}); "
                             "start a new runtime", sorted(self._home))

    def _lost(self, workers: list[int], why: str) -> None:
        held = sorted(c for w in workers for c in self.holding(w))
        names = ", ".join(f"{w} (pid {self._procs[w].pid})" for w in workers)
        message = (f"veil fl worker process {names} holding client(s) "
                   f"{', '.join(map(str, held))} {why}")
        log.error(message)
        for w in workers:
            self._procs[w].kill()
        self.close()
        self._failure = message
        raise WorkerLost(message, held)

    def close(self) -> None:
        """Stop every worker (kill any that has not stopped after 5 s); idempotent."""
        for conn in self._conns:
            try:
                conn.send(("stop", None))
            except (OSError, ValueError):
                pass
        for proc in self._procs:
            proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
        self._failure = self._failure or "closed"
