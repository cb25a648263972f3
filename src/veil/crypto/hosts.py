"""PSI and dealer-free key generation between parties on different hosts.

The sans-I/O parties of :mod:`veil.crypto.psi` and :mod:`veil.crypto.dkg` driven over the
mutually authenticated TLS links of :mod:`veil.net.mesh` (threat model there: each peer is
known by its certificate, signed by the session's CA, and named in the hosts file). The
protocols' own threat models hold unchanged (semi-honest PSI; honest-but-curious key
generation with an honest majority): TLS gives them the private, authenticated channels
they assume.

* :func:`psi_on_hosts` — one receiver and one sender (two parties of the hosts file);
* :func:`keygen_on_hosts` — every party of the hosts file runs one
  :class:`~veil.crypto.dkg.KeygenParty` (hosts index i is key-share index i + 1). The
  parties first exchange a fresh 16-byte nonce each, with a digest of their parameters
  (bits, threshold, stat_bits, batch): a party configured otherwise is refused by name,
  and the key-generation session id is SHA-256 over the hosts file digest, the parameters
  and all nonces, so no two runs share one. A party that leaves, stays silent for
  ``timeout`` seconds or sends a bad message aborts every party
  (:class:`~veil.net.links.PartyTimeout` or :class:`~veil.crypto.dkg.KeygenAbort`): the
  parties that saw it name it, the others name the party that reported the failure (a
  report is no evidence: :mod:`veil.net.mesh`), a failure nobody can be blamed for names
  no one, and every party drops its secrets: nothing is returned, so nothing can be
  written.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from typing import Any

from veil.crypto import threshold
from veil.crypto.dkg import KeygenAbort, KeygenParams, KeygenParty
from veil.crypto.psi import PSIReceiver, PSISender
from veil.errors import ConfigError, CryptoError, ProtocolError
from veil.net.hosts import Host, Hosts
from veil.net.links import PartyError
from veil.net.mesh import Identity, connect, pump
from veil.random import check_rng

__all__ = ["psi_on_hosts", "keygen_on_hosts"]

log = logging.getLogger(__name__)

_NONCE = 16
#: PSI: a frame may carry 32 bytes for each of this many identifiers, or of this party's own
#: count if larger (a peer's set may be larger than ours; 2^20 identifiers are 32 MiB)
_PSI_PEER_ITEMS = 1 << 20


def _me(hosts: Hosts, identity: Identity) -> Host:
    me = hosts.by_name(identity.name)
    if me is None:
        raise ConfigError(f"--party: {identity.name!r} is not a party of {hosts.path}")
    return me


def psi_on_hosts(hosts: Hosts, identity: Identity, peer: int | str, role: str,
                 items: Iterable[bytes | str], *, output: str = "intersection",
                 max_request: int | None = None, timeout: float = 60.0,
                 connect_timeout: float = 120.0) -> list[bytes | str] | int | None:
    """Run this host's side of a PSI with party ``peer``: ``role`` ``"receiver"`` (returns
    the intersection, or its size) or ``"sender"`` (returns None; it learns |X| only, and
    answers at most ``max_request`` identifiers: :class:`~veil.crypto.psi.PSISender`). A
    frame may hold the points of at most max(own set, the sender's ``max_request``, 2^20)
    identifiers, so a peer cannot make this party buffer more."""
    if role not in ("receiver", "sender"):
        raise ConfigError(f"role={role!r} is not allowed: 'receiver' or 'sender'")
    me = _me(hosts, identity)
    other = hosts.party(peer, "--peer")
    if other.index == me.index:
        raise ConfigError(f"--peer={peer!r} is not allowed: it is this party ({me})")
    items = list(items)
    if role == "receiver":
        party: Any = PSIReceiver(items, output=output)
    else:
        party = PSISender(items, output=output, max_request=max_request)
    result: dict[str, Any] = {}
    bound = max(len(items), getattr(party, "max_request", 0), _PSI_PEER_ITEMS)
    net = connect(hosts, identity, peers=[other.index], timeout=connect_timeout,
                  max_frame=64 + 32 * bound)
    try:
        if role == "receiver":
            def receive(key: int, message: bytes) -> list:
                if "setup" not in result:      # the sender's stream: setup, then response
                    party.receive_setup(message)
                    result["setup"] = True
                else:
                    result["out"] = party.finish(message)
                return []
            first = [(other.index, party.request())]
        else:
            def receive(key: int, message: bytes) -> list:
                result["out"] = None
                return [(key, party.respond(message, receiver=str(other)))]
            first = [(other.index, party.setup())]
        def checked(key: int, message: bytes) -> list:
            try:
                return receive(key, message)
            except (ProtocolError, CryptoError) as exc:   # the peer's bytes: name it
                raise PartyError(f"{other}: {exc}", other.index) from exc

        pump(net, first, checked, lambda: "out" in result, lambda: [other.index], timeout)
    finally:
        net.close()
    return result["out"]


def _params_digest(params: KeygenParams) -> bytes:
    text = f"{params.bits} {params.parties} {params.threshold} {params.stat_bits} {params.batch}"
    return hashlib.sha256(b"veil-dkg-params/1 " + text.encode()).digest()[:_NONCE]


def keygen_on_hosts(hosts: Hosts, identity: Identity, *, bits: int = 2048, threshold: int = 2,
                    stat_bits: int = 40, insecure_ok: bool = False, batch: int | None = None,
                    timeout: float = 120.0, connect_timeout: float = 120.0, rng: Any = None
                    ) -> tuple[threshold.KeyShare, dict[str, float]]:
    """This host's key share of a threshold Paillier key generated by every party of
    ``hosts`` together, without a dealer (module docstring), and what it cost this party:
    ``seconds`` and ``cpu`` (after the links are up), bytes ``sent`` and ``received`` on the
    links (frames, before TLS), protocol ``rounds``, ``attempts`` and ``candidates``.
    ``timeout``: seconds a party waits for a peer's message before it names the peer and
    aborts."""
    me = _me(hosts, identity)
    params = KeygenParams.make(bits, len(hosts), threshold, stat_bits=stat_bits,
                               insecure_ok=insecure_ok, batch=batch)
    rng = check_rng(rng)
    mine = rng.bytes(_NONCE)
    digest = _params_digest(params)
    nonces = {me.index: mine}
    early: list[tuple[int, bytes]] = []
    peers = [h.index for h in hosts.parties if h.index != me.index]

    def take_nonce(key: int, message: bytes) -> list:
        if key in nonces:               # a faster peer's first key-generation message
            early.append((key, message))
        elif len(message) != 2 * _NONCE:
            raise PartyError(f"{hosts.party(key)} sent a malformed opening message", key)
        elif message[_NONCE:] != digest:
            raise ConfigError(f"{hosts.party(key)} runs key generation with other parameters "
                              f"(bits, threshold, stat_bits or batch; here bits={params.bits}"
                              f", threshold={params.threshold}, stat_bits={params.stat_bits})")
        else:
            nonces[key] = message[:_NONCE]
        return []

    party: KeygenParty | None = None
    net = connect(hosts, identity, timeout=connect_timeout, max_frame=params.max_message())
    start, cpu = time.perf_counter(), time.process_time()
    try:
        pump(net, [(j, mine + digest) for j in peers], take_nonce,
             lambda: len(nonces) == len(hosts), lambda: [j for j in peers if j not in nonces],
             timeout)
        session = hashlib.sha256(b"veil-dkg-session/1" + hosts.digest() + digest + b"".join(
            nonces[i] for i in range(len(hosts)))).digest()[:16]
        party = KeygenParty(me.index + 1, params, session, rng=rng)

        def to_net(out: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
            return [(j - 1, m) for j, m in out]

        def receive(key: int, message: bytes) -> list[tuple[int, bytes]]:
            try:
                return to_net(party.receive(key + 1, message))
            except KeygenAbort as exc:  # key-share index j is hosts index j - 1
                if exc.party is None:     # nobody can be blamed: say so, name no one
                    raise ProtocolError(f"key generation failed: {exc.reason}") from exc
                culprit = hosts.party(exc.party - 1) if 0 < exc.party <= len(hosts) else None
                raise PartyError(f"{culprit or f'party {exc.party - 1}'}: {exc.reason}",
                                 exc.party - 1) from exc

        first = to_net(party.start())
        for key, message in early:
            first += receive(key, message)
        pump(net, first, receive, lambda: party.done,
             lambda: [j - 1 for j in party.waiting_for()], timeout)
    except BaseException as exc:
        if party is not None:
            party.abort(str(exc))
        raise
    finally:
        net.close()
    pk, share = party.result()
    stats = {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
             "sent": net.sent, "received": net.received, "rounds": party.round,
             "attempts": party.attempts, "candidates": party.candidates}
    log.info("keygen on hosts: party %d holds share %d of a %d-bit key (%d attempts)",
             me.index, share.index, pk.bits, party.attempts)
    return share, stats
