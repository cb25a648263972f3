"""Framed, non-blocking links between parties, over plain TCP or TLS sockets.

Every veil runtime that moves a protocol's bytes between processes frames them the same way:
``length:u32 kind:u8 payload`` (little-endian length of the payload). A frame longer than
the link's bound (``max_frame``) is refused as a :class:`~veil.errors.ProtocolError` naming
the peer before anything is allocated for it, and a link stops reading from its socket
while it holds a whole frame's worth of unread bytes (the kernel's buffers then push back
on the sender): a peer can make a link buffer at most ``max_frame`` + 5 bytes + one read
(1 MiB). Each protocol sizes ``max_frame`` from its own messages. :class:`Net` multiplexes several
:class:`Link` objects behind one selector; it is written once for both socket types
(``ssl.SSLSocket`` raises ``SSLWantReadError`` where a plain socket raises
``BlockingIOError``; both mean "nothing more now"). :func:`recv_frame` / :func:`send_frame`
are the blocking versions used during start-up handshakes.

A peer that disappears shows up as a frame of kind :data:`EOF`; :class:`PartyTimeout` names
a party that stopped answering, :class:`PartyError` one whose message broke the protocol.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import struct
import time
from typing import Any

from veil.errors import ProtocolError

__all__ = ["EOF", "FRAME", "MAX_FRAME", "Link", "Net", "PartyError", "PartyTimeout",
           "recv_frame", "send_frame"]

FRAME = struct.Struct("<IB")
EOF = -1
#: the default bound of one frame (bytes of payload)
MAX_FRAME = 1 << 30
_CHUNK = 1 << 20
_AGAIN = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class PartyError(ProtocolError):
    """A protocol failed because of party ``party`` (its index; -1 for a driver)."""

    def __init__(self, message: str, party: int) -> None:
        super().__init__(message)
        self.party = party


class PartyTimeout(PartyError, TimeoutError):
    """A party stopped answering, left, or never connected; ``party`` is its index."""


class Link:
    """A framed, non-blocking connection to ``peer`` with read and write buffers."""

    def __init__(self, sock: socket.socket, peer: Any = None, max_frame: int = MAX_FRAME) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.peer = peer
        self.max_frame = max_frame
        self.rbuf = bytearray()
        self.wbuf = bytearray()
        self.sent = 0
        self.received = 0

    def queue(self, kind: int, payload: bytes) -> None:
        if len(payload) > self.max_frame:
            raise ProtocolError(f"a frame of {len(payload)} bytes for {self.peer}: at most "
                                f"{self.max_frame}")
        self.wbuf += FRAME.pack(len(payload), kind)
        self.wbuf += payload
        self.sent += FRAME.size + len(payload)

    def flush(self) -> bool:
        """Send what the kernel takes now; True when nothing is left."""
        while self.wbuf:
            try:
                sent = self.sock.send(self.wbuf)
            except _AGAIN:
                return False
            except OSError:  # the peer is gone: its EOF, read next, names it
                self.wbuf.clear()
                return True
            del self.wbuf[:sent]
        return True

    def read(self) -> list[tuple[int, bytes]]:
        """Complete frames received so far; ``(EOF, b"")`` last when the peer closed.

        Reads while less than a frame's worth (``max_frame`` + header) is buffered, takes
        the complete frames out, and reads on until the socket has nothing more."""
        frames: list[tuple[int, bytes]] = []
        while True:
            capped, eof = self._fill()
            while len(self.rbuf) >= FRAME.size:
                length, kind = FRAME.unpack_from(self.rbuf)
                if length > self.max_frame:
                    raise ProtocolError(f"{self.peer} sent a frame of {length} bytes: at most "
                                        f"{self.max_frame}")
                if len(self.rbuf) < FRAME.size + length:
                    break
                frames.append((kind, bytes(self.rbuf[FRAME.size:FRAME.size + length])))
                del self.rbuf[:FRAME.size + length]
            if eof:
                frames.append((EOF, b""))
            if not capped or eof:
                return frames

    def _fill(self) -> tuple[bool, bool]:
        """Receive into the buffer until the socket is empty or a frame's worth is held:
        (capped, closed)."""
        while len(self.rbuf) <= self.max_frame + FRAME.size:
            try:
                data = self.sock.recv(_CHUNK)
            except _AGAIN:
                return False, False
            except OSError:  # reset, or a TLS error: the link is over
                data = b""
            if not data:
                return False, True
            self.rbuf += data
            self.received += len(data)
        return True, False


class Net:
    """Several links behind one selector, each under a key (a party index, a role name)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.sel = selectors.DefaultSelector()
        self.links: dict[Any, Link] = {}
        self.names: dict[Any, str] = {}     # who each key is (kept after its link closed)
        self.max_frame = max_frame
        self.sent = 0
        self.received = 0

    def add(self, key: Any, sock: socket.socket, name: str | None = None) -> None:
        link = Link(sock, name if name is not None else f"party {key}", self.max_frame)
        self.names[key] = link.peer
        self.links[key] = link
        self.sel.register(sock, selectors.EVENT_READ, key)

    def send(self, key: Any, kind: int, payload: bytes) -> None:
        link = self.links.get(key)
        if link is None:
            raise ProtocolError(f"party {key} closed its connection (it exited or crashed)")
        pending = bool(link.wbuf)
        link.queue(kind, payload)
        self.sent += FRAME.size + len(payload)
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
                try:
                    got = link.read()
                except ProtocolError as exc:   # an oversized frame: name the peer's key
                    raise PartyError(str(exc), key) from None
                self.received += sum(FRAME.size + len(p) for k, p in got if k != EOF)
                frames.extend((key, kind, payload) for kind, payload in got)
                if got and got[-1][0] == EOF:  # closed: stop watching it
                    self._drop(key)
        return frames

    def _drop(self, key: Any) -> None:
        link = self.links.pop(key)
        self.sel.unregister(link.sock)
        link.sock.close()

    def drain(self, deadline: float) -> None:
        """Flush every write buffer (until the deadline)."""
        while any(link.wbuf for link in self.links.values()) and time.monotonic() < deadline:
            self.poll(0.05)

    def close(self) -> None:
        for key in list(self.links):
            self._drop(key)
        self.sel.close()


def recv_frame(sock: socket.socket, timeout: float, max_frame: int = 1 << 24
               ) -> tuple[int, bytes]:
    """One frame from a blocking socket (start-up handshakes only)."""
    sock.settimeout(timeout)

    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ProtocolError("connection closed during the start-up handshake")
            out += chunk
        return out

    length, kind = FRAME.unpack(exactly(FRAME.size))
    if length > max_frame:
        raise ProtocolError(f"a start-up frame of {length} bytes (at most {max_frame})")
    return kind, exactly(length)


def send_frame(sock: socket.socket, kind: int, payload: bytes) -> None:
    sock.sendall(FRAME.pack(len(payload), kind) + payload)
