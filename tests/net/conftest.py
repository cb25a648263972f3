"""Hosts files with fresh certificates on 127.0.0.1, and party processes started from them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from veil.net import load_hosts
from veil.net.certs import issue

SRC = Path(__file__).resolve().parents[2] / "src"


def free_ports(n: int) -> list[int]:
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(n)]
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_hosts(folder: Path, n: int, *, driver: str | None = "analyst",
                session: str = "test-session", certs: bool = True) -> Path:
    """A hosts file of n parties p0..p{n-1} on free loopback ports, certificates beside."""
    ports = free_ports(n)
    lines = [f'session = "{session}"', 'ca = "certs/ca.crt"']
    if driver:
        lines.append(f'driver = "{driver}"')
    for i, port in enumerate(ports):
        lines += ["", "[[party]]", f"index = {i}", f'name = "p{i}"',
                  f'address = "127.0.0.1:{port}"']
    path = folder / "hosts.toml"
    path.write_text("\n".join(lines) + "\n")
    if certs:
        names = {f"p{i}": ("127.0.0.1",) for i in range(n)}
        if driver:
            names[driver] = ()
        issue(folder / "certs", names)
    return path


@pytest.fixture
def hosts_file(tmp_path):
    def make(n: int = 2, **kw) -> Path:
        return write_hosts(tmp_path, n, **kw)
    return make


def veil_process(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    """``veil ARGS`` in its own process (output captured)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return subprocess.Popen([sys.executable, "-m", "veil.cli.main", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"process did not finish: {out}") from None
    return proc.returncode, out


__all__ = ["free_ports", "write_hosts", "veil_process", "finish", "load_hosts"]
