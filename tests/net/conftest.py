"""Hosts files with fresh certificates on 127.0.0.1, and party processes started from them."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from veil.net.certs import issue


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
        issue(folder / "certs", names, force=True)   # a test may rewrite its session
    return path


@pytest.fixture
def hosts_file(tmp_path):
    def make(n: int = 2, **kw) -> Path:
        return write_hosts(tmp_path, n, **kw)
    return make


class Forks:
    """``veil ARGS`` in forked children of this test process (no interpreter start-up);
    each child's output goes to a log file. Children left running are killed at teardown."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list = []

    def start(self, args: list[str], name: str, before=None):
        """Start ``veil ARGS``; ``before()`` runs first in the child (e.g. to plant a crash)."""
        import multiprocessing

        log = self.folder / f"{name}.log"

        def child() -> None:
            from veil.cli.main import main
            with open(log, "w") as fh:
                os.dup2(fh.fileno(), 1)
                os.dup2(fh.fileno(), 2)
                sys.stdout = sys.stderr = fh   # pytest's capture objects are the parent's
                if before is not None:
                    before()
                code = main(args)
                fh.flush()
            os._exit(code)

        proc = multiprocessing.get_context("fork").Process(target=child, daemon=True)
        proc.start()
        proc.log = log
        self.procs.append(proc)
        return proc

    def join(self, proc, timeout: float = 120) -> tuple[int, str]:
        """(exit code, output) of a child."""
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            raise AssertionError(f"process did not finish: {proc.log.read_text()}")
        return proc.exitcode, proc.log.read_text()

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join()


@pytest.fixture
def forks(tmp_path):
    f = Forks(tmp_path)
    yield f
    f.close()
