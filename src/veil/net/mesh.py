"""Mutually authenticated TLS links between parties on different hosts.

:func:`connect` links one party (or the driver of a session) with the others listed in a
hosts file (:mod:`veil.net.hosts`): party i connects to every party j < i and accepts every
party j > i (and the driver, when the file names one); the driver connects to every party.
:func:`pump` then drives a sans-I/O protocol object over the links.

Threat model. The network is hostile: anyone may connect to a party's port, read and
change packets. Each link is TLS 1.3 (stdlib :mod:`ssl`) with certificates required on
*both* ends, each checked against the session's CA; a peer is known only by its
certificate's common name, which must be the name the hosts file gives the party (or the
driver) expected at that end: a connection from anything else (another CA, an unknown
name, a name already connected, a party that should connect the other way) is dropped with
a warning and the party keeps waiting for the real peer. Host names and addresses are not
trusted (they may be rewritten): the certificate's name is. After the handshake both ends
exchange a digest of their hosts file (session name and party list); a peer with another
one is refused, so two sessions can never mix. Each party trusts the CA to give each name
to one organisation only, and keeps its own key on its own host.

Failures name the party: one that does not connect within ``timeout`` seconds, whose
certificate is refused or that leaves mid-protocol raises :class:`PartyTimeout` (a
:class:`~veil.errors.ProtocolError`) with its index. Frames are bounded (``max_frame``,
sized by each protocol from its messages), and so is what a link buffers
(:mod:`veil.net.links`).

Blame. A party names a culprit only from what it saw itself on an authenticated link (a
peer that sent malformed bytes, stayed silent or left). A peer's claim about a third party
is evidence no one else can check (TLS authenticates a link, it signs nothing a party could
show the others), so an abort frame names nobody: the others raise "party i reports a
failure" with party i's reason, attributed to it, and never repeat a culprit it names.

Accepting. Anyone may open a TCP connection to a party's port. Each accepted connection
gets its own handshake, run beside the others with its own time limit
(``_HANDSHAKE_S``), at most ``_PENDING`` at once (more wait in the kernel's backlog), so
idle or slow connections from anyone cannot hold the port until the deadline; a peer
that does not authenticate by the deadline is named as not having connected, with the
count of unauthenticated connections dropped meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

from veil.errors import ConfigError, ProtocolError
from veil.net.hosts import Host, Hosts
from veil.net.links import EOF, MAX_FRAME, Net, PartyError, PartyTimeout, recv_frame, send_frame

__all__ = ["DRIVER", "Identity", "connect", "pump", "MSG"]

log = logging.getLogger(__name__)

#: the key of the driver's link in a party's :class:`~veil.net.links.Net`
DRIVER = "driver"
_HELLO = 0
#: frame kind of protocol messages sent by :func:`pump`
MSG = 1
_ABORT = 2
_HANDSHAKE_S = 10.0
_RETRY_S = 0.2
#: connections being authenticated at once by one listening party
_PENDING = 32


def _common_name(cert: x509.Certificate) -> str | None:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


class Identity:
    """Who this process is: ``name`` (in the hosts file) with its certificate and key,
    checked to be signed by the hosts file's CA and to carry that name."""

    def __init__(self, hosts: Hosts, name: str, cert: str | os.PathLike | None = None,
                 key: str | os.PathLike | None = None) -> None:
        default_cert, default_key = hosts.cert_paths(name)
        self.name = name
        self.cert = Path(cert) if cert is not None else default_cert
        self.key = Path(key) if key is not None else default_key
        for option, path in (("--cert", self.cert), ("--key", self.key)):
            if not path.is_file():
                raise ConfigError(f"{option}={str(path)!r} is not allowed: no such file")
        try:
            mine = x509.load_pem_x509_certificate(self.cert.read_bytes())
        except ValueError:
            raise ConfigError(f"--cert={str(self.cert)!r} is not a PEM certificate") from None
        try:
            ca = x509.load_pem_x509_certificate(hosts.ca.read_bytes())
        except ValueError:
            raise ConfigError(f"ca={str(hosts.ca)!r} of {hosts.path} is not a PEM "
                              "certificate") from None
        try:
            mine.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError) as exc:
            raise ConfigError(f"--cert={str(self.cert)!r} is not allowed: it is not signed "
                              f"by the session's CA {hosts.ca} ({type(exc).__name__})") from None
        if _common_name(mine) != name:
            raise ConfigError(f"--cert={str(self.cert)!r} is not allowed: it is the "
                              f"certificate of {_common_name(mine)!r}, not of {name!r}")
        self.server = self._context(ssl.PROTOCOL_TLS_SERVER, hosts)
        self.client = self._context(ssl.PROTOCOL_TLS_CLIENT, hosts)

    def _context(self, protocol: int, hosts: Hosts) -> ssl.SSLContext:
        ctx = ssl.SSLContext(protocol)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.check_hostname = False          # the peer's name is checked by its certificate
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=str(hosts.ca))
        try:
            ctx.load_cert_chain(str(self.cert), str(self.key))
        except ssl.SSLError as exc:
            raise ConfigError(f"--key={str(self.key)!r} is not allowed: it is not the key of "
                              f"{self.cert} ({exc.reason})") from None
        return ctx


def _peer_name(sock: ssl.SSLSocket) -> str | None:
    cert = sock.getpeercert()
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


def _hello(sock: ssl.SSLSocket, hosts: Hosts, who: str, timeout: float) -> None:
    """Exchange hosts-file digests; refuse a peer of another session."""
    send_frame(sock, _HELLO, hosts.digest())
    kind, digest = recv_frame(sock, timeout, max_frame=64)
    if kind != _HELLO or digest != hosts.digest():
        raise ProtocolError(f"{who} runs another session (its hosts file differs: session "
                            "name or party list)")


def _dial(ident: Identity, hosts: Hosts, peer: Host, deadline: float) -> ssl.SSLSocket:
    """Connect to ``peer`` (retrying while it is not up yet) and authenticate it."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PartyTimeout(f"{peer} did not accept a connection in time", peer.index)
        try:
            raw = socket.create_connection((peer.host, peer.port), timeout=min(left, 5.0))
        except OSError:
            time.sleep(_RETRY_S)
            continue
        try:
            raw.settimeout(max(0.1, min(_HANDSHAKE_S, deadline - time.monotonic())))
            sock = ident.client.wrap_socket(raw)
        except ssl.SSLCertVerificationError as exc:
            raw.close()
            raise PartyTimeout(f"{peer} presented a certificate the session's CA did not "
                               f"sign ({exc.verify_message})", peer.index) from None
        except (OSError, ssl.SSLError) as exc:
            raw.close()
            log.warning("TLS handshake with %s failed (%s); retrying", peer, exc)
            time.sleep(_RETRY_S)
            continue
        name = _peer_name(sock)
        if name != peer.name:
            sock.close()
            raise PartyTimeout(f"{peer}: its certificate is for {name!r}, not {peer.name!r}",
                               peer.index)
        try:
            _hello(sock, hosts, str(peer), max(0.1, deadline - time.monotonic()))
        except ssl.SSLError as exc:  # TLS 1.3: a refused client certificate shows up here
            sock.close()
            raise PartyTimeout(f"{peer} refused our certificate ({exc.reason or exc})",
                               peer.index) from None
        except (OSError, ProtocolError) as exc:
            sock.close()
            raise PartyTimeout(f"{peer} closed the connection during the handshake ({exc}): "
                               "it refused our certificate or runs another session",
                               peer.index) from None
        return sock


def _listen(me: Host) -> socket.socket:
    try:
        return socket.create_server((me.host, me.port))
    except OSError as exc:
        raise ConfigError(f"address={me.address!r} of {me} is not allowed here: cannot "
                          f"listen on it ({exc.strerror or exc})") from None


def _accept(listener: socket.socket, ident: Identity, hosts: Hosts,
            expected: dict[str, Any], deadline: float) -> list[tuple[Any, ssl.SSLSocket]]:
    """An authenticated connection from each of ``expected`` (name -> key), in arrival
    order; each handshake runs in its own thread under its own time limit (module
    docstring)."""
    done: queue.Queue = queue.Queue()
    slots = threading.Semaphore(_PENDING)
    lock = threading.Lock()
    over = [False]            # set under lock: late handshakes close their socket
    dropped = [0]

    def handshake(raw: socket.socket, addr: Any) -> None:
        try:
            raw.settimeout(_HANDSHAKE_S)
            sock = ident.server.wrap_socket(raw, server_side=True)
            name = _peer_name(sock)
            if name not in expected:
                sock.close()
                raise ProtocolError(f"certificate name {name!r} is not expected here")
            _hello(sock, hosts, f"{name} at {addr[0]}", _HANDSHAKE_S)
            with lock:
                if over[0]:
                    sock.close()
                else:
                    done.put((name, sock))
        except (OSError, ssl.SSLError, ProtocolError) as exc:
            raw.close()
            with lock:
                dropped[0] += 1
                if not over[0]:
                    log.warning("dropped a connection from %s: %s", addr, exc)
        finally:
            slots.release()

    found: list[tuple[Any, ssl.SSLSocket]] = []
    listener.settimeout(_RETRY_S)
    try:
        while expected and time.monotonic() < deadline:
            while not done.empty():
                name, sock = done.get()
                if name in expected:
                    found.append((expected.pop(name), sock))
                else:  # a second connection under a name already linked
                    sock.close()
            if not expected or not slots.acquire(timeout=_RETRY_S):
                continue
            try:
                raw, addr = listener.accept()
            except OSError as exc:   # nothing yet, or out of descriptors: try again
                slots.release()
                if not isinstance(exc, TimeoutError):
                    log.warning("accept failed (%s); retrying", exc)
                    time.sleep(_RETRY_S)
                continue
            threading.Thread(target=handshake, args=(raw, addr), daemon=True).start()
    finally:
        with lock:
            over[0] = True
        while not done.empty():      # authenticated, but no longer wanted
            done.get()[1].close()
    if expected:
        for _, sock in found:
            sock.close()
        missing = sorted(expected.values(), key=str)
        who = ", ".join("the driver" if m == DRIVER else str(hosts.party(m)) for m in missing)
        raise PartyTimeout(f"{who} did not connect in time ({dropped[0]} unauthenticated "
                           "connection(s) dropped meanwhile)",
                           missing[0] if isinstance(missing[0], int) else -1)
    return found


def connect(hosts: Hosts, ident: Identity, *, peers: Collection[int] | None = None,
            driver: bool = False, timeout: float = 60.0, max_frame: int = MAX_FRAME) -> Net:
    """Link ``ident`` with its peers (module docstring); a :class:`Net` keyed by party index
    (and :data:`DRIVER`). ``peers``: the parties to link with (default all); ``driver``:
    also accept the hosts file's driver. The driver (``ident.name == hosts.driver``) links
    to every party."""
    deadline = time.monotonic() + timeout
    net = Net(max_frame)
    wanted = [p for p in hosts.parties if peers is None or p.index in peers]
    try:
        if ident.name == hosts.driver:
            for peer in wanted:
                net.add(peer.index, _dial(ident, hosts, peer, deadline), str(peer))
            return net
        me = hosts.by_name(ident.name)
        if me is None:
            raise ConfigError(f"{ident.name!r} is not a party of the hosts file {hosts.path}")
        listener = _listen(me)
        try:
            for peer in (p for p in wanted if p.index < me.index):
                net.add(peer.index, _dial(ident, hosts, peer, deadline), str(peer))
            expected: dict[str, Any] = {p.name: p.index for p in wanted if p.index > me.index}
            if driver:
                if hosts.driver is None:
                    raise ConfigError(f"hosts file {hosts.path}: driver = NAME is missing "
                                      "(the identity that drives the session)")
                expected[hosts.driver] = DRIVER
            for key, sock in _accept(listener, ident, hosts, expected, deadline):
                net.add(key, sock, "the driver" if key == DRIVER else str(hosts.party(key)))
        finally:
            listener.close()
        return net
    except BaseException:
        net.close()
        raise


def pump(net: Net, outgoing: list[tuple[Any, bytes]], receive: Callable[[Any, bytes], list],
         done: Callable[[], bool], waiting: Callable[[], list], timeout: float) -> None:
    """Drive a sans-I/O protocol over ``net`` until ``done()``.

    ``outgoing``: the first (peer, message) pairs; ``receive(peer, message)`` returns the
    next ones; ``waiting()`` the peers whose message is due. A peer that sends nothing for
    ``timeout`` seconds while it is due, or closes its link before the end, raises
    :class:`PartyTimeout` naming it.
    """
    try:
        for key, msg in outgoing:
            net.send(key, MSG, msg)
        last = time.monotonic()
        closed: list = []
        while not done():
            frames = net.poll(max(0.0, last + timeout - time.monotonic()))
            if frames:
                last = time.monotonic()
            elif time.monotonic() >= last + timeout:
                silent = waiting() or sorted(k for k in net.links if k != DRIVER)
                raise PartyTimeout(f"{_names(net, silent)} sent nothing for {timeout:g} s",
                                   silent[0] if silent else -1)
            for key, kind, payload in frames:
                if kind == EOF:
                    closed.append(key)
                elif kind == MSG:
                    for dest, msg in receive(key, payload):
                        net.send(dest, MSG, msg)
                elif kind == _ABORT:   # a peer gave up: its account, not evidence
                    raise PartyError(f"{_names(net, [key])} reports a failure (its account, "
                                     f"not checked here: {_read_abort(payload)})", key)
                else:
                    raise PartyError(f"{_names(net, [key])} sent a frame of unknown kind "
                                     f"{kind}", key)
            gone = [k for k in closed if k in waiting()] if not done() else []
            if gone:  # it closed its link and a message of it is still due
                raise PartyTimeout(f"{_names(net, gone[:1])} left: its connection closed "
                                   "before the protocol ended", gone[0])
    except ProtocolError as exc:  # tell the others that, and why, this party stops
        report = json.dumps({"message": str(exc)[:1000]}).encode()
        for key in list(net.links):
            net.send(key, _ABORT, report)
        net.drain(time.monotonic() + 1.0)
        raise
    net.drain(time.monotonic() + 5.0)


def _read_abort(payload: bytes) -> str:
    """The reason a peer's abort frame gives (text only: it names no culprit for us)."""
    try:
        return str(json.loads(payload[:2048])["message"])[:1000]
    except (ValueError, TypeError, KeyError, RecursionError):
        return "no readable reason"


def _names(net: Net, keys: list) -> str:
    return ", ".join(net.names.get(k, f"party {k}") for k in keys)
