"""The multi-process runtime: same results as the local one, and no hang on a silent party."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
import pytest

from veil.errors import ProtocolError
from veil.mpc import PartyTimeout, Session
from veil.random import default_rng

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses POSIX signals")
U = 2.0**-16


def _program(s):
    x = default_rng(1).uniform(-5, 5, size=(6, 4))
    w = default_rng(2).uniform(-1, 1, size=4)
    a, b = s.share(x, owner=0), s.share(w, owner=1)
    z = a @ b
    return {"z": z.reveal(), "lt": (z < 0).reveal(), "sig": z.sigmoid().reveal(to=2),
            "max": a.max(axis=0).reveal()}


def test_process_runtime_matches_local():
    with Session(parties=3, rng=11) as s:
        local = _program(s)
        local_cost = s.cost()
    with Session(parties=3, runtime="process", rng=11, timeout=20) as s:
        remote = _program(s)
        remote_cost = s.cost()
        assert len(set(s._runtime.pids)) == 3 and os.getpid() not in s._runtime.pids
    assert np.array_equal(local["lt"], remote["lt"])
    for key in ("z", "sig", "max"):
        assert np.max(np.abs(local[key] - remote[key])) <= 8 * U, key
    # the same protocol: the same rounds and bytes per party
    assert remote_cost.rounds == local_cost.rounds
    assert remote_cost.sent == local_cost.sent and remote_cost.dealer == local_cost.dealer


def test_silent_party_gives_a_timeout_naming_it():
    s = Session(parties=3, runtime="process", rng=0, timeout=1.0)
    try:
        a = s.share(np.array([1.5, -2.0]), owner=0)
        victim = s._runtime.pids[2]
        os.kill(victim, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(PartyTimeout, match="party 2 stopped answering") as info:
            (a * a).reveal()
        assert info.value.party == 2
        assert time.monotonic() - start < 10  # no hang: timeout + clean-up
        with pytest.raises(ProtocolError, match="closed"):
            _ = a + 1
    finally:
        s.close()


def test_crashed_party_is_reported():
    with Session(parties=3, runtime="process", rng=0, timeout=5.0) as s:
        a = s.share(np.array([1.0, 2.0]), owner=0)
        os.kill(s._runtime.pids[1], signal.SIGKILL)
        with pytest.raises(ProtocolError, match="party 1"):
            (a * a).reveal()


def _impostor(port: int, body: bytes, got: list) -> None:
    """Connect first and claim to be a party; record whatever the victim sends back."""
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack("<IB", len(body), 0) + body)
        s.settimeout(3)
        try:
            while chunk := s.recv(1 << 16):
                got.append(chunk)
        except OSError:
            pass


def test_an_impostor_connecting_first_gets_no_configuration(monkeypatch):
    """A process that claims party 0 before the real one must get neither the configuration
    nor the dealer's seed, and the session must still run with the real parties."""
    import struct
    import subprocess
    import threading

    from veil.mpc import runtime

    got: list[bytes] = []
    threads = []
    real_popen = subprocess.Popen

    def popen(args, **kwargs):
        if not threads:  # before the first party starts: the impostor is first in line
            port = int(args[-1])
            for body in (struct.pack("<HH", 0, 1) + b"\0" * 48, struct.pack("<HH", 0, 1)):
                t = threading.Thread(target=_impostor, args=(port, body, got))
                t.start()
                threads.append(t)
            time.sleep(0.3)
        return real_popen(args, **kwargs)

    monkeypatch.setattr(runtime.subprocess, "Popen", popen)
    with Session(parties=2, runtime="process", rng=3, timeout=20) as s:
        a = s.share(np.array([3.0, -1.0]), owner=0)
        assert np.allclose((a * a).reveal(), [9.0, 1.0], atol=1e-3)
    for t in threads:
        t.join()
    assert b"".join(got) == b""
