"""Mutual TLS between parties: who may connect, and what a party sees when a peer fails."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time

import pytest

from veil.errors import ConfigError, ProtocolError
from veil.net import Identity, PartyError, PartyTimeout, connect, load_hosts, pump
from veil.net.certs import issue
from veil.net.links import Link
from veil.net.mesh import DRIVER


def _run(fn, *args, **kw):
    """fn(*args) in a thread; returns a dict with its "result" or "error"."""
    out: dict = {}

    def target():
        try:
            out["result"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    out["thread"] = t
    return out


def _join(*runs, timeout=30):
    for r in runs:
        r["thread"].join(timeout)
        assert not r["thread"].is_alive()


def test_parties_and_driver_link_up_and_exchange(tmp_path, hosts_file):
    hosts = load_hosts(hosts_file(3))
    runs = [_run(connect, hosts, Identity(hosts, f"p{i}"), driver=True, timeout=20)
            for i in range(3)]
    driver = connect(hosts, Identity(hosts, "analyst"), timeout=20)
    _join(*runs)
    nets = [r["result"] for r in runs]
    assert sorted(driver.links) == [0, 1, 2]
    for i, net in enumerate(nets):
        assert sorted(net.links, key=str) == sorted([*(j for j in range(3) if j != i), DRIVER],
                                                     key=str)
        for j in net.links:
            net.send(j, 7, f"{i}->{j}".encode())
    for i in range(3):
        driver.send(i, 7, b"hello")
    got = {i: set() for i in range(3)}
    deadline = time.monotonic() + 10
    while any(len(g) < 3 for g in got.values()) and time.monotonic() < deadline:
        for i, net in enumerate(nets):
            got[i] |= {(k, p) for k, kind, p in net.poll(0.05) if kind == 7}
    for i in range(3):
        assert got[i] == {(j, f"{j}->{i}".encode()) for j in range(3) if j != i} | {
            (DRIVER, b"hello")}
    for net in [*nets, driver]:
        net.close()


def test_own_certificate_is_checked_before_anything_starts(tmp_path, hosts_file):
    hosts = load_hosts(hosts_file(2))
    issue(tmp_path / "other", {"p1": ()})
    with pytest.raises(ConfigError, match="--cert=.*not signed by the session's CA"):
        Identity(hosts, "p1", tmp_path / "other" / "p1.crt", tmp_path / "other" / "p1.key")
    certs = tmp_path / "certs"
    with pytest.raises(ConfigError, match="certificate of 'p0', not of 'p1'"):
        Identity(hosts, "p1", certs / "p0.crt", certs / "p0.key")
    with pytest.raises(ConfigError, match="--key=.*not the key of"):
        Identity(hosts, "p1", certs / "p1.crt", certs / "p0.key")
    with pytest.raises(ConfigError, match="--cert=.*no such file"):
        Identity(hosts, "p1", certs / "nope.crt")


def _rogue_context(folder, name, side):
    """A TLS context whose certificate (named ``name``) another CA signed."""
    paths = issue(folder, {name: ("127.0.0.1",)})
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if side == "server" else ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(paths[name + ".crt"], paths[name + ".key"])
    return ctx


def test_a_peer_signed_by_another_ca_is_refused_on_both_ends(tmp_path, hosts_file):
    hosts = load_hosts(hosts_file(2, driver=None))
    # p0 accepts: an impostor presenting "p1" from another CA is dropped; p0 names p1
    run = _run(connect, hosts, Identity(hosts, "p0"), timeout=3)
    ctx = _rogue_context(tmp_path / "rogue", "p1", "client")
    refused = None
    deadline = time.monotonic() + 10
    while refused is None and time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", hosts.party(0).port), timeout=5) as raw:
                with ctx.wrap_socket(raw) as s:
                    s.sendall(b"x" * 8)
                    refused = s.recv(10)
        except ConnectionRefusedError:
            time.sleep(0.1)
        except (ssl.SSLError, OSError) as exc:
            refused = exc
    assert isinstance(refused, (ssl.SSLError, OSError)) or refused == b""
    _join(run)
    assert isinstance(run["error"], PartyTimeout) and run["error"].party == 1
    assert "party 1 (p1 at 127.0.0.1" in str(run["error"])
    # p1 dials: a server presenting "p0" from another CA is refused, naming party 0
    server = socket.create_server(("127.0.0.1", hosts.party(0).port))
    sctx = _rogue_context(tmp_path / "rogue2", "p0", "server")

    def serve():
        conn, _ = server.accept()
        try:
            sctx.wrap_socket(conn, server_side=True).recv(10)
        except (ssl.SSLError, OSError):
            pass
    threading.Thread(target=serve, daemon=True).start()
    with pytest.raises(PartyTimeout, match="party 0 .*certificate the session's CA did not "
                                           "sign") as info:
        connect(hosts, Identity(hosts, "p1"), timeout=5)
    assert info.value.party == 0
    server.close()


def test_a_party_of_another_session_is_refused(tmp_path, hosts_file):
    path = hosts_file(2, driver=None)
    hosts = load_hosts(path)
    other = tmp_path / "other.toml"
    other.write_text(path.read_text().replace('"test-session"', '"another-session"'))
    run = _run(connect, hosts, Identity(hosts, "p0"), timeout=3)
    theirs = load_hosts(other)
    with pytest.raises(PartyTimeout, match="party 0 .*runs another session"):
        connect(theirs, Identity(theirs, "p1"), timeout=5)
    _join(run)
    assert isinstance(run["error"], PartyTimeout)


def test_a_peer_that_leaves_or_stays_silent_is_named(tmp_path, hosts_file):
    hosts = load_hosts(hosts_file(2, driver=None))
    run = _run(connect, hosts, Identity(hosts, "p0"), timeout=20)
    net1 = connect(hosts, Identity(hosts, "p1"), timeout=20)
    _join(run)
    net0 = run["result"]
    with pytest.raises(PartyTimeout, match=r"party 1 \(p1 at .*\) sent nothing for 0.3 s"):
        pump(net0, [], lambda k, m: [], lambda: False, lambda: [1], 0.3)
    net1.close()
    with pytest.raises(PartyTimeout, match=r"party 1 \(p1 at .*\) left") as info:
        pump(net0, [], lambda k, m: [], lambda: False, lambda: [1], 10)
    assert info.value.party == 1
    net0.close()


def test_frames_are_bounded():
    server = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(server.getsockname())
    b, _ = server.accept()
    server.close()
    link = Link(b, "party 3", max_frame=1000)
    a.sendall(struct.pack("<IB", 1001, 1))
    time.sleep(0.05)
    with pytest.raises(ProtocolError, match="party 3 sent a frame of 1001 bytes: at most 1000"):
        link.read()
    with pytest.raises(ProtocolError, match="at most 1000"):
        link.queue(1, b"x" * 1001)
    a.close()
    b.close()


def test_keygen_peers_with_bad_bytes_or_other_parameters_are_named(tmp_path, hosts_file):
    from veil.crypto.hosts import keygen_on_hosts
    from veil.net.mesh import MSG

    hosts = load_hosts(hosts_file(3, driver=None))
    kw = {"bits": 384, "threshold": 2, "insecure_ok": True, "timeout": 10,
          "connect_timeout": 20}
    # party 2 sends junk instead of its opening message
    runs = [_run(keygen_on_hosts, hosts, Identity(hosts, f"p{i}"), **kw) for i in range(2)]
    net = connect(hosts, Identity(hosts, "p2"), timeout=20)
    for j in (0, 1):
        net.send(j, MSG, b"junk")
    _join(*runs)
    net.close()
    for r in runs:   # named first-hand, or quoted from the party that saw it first
        assert isinstance(r["error"], PartyError)
        assert r["error"].party == 2 or "reports a failure" in str(r["error"])
        assert "party 2 (p2 at 127.0.0.1" in str(r["error"]) and "malformed" in str(r["error"])
    # the same three in threads succeed (a party done first leaves without harm) ...
    runs = [_run(keygen_on_hosts, hosts, Identity(hosts, f"p{i}"), **kw) for i in range(3)]
    _join(*runs)
    assert all("result" in r for r in runs), [r.get("error") for r in runs]
    # ... but party 2 configured with another threshold is refused by name, before any key
    kw2 = dict(kw, threshold=3)
    runs = [_run(keygen_on_hosts, hosts, Identity(hosts, f"p{i}"), **(kw2 if i == 2 else kw))
            for i in range(3)]
    _join(*runs)
    for r in runs[:2]:
        assert isinstance(r["error"], ConfigError)
        assert "party 2 (p2 at 127.0.0.1" in str(r["error"]) and "other parameters" in str(
            r["error"])
    assert isinstance(runs[2]["error"], ConfigError)


# -- blame only with evidence, accepts that cannot be stalled, bounded buffers (issue 29) ----
def _linked(hosts, names, **kw):
    runs = [_run(connect, hosts, Identity(hosts, name), timeout=20, **kw) for name in names]
    _join(*runs)
    return [r["result"] for r in runs]


def test_an_abort_frame_names_its_reporter_not_the_party_it_accuses(hosts_file):
    """Attack: authenticated party 2 sends party 1 an abort frame blaming honest party 0;
    party 1 raised ``PartyError(party=0)`` and repeated the accusation. An abort now names
    only who reported it: what it says of others is its account, not evidence."""
    from veil.net.mesh import _ABORT

    hosts = load_hosts(hosts_file(3, driver=None))
    nets = _linked(hosts, ["p0", "p1", "p2"])
    accusation = b'{"party": 0, "message": "party 0 sent garbage"}'
    nets[2].send(1, _ABORT, accusation)
    with pytest.raises(PartyError, match=r"party 2 \(p2 at .*\) reports a failure") as info:
        pump(nets[1], [], lambda k, m: [], lambda: False, lambda: [0, 2], 10)
    assert info.value.party == 2
    for net in nets:
        net.close()


def test_idle_connections_cannot_stall_the_accepting_party(hosts_file, monkeypatch):
    """Attack: anyone opens plain TCP connections to a party's port and sends nothing. The
    party handshook one connection at a time, each waiting its full handshake time, so a
    few idle sockets held it past its deadline and it blamed the honest peer for not
    connecting. Handshakes now run side by side, each under its own limit."""
    from veil.net import mesh

    monkeypatch.setattr(mesh, "_HANDSHAKE_S", 2.0)
    hosts = load_hosts(hosts_file(2, driver=None))
    p0 = hosts.parties[0]
    first = _run(connect, hosts, Identity(hosts, "p0"), timeout=8)
    idle = []
    for _ in range(50):            # wait until p0 listens, then hold 6 idle connections
        try:
            idle.append(socket.create_connection((p0.host, p0.port), timeout=1))
        except OSError:
            time.sleep(0.05)
        if len(idle) == 6:
            break
    second = _run(connect, hosts, Identity(hosts, "p1"), timeout=8)
    _join(first, second)
    for s in idle:
        s.close()
    assert "result" in first and "result" in second, (first.get("error"), second.get("error"))
    first["result"].close()
    second["result"].close()


def test_a_key_generation_link_buffers_no_more_than_its_largest_message(hosts_file):
    """Attack: a peer announced a frame of 512 MiB (under the old 1 GiB bound) and streamed
    it: every party buffered it. Key generation now bounds a frame by its largest message
    (KeygenParams.max_message) and refuses a longer one by the sender's name at once."""
    from veil.crypto.hosts import keygen_on_hosts
    from veil.net.mesh import MSG

    hosts = load_hosts(hosts_file(3, driver=None))
    kw = {"bits": 384, "threshold": 2, "insecure_ok": True, "timeout": 10,
          "connect_timeout": 20}
    runs = [_run(keygen_on_hosts, hosts, Identity(hosts, f"p{i}"), **kw) for i in range(2)]
    net = connect(hosts, Identity(hosts, "p2"), timeout=20)
    for j in (0, 1):
        link = net.links[j]
        link.sock.setblocking(True)
        link.sock.sendall(struct.pack("<IB", 1 << 29, MSG) + bytes(1 << 16))
    _join(*runs)
    net.close()
    for r in runs:
        assert isinstance(r["error"], PartyError) and r["error"].party == 2
        assert "536870912 bytes: at most" in str(r["error"])
