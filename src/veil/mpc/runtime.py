"""Runtimes that move the parties' messages: in one process, or one process per party.

Both run the same :class:`~veil.mpc.party.Party` state machines on the same instruction
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

Frames on every socket: ``length:u32 kind:u8 payload``. Secrets (the dealer's seeds) travel
over the sockets, never on a command line.

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
host). Across machines use TLS with mutual authentication.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil.errors import ProtocolError
from veil.mpc.party import DRIVER, Party
from veil.mpc.wire import unpack_arrays
from veil.random import secure_rng

__all__ = ["LocalRuntime", "ProcessRuntime", "PartyTimeout", "make_party"]

_FRAME = struct.Struct("<IB")
_HELLO, _PORTS, _READY, _INSTR, _MSG, _RESULT, _ERROR, _STOP, _CONFIG = range(9)
_EOF = -1
_DRIVER_KEY = "driver"
_STARTUP_S = 60.0
_HANDSHAKE_S = 5.0         # one connection's hello, before it is dropped
_MAX_HANDSHAKE = 1 << 24   # bytes of one start-up frame
_NONCE = 16
_KEY = 32
_HELLO_BODY = struct.Struct("<HH")


class PartyTimeout(ProtocolError, TimeoutError):
    """A party stopped answering; ``party`` is its index."""

    def __init__(self, message: str, party: int) -> None:
        super().__init__(message)
        self.party = party


def make_party(index: int, parties: int, session_id: bytes, config: dict) -> Party:
    """A party from its configuration (shared by both runtimes)."""
    from veil.mpc.triples import DealerShares, PaillierTriples

    rng = bytes.fromhex(config["rng"]) if config.get("rng") else None
    if config["correlation"] == "dealer":
        correlation = DealerShares(index, bytes.fromhex(config["seed"]))
    else:
        correlation = PaillierTriples(index, bits=config["paillier_bits"],
                                      insecure_ok=config["insecure_ok"], rng=rng)
    party = Party(index, parties, session_id, correlation, rng=rng)
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


# -- sockets ----------------------------------------------------------------------------
class _Link:
    """A framed, non-blocking TCP connection with read and write buffers."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.rbuf = bytearray()
        self.wbuf = bytearray()

    def queue(self, kind: int, payload: bytes) -> None:
        self.wbuf += _FRAME.pack(len(payload), kind)
        self.wbuf += payload

    def flush(self) -> bool:
        """Send what the kernel takes now; True when nothing is left."""
        while self.wbuf:
            try:
                sent = self.sock.send(self.wbuf)
            except (BlockingIOError, InterruptedError):
                return False
            except ConnectionError:  # the peer is gone: its EOF, read next, names it
                self.wbuf.clear()
                return True
            del self.wbuf[:sent]
        return True

    def read(self) -> list[tuple[int, bytes]]:
        """Complete frames received so far; ``(_EOF, b"")`` last when the peer closed."""
        eof = False
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionError:
                data = b""
            if not data:
                eof = True
                break
            self.rbuf += data
        frames = []
        while len(self.rbuf) >= _FRAME.size:
            length, kind = _FRAME.unpack_from(self.rbuf)
            if len(self.rbuf) < _FRAME.size + length:
                break
            frames.append((kind, bytes(self.rbuf[_FRAME.size:_FRAME.size + length])))
            del self.rbuf[:_FRAME.size + length]
        if eof:
            frames.append((_EOF, b""))
        return frames


class _Net:
    """Several links behind one selector."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.links: dict[Any, _Link] = {}

    def add(self, key: Any, sock: socket.socket) -> None:
        link = _Link(sock)
        self.links[key] = link
        self.sel.register(sock, selectors.EVENT_READ, key)

    def send(self, key: Any, kind: int, payload: bytes) -> None:
        link = self.links.get(key)
        if link is None:
            raise ProtocolError(f"party {key} closed its connection (it exited or crashed)")
        pending = bool(link.wbuf)
        link.queue(kind, payload)
        if not pending and not link.flush():
            self.sel.modify(link.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, key)

    def poll(self, timeout: float | None) -> list[tuple[Any, int, bytes]]:
        frames = []
        for sk, mask in self.sel.select(timeout):
            key = sk.data
            link = self.links[key]
            if mask & selectors.EVENT_WRITE and link.flush():
                self.sel.modify(link.sock, selectors.EVENT_READ, key)
            if mask & selectors.EVENT_READ:
                got = link.read()
                frames.extend((key, kind, payload) for kind, payload in got)
                if got and got[-1][0] == _EOF:  # closed: stop watching it
                    self.sel.unregister(link.sock)
                    link.sock.close()
                    del self.links[key]
        return frames

    def drain(self, deadline: float) -> None:
        """Flush every write buffer (until the deadline)."""
        while any(link.wbuf for link in self.links.values()) and time.monotonic() < deadline:
            self.poll(0.05)

    def close(self) -> None:
        for link in self.links.values():
            self.sel.unregister(link.sock)
            link.sock.close()
        self.sel.close()


def _recv_frame(sock: socket.socket, timeout: float) -> tuple[int, bytes]:
    """One frame from a blocking socket (start-up handshake only)."""
    sock.settimeout(timeout)
    head = b""
    while len(head) < _FRAME.size:
        chunk = sock.recv(_FRAME.size - len(head))
        if not chunk:
            raise ProtocolError("connection closed during the start-up handshake")
        head += chunk
    length, kind = _FRAME.unpack(head)
    if length > _MAX_HANDSHAKE:
        raise ProtocolError(f"a start-up frame of {length} bytes (at most {_MAX_HANDSHAKE})")
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise ProtocolError("connection closed during the start-up handshake")
        body += chunk
    return kind, body


def _send_frame(sock: socket.socket, kind: int, payload: bytes) -> None:
    sock.sendall(_FRAME.pack(len(payload), kind) + payload)


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
            _send_frame(s, _HELLO, challenge)
            _kind, body = _recv_frame(s, _HANDSHAKE_S)
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
    _send_frame(driver, _HELLO, hello + _tag(key, b"hello", hello))
    _kind, body = _recv_frame(driver, _STARTUP_S)
    if len(body) < 32 or not _verified(key, body[-32:], b"config", hello, body[:-32]):
        raise ProtocolError(f"party {index}: the configuration is not from the session")
    config = json.loads(body[:-32])
    ports = config["ports"]
    keys = {int(j): bytes.fromhex(k) for j, k in config.pop("links").items()}
    peers: dict[int, socket.socket] = {}
    for j in range(index):  # connect to lower indices, accept the higher ones
        s = socket.create_connection(("127.0.0.1", ports[j]), timeout=_STARTUP_S)
        _kind, challenge = _recv_frame(s, _STARTUP_S)
        ids = struct.pack("<HH", index, j)
        _send_frame(s, _HELLO, struct.pack("<H", index) + _tag(keys[j], b"peer", challenge, ids))
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


def _serve(party: Party, net: _Net, timeout: float) -> None:
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
                    return False
            elif kind == _MSG:
                dispatch(party.receive(key, payload))
            elif kind == _EOF and party.busy and key in party.waiting_for():
                raise ProtocolError(f"party {key} closed its connection")
        return True

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
        net.send(_DRIVER_KEY, _ERROR, json.dumps(report).encode())
    net.drain(time.monotonic() + 5.0)
    net.close()


# -- the session side -------------------------------------------------------------------
class ProcessRuntime:
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
                    _kind, body = _recv_frame(sock, _HANDSHAKE_S)
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
                _send_frame(sock, _CONFIG, config + _tag(keys[i], b"config", hellos[i], config))
            for i, sock in socks.items():
                kind, _ = _recv_frame(sock, _STARTUP_S)
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
            try:
                code = self.procs[i].wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                code = None
            if code:
                self._fail(f"party {i} exited (exit code {code})", i)
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
                code = self.procs[i].poll()
                self._fail(f"party {i} exited (exit code {code})", i)

    def _fail(self, message: str, party: int, timeout: bool = False) -> None:
        self.broken = message
        if timeout:
            raise PartyTimeout(message, party)
        raise ProtocolError(message)

    def close(self) -> None:
        for key in list(self.net.links):
            try:
                self.net.send(key, _STOP, b"")
            except OSError:
                pass
        deadline = time.monotonic() + 1.0
        self.net.drain(deadline)
        self.net.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
