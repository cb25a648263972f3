"""Runtimes that move the parties' messages: in one process, one process per party, or
one party per host.

All run the same :class:`~veil.mpc.party.Party` state machines on the same instruction
stream (bytes):

* :class:`LocalRuntime` — every party is an object in this process; messages are delivered
  in a fixed order, so a session is deterministic under a seed.
* :class:`ProcessRuntime` — every party is its own operating-system process
  (``python -m veil.mpc._worker``); the parties are connected pairwise by TCP sockets on the
  loopback interface and to the session (which sends instructions and the dealer's
  payloads, and receives results) by one more socket each. Instructions are pipelined: the
  session only waits when it needs a result. A party that receives nothing for ``timeout``
  seconds while it waits for another party reports it, and the session raises
  :class:`PartyTimeout` naming the silent party instead of hanging.
* :class:`HostsRuntime` — every party is a process on its own host (:func:`serve_party`,
  ``veil mpc party --hosts FILE --party I``), holding its own data; the parties and the
  session (the hosts file's *driver*) are linked pairwise by mutually authenticated TLS
  (:mod:`veil.net.mesh`, whose threat model covers the start-up). The party processes
  run the same serving loop (:func:`_serve`) as under :class:`ProcessRuntime`.

Frames on every socket (:mod:`veil.net.links`): ``length:u32 kind:u8 payload``. Secrets
(the dealer's seeds) travel over the sockets, never on a command line.

Threat model of the start-up. Another process on the host may connect to any listening
port first and claim to be a party. Every connection is therefore authenticated before
anything secret is sent:

* The session gives each party process its own 32-byte key ``a_i`` (CSPRNG) through the
  process's standard input, never the command line. The party's hello to the session
  carries a fresh nonce and ``HMAC-SHA256(a_i, "veil-mpc/hello" | i | port | nonce)``;
  the session sends party i its configuration (with the dealer's seed) only after checking
  that tag, and tags the configuration with ``a_i`` and the nonce so the party knows it came
  from the session. A connection with a wrong or missing tag is dropped and the session
  keeps waiting for the real party.
* The configuration carries one fresh key ``k_ij`` per pair of parties. The accepting party
  sends a fresh 16-byte challenge; the connecting party j answers with
  ``HMAC-SHA256(k_ij, "veil-mpc/peer" | challenge | j | i)``. A wrong claim is dropped.

After the handshake the sockets carry plaintext frames: the parties are honest-but-curious
and the host's loopback is trusted not to be sniffed or hijacked (that needs root on the
host). Across machines use :class:`HostsRuntime` (TLS with mutual authentication).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil.errors import ConfigError, ProtocolError
from veil.mpc.party import DRIVER, Party
from veil.mpc.wire import unpack_arrays
from veil.net.hosts import Hosts
from veil.net.links import EOF as _EOF
from veil.net.links import Net as _Net
from veil.net.links import PartyTimeout, recv_frame, send_frame
from veil.net.mesh import DRIVER as DRIVER_LINK
from veil.net.mesh import Identity, connect
from veil.random import secure_rng

__all__ = ["LocalRuntime", "ProcessRuntime", "HostsRuntime", "PartyTimeout", "make_party",
           "serve_party"]

_HELLO, _PORTS, _READY, _INSTR, _MSG, _RESULT, _ERROR, _STOP, _CONFIG = range(9)
_DRIVER_KEY = DRIVER_LINK
_STARTUP_S = 60.0
_HANDSHAKE_S = 5.0         # one connection's hello, before it is dropped
_NONCE = 16
_KEY = 32
_HELLO_BODY = struct.Struct("<HH")


def make_party(index: int, parties: int, session_id: bytes, config: dict,
               data: dict[str, np.ndarray] | None = None) -> Party:
    """A party from its configuration (shared by the runtimes) and its own ``data``."""
    from veil.mpc.triples import DealerShares, PaillierTriples

    rng = bytes.fromhex(config["rng"]) if config.get("rng") else None
    if config["correlation"] == "dealer":
        correlation = DealerShares(index, bytes.fromhex(config["seed"]))
    else:
        correlation = PaillierTriples(index, bits=config["paillier_bits"],
                                      insecure_ok=config["insecure_ok"], rng=rng)
    party = Party(index, parties, session_id, correlation, rng=rng, data=data)
    if config["correlation"] == "dealer":
        party.cost["dealer"] += 32  # the seed, sent once by the dealer
    return party


class LocalRuntime:
    """All parties in this process."""

    name = "local"

    def __init__(self, parties: list[Party]) -> None:
        self.parties = parties

    def execute(self, instructions: Sequence[bytes], dealer: Sequence[bytes],
                want: Sequence[int]) -> dict[int, list[np.ndarray]]:
        queue: deque[tuple[int, int, bytes]] = deque()
        for i, party in enumerate(self.parties):
            queue.extend((i, dest, msg) for dest, msg in party.begin(instructions[i], dealer[i]))
        results: dict[int, list[np.ndarray]] = {}
        while queue:
            src, dest, msg = queue.popleft()
            if dest == DRIVER:
                results[src] = unpack_arrays(msg)
            else:
                queue.extend((dest, d, m) for d, m in self.parties[dest].receive(src, msg))
        stuck = {p.index: p.waiting_for() for p in self.parties if p.busy}
        if stuck:
            raise ProtocolError(f"parties are waiting for messages that never came: {stuck}")
        return results

    def close(self) -> None:
        for party in self.parties:
            party.store.clear()


# -- start-up authentication (process runtime) ------------------------------------------
def _tag(key: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"veil-mpc/" + label + b"".join(parts), hashlib.sha256).digest()


def _verified(key: bytes, tag: bytes, label: bytes, *parts: bytes) -> bool:
    return hmac.compare_digest(tag, _tag(key, label, *parts))


def _accept_peer(listener: socket.socket, index: int, parties: int, keys: dict[int, bytes],
                 peers: dict[int, socket.socket], deadline: float) -> None:
    """Accept one authenticated higher-indexed peer (module docstring); drop impostors."""
    while time.monotonic() < deadline:
        listener.settimeout(max(0.01, deadline - time.monotonic()))
        s, _addr = listener.accept()
        challenge = secure_rng().bytes(_NONCE)
        try:
            send_frame(s, _HELLO, challenge)
            _kind, body = recv_frame(s, _HANDSHAKE_S)
            j = _HELLO_BODY.unpack_from(body)[0] if len(body) == 2 + 32 else -1
            if (index < j < parties and j not in peers and j in keys
                    and _verified(keys[j], body[2:], b"peer", challenge,
                                  struct.pack("<HH", j, index))):
                peers[j] = s
                return
        except (OSError, ProtocolError):
            pass
        s.close()  # an impostor or a broken hello: drop it, keep waiting for the real peer
    raise ProtocolError(f"party {index}: the other parties did not connect in time")


# -- the party process ------------------------------------------------------------------
def _party_main(index: int, parties: int, port: int, key: bytes) -> None:
    """Entry point of a party process: handshake, then execute instructions until STOP.

    ``key`` is this party's key a_i, read by the worker from its standard input.
    """
    driver = socket.create_connection(("127.0.0.1", port), timeout=_STARTUP_S)
    listener = socket.create_server(("127.0.0.1", 0))
    hello = _HELLO_BODY.pack(index, listener.getsockname()[1]) + secure_rng().bytes(_NONCE)
    send_frame(driver, _HELLO, hello + _tag(key, b"hello", hello))
    _kind, body = recv_frame(driver, _STARTUP_S)
    if len(body) < 32 or not _verified(key, body[-32:], b"config", hello, body[:-32]):
        raise ProtocolError(f"party {index}: the configuration is not from the session")
    config = json.loads(body[:-32])
    ports = config["ports"]
    keys = {int(j): bytes.fromhex(k) for j, k in config.pop("links").items()}
    peers: dict[int, socket.socket] = {}
    for j in range(index):  # connect to lower indices, accept the higher ones
        s = socket.create_connection(("127.0.0.1", ports[j]), timeout=_STARTUP_S)
        _kind, challenge = recv_frame(s, _STARTUP_S)
        ids = struct.pack("<HH", index, j)
        send_frame(s, _HELLO, struct.pack("<H", index) + _tag(keys[j], b"peer", challenge, ids))
        peers[j] = s
    deadline = time.monotonic() + _STARTUP_S
    for _ in range(parties - 1 - index):
        _accept_peer(listener, index, parties, keys, peers, deadline)
    listener.close()
    session_id = bytes.fromhex(config["session"])
    net = _Net()
    net.add(_DRIVER_KEY, driver)
    for j, s in peers.items():
        net.add(j, s)
    party = make_party(index, parties, session_id, config)
    net.send(_DRIVER_KEY, _READY, b"")
    _serve(party, net, float(config["timeout"]))


def _serve(party: Party, net: _Net, timeout: float) -> str | None:
    """Execute the driver's instructions until it stops; the failure reported, if any."""
    pending: deque[bytes] = deque()

    def dispatch(out: list[tuple[int, bytes]]) -> None:
        for dest, msg in out:
            if dest == DRIVER:
                net.send(_DRIVER_KEY, _RESULT, struct.pack("<Q", party.seq) + msg)
            else:
                net.send(dest, _MSG, msg)

    def handle(frames: list[tuple[Any, int, bytes]]) -> bool:
        for key, kind, payload in frames:
            if key == _DRIVER_KEY:
                if kind == _INSTR:
                    pending.append(payload)
                elif kind in (_STOP, _EOF):
                    if payload:   # the session ended on a failure: say which
                        ended.append(payload[:1000].decode("utf-8", "replace"))
                    return False
            elif kind == _MSG:
                dispatch(party.receive(key, payload))
            elif kind == _EOF and party.busy and key in party.waiting_for():
                raise ProtocolError(f"{net.names.get(key, f'party {key}')} closed its "
                                    "connection")
        return True

    report = None
    ended: list[str] = []
    try:
        running = True
        while running:
            while running and not pending:
                running = handle(net.poll(None))
            if not running:
                break
            ins = pending.popleft()
            (length,) = struct.unpack_from("<I", ins)
            dispatch(party.begin(ins[4:4 + length], ins[4 + length:]))
            last = time.monotonic()
            while running and party.busy:
                frames = net.poll(max(0.0, last + timeout - time.monotonic()))
                if frames:
                    last = time.monotonic()
                    running = handle(frames)
                elif time.monotonic() >= last + timeout:
                    silent = party.waiting_for()
                    report = {"kind": "timeout", "party": party.index, "missing": silent,
                              "message": f"party {party.index} received nothing from "
                                         f"part{'ies' if len(silent) > 1 else 'y'} "
                                         f"{', '.join(map(str, silent))} for {timeout:g} s "
                                         f"in instruction {party.seq} step {party.step}"}
                    net.send(_DRIVER_KEY, _ERROR, json.dumps(report).encode())
                    running = False
    except Exception as exc:  # report any failure to the session instead of dying silently
        report = {"kind": "error", "party": party.index, "missing": [],
                  "message": f"party {party.index}: {type(exc).__name__}: {exc}"}
        if _DRIVER_KEY in net.links:
            net.send(_DRIVER_KEY, _ERROR, json.dumps(report).encode())
    net.drain(time.monotonic() + 5.0)
    net.close()
    if ended and not report:
        return f"party {party.index}: the session ended on a failure: {ended[0]}"
    return report["message"] if report else None


# -- the session side -------------------------------------------------------------------
class _Remote:
    """The session's end of a runtime whose parties are elsewhere (processes, hosts):
    ``self.net`` holds one link per party, keyed by its index."""

    n: int
    timeout: float
    net: _Net
    broken: str | None = None

    def _exit_code(self, party: int) -> int | None:
        """The exit status of a party that closed its link, when this host knows it."""
        return None

    def _gone(self, party: int) -> str:
        code = self._exit_code(party)
        return f"party {party} exited (exit code {code})" if code is not None else \
            f"{self.net.names.get(party, f'party {party}')} closed its connection"

    def execute(self, instructions: Sequence[bytes], dealer: Sequence[bytes],
                want: Sequence[int]) -> dict[int, list[np.ndarray]]:
        if self.broken:
            raise ProtocolError(f"the session is broken: {self.broken}")
        for i in range(self.n):
            self.net.send(i, _INSTR, struct.pack("<I", len(instructions[i])) + instructions[i]
                          + dealer[i])
        results: dict[int, list[np.ndarray]] = {}
        deadline = time.monotonic() + self.timeout + 2.0
        self._collect(self.net.poll(0), results)
        while len(results) < len(want):
            left = deadline - time.monotonic()
            if left <= 0:
                silent = [i for i in want if i not in results]
                self._fail(f"no result from part{'ies' if len(silent) > 1 else 'y'} "
                           f"{', '.join(map(str, silent))} within {self.timeout:g} s",
                           silent[0], timeout=True)
            self._collect(self.net.poll(left), results)
        return results

    def _collect(self, frames: list, results: dict) -> None:
        for i in (i for i, kind, _ in frames if kind == _EOF):  # a crash explains the rest
            if self._exit_code(i):
                self._fail(self._gone(i), i)
        for i, kind, payload in frames:
            if kind == _RESULT:
                results[i] = unpack_arrays(payload, 8)
            elif kind == _ERROR:
                report = json.loads(payload)
                missing = report["missing"]
                if report["kind"] == "timeout" and missing:
                    self._fail(f"party {missing[0]} stopped answering ({report['message']})",
                               missing[0], timeout=True)
                self._fail(report["message"], i)
            elif kind == _EOF:
                self._fail(self._gone(i), i)

    def _fail(self, message: str, party: int, timeout: bool = False) -> None:
        self.broken = message
        if timeout:
            raise PartyTimeout(message, party)
        raise ProtocolError(message)

    def close(self) -> None:
        reason = (self.broken or "").encode()[:1000]   # a broken session tells the parties why
        for key in list(self.net.links):
            try:
                self.net.send(key, _STOP, reason)
            except OSError:
                pass
        self.net.drain(time.monotonic() + 1.0)
        self.net.close()


class ProcessRuntime(_Remote):
    """One process per party over loopback TCP; ``configs[i]`` is party i's configuration."""

    name = "process"

    def __init__(self, parties: int, session_id: bytes, configs: list[dict],
                 timeout: float) -> None:
        self.n = parties
        self.timeout = timeout
        self.broken: str | None = None
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        rng = secure_rng()
        keys = [rng.bytes(_KEY) for _ in range(parties)]
        links = {(i, j): rng.bytes(_KEY).hex() for i in range(parties) for j in range(i)}
        self.procs = []
        for i in range(parties):
            proc = subprocess.Popen([sys.executable, "-m", "veil.mpc._worker", str(i),
                                     str(parties), str(port)], env=env, stdin=subprocess.PIPE)
            proc.stdin.write(keys[i])
            proc.stdin.close()
            self.procs.append(proc)
        self.net = _Net()
        try:
            socks, ports, hellos = {}, {}, {}
            deadline = time.monotonic() + _STARTUP_S
            while len(socks) < parties:
                sock = self._accept(listener, deadline)
                try:
                    _kind, body = recv_frame(sock, _HANDSHAKE_S)
                except (OSError, ProtocolError):
                    body = b""
                i, peer_port = (_HELLO_BODY.unpack_from(body) if len(body) == 4 + _NONCE + 32
                                else (parties, 0))
                if i < parties and i not in socks and _verified(keys[i], body[-32:], b"hello",
                                                                 body[:-32]):
                    socks[i], ports[i], hellos[i] = sock, peer_port, body[:-32]
                else:  # not one of our parties: drop it before anything is sent
                    sock.close()
            for i, sock in socks.items():
                mine = {str(j): links[max(i, j), min(i, j)] for j in range(parties) if j != i}
                config = json.dumps(dict(configs[i], session=session_id.hex(), timeout=timeout,
                                         ports=[ports[j] for j in range(parties)],
                                         links=mine)).encode()
                send_frame(sock, _CONFIG, config + _tag(keys[i], b"config", hellos[i], config))
            for i, sock in socks.items():
                kind, _ = recv_frame(sock, _STARTUP_S)
                if kind != _READY:
                    raise ProtocolError(f"party {i} failed to start")
                self.net.add(i, sock)
        except (OSError, ProtocolError) as exc:
            self.close()
            raise ProtocolError(f"the party processes failed to start: {exc}") from None
        finally:
            listener.close()
        self.pids = [p.pid for p in self.procs]

    def _accept(self, listener: socket.socket, deadline: float) -> socket.socket:
        listener.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                return listener.accept()[0]
            except TimeoutError:
                dead = [i for i, p in enumerate(self.procs) if p.poll() is not None]
                if dead:
                    raise ProtocolError(f"party {dead[0]} exited during start-up (exit code "
                                        f"{self.procs[dead[0]].returncode})") from None
        raise ProtocolError(f"the parties did not connect within {_STARTUP_S:g} s")

    def _exit_code(self, party: int) -> int | None:
        try:
            return self.procs[party].wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        deadline = time.monotonic() + 1.0
        super().close()
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- parties on their own hosts ---------------------------------------------------------
_CONFIG_KEYS = {"correlation": str, "seed": (str, type(None)), "rng": (str, type(None)),
                "paillier_bits": int, "insecure_ok": bool, "session": str,
                "timeout": (int, float)}


def _read_config(body: bytes, index: int) -> dict:
    """The driver's configuration for party ``index``, every field checked."""
    try:
        config = json.loads(body)
        ok = isinstance(config, dict) and all(
            isinstance(config.get(k), t) for k, t in _CONFIG_KEYS.items())
        ok = ok and config["correlation"] in ("dealer", "paillier") and \
            len(bytes.fromhex(config["session"])) == 16 and 0 < config["timeout"] <= 86400 \
            and (config["correlation"] != "dealer" or len(bytes.fromhex(config["seed"])) == 32)
    except (ValueError, TypeError, RecursionError):
        ok = False
    if not ok:
        raise ProtocolError(f"party {index}: the driver's configuration is malformed")
    return config


class HostsRuntime(_Remote):
    """Each party a process on its own host (:func:`serve_party`, ``veil mpc party``),
    linked by mutually authenticated TLS (:mod:`veil.net.mesh`); the session connects to
    every party as the hosts file's driver with ``identity`` and sends each its
    configuration (the dealer's seed included) over that link."""

    name = "hosts"

    def __init__(self, hosts: Hosts, identity: Identity, session_id: bytes,
                 configs: list[dict], timeout: float, connect_timeout: float = 60.0) -> None:
        self.n = len(hosts)
        self.timeout = timeout
        self.net = connect(hosts, identity, timeout=connect_timeout)
        try:
            for i in range(self.n):
                config = dict(configs[i], session=session_id.hex(), timeout=timeout)
                self.net.send(i, _CONFIG, json.dumps(config).encode())
            ready: set[int] = set()
            deadline = time.monotonic() + connect_timeout
            while len(ready) < self.n:
                left = deadline - time.monotonic()
                if left <= 0:
                    late = min(set(range(self.n)) - ready)
                    self._fail(f"{self.net.names[late]} did not start within "
                               f"{connect_timeout:g} s", late, timeout=True)
                frames = self.net.poll(left)
                ready |= {i for i, kind, _ in frames if kind == _READY}
                self._collect([f for f in frames if f[1] != _READY], {})
        except BaseException:
            self.close()
            raise


def serve_party(hosts: Hosts, identity: Identity, data: dict[str, np.ndarray] | None = None,
                *, connect_timeout: float = 120.0) -> None:
    """Run party ``identity.name`` of ``hosts`` on this host until the driver ends the
    session: link with the other parties and the driver, take the driver's configuration,
    then execute its instructions on the party's own ``data`` (name -> array, shared by
    ``Session.share_data``). A failure is reported to the driver and raised here."""
    if hosts.driver is None:
        raise ConfigError(f"hosts file {hosts.path}: an MPC session needs driver = NAME, the "
                          "identity of the session that sends the instructions")
    me = hosts.by_name(identity.name)
    if me is None:
        raise ConfigError(f"--party: {identity.name!r} is not a party of {hosts.path}")
    net = connect(hosts, identity, driver=True, timeout=connect_timeout)
    try:
        deadline = time.monotonic() + connect_timeout
        body = None
        while body is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PartyTimeout(f"party {me.index}: the driver sent no configuration "
                                   f"within {connect_timeout:g} s", -1)
            for key, kind, payload in net.poll(left):
                if key != _DRIVER_KEY or kind not in (_CONFIG, _EOF):
                    raise ProtocolError(f"party {me.index}: {net.names[key]} sent a frame "
                                        "before the session started")
                if kind == _EOF:
                    raise ProtocolError(f"party {me.index}: the driver left before the "
                                        "session started")
                body = payload
        config = _read_config(body, me.index)
        party = make_party(me.index, len(hosts), bytes.fromhex(config["session"]), config,
                           data)
    except BaseException:
        net.close()
        raise
    net.send(_DRIVER_KEY, _READY, b"")
    failure = _serve(party, net, float(config["timeout"]))
    if failure:
        raise ProtocolError(failure)
