"""The hosts file: who takes part in a session across hosts, and where each party listens.

A TOML file, the same on every host::

    session = "study-2026-11"       # the session's name: parties of another session refuse
    ca = "certs/ca.crt"             # the CA that signed every certificate (relative paths:
                                    # to this file's folder)
    driver = "analyst"              # optional: the identity that drives MPC sessions

    [[party]]
    index = 0
    name = "hospital-a"             # the common name of this party's certificate
    address = "10.0.0.1:7001"       # host:port it listens on

    [[party]]
    index = 1
    name = "hospital-b"
    address = "10.0.0.2:7001"

Parties are numbered 0..n-1 (each index once), names are unique (and differ from the
driver's). Every party's certificate and key default to ``NAME.crt`` / ``NAME.key`` beside
the CA certificate (:func:`veil.net.certs.issue` writes them there). Any error names the
file, the key and the value, and nothing is started.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veil.errors import ConfigError

__all__ = ["Host", "Hosts", "load_hosts"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_MAX_PARTIES = 64


@dataclass(frozen=True)
class Host:
    """One party: ``index``, ``name`` (its certificate's common name), ``host``, ``port``."""

    index: int
    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"party {self.index} ({self.name} at {self.address})"


@dataclass(frozen=True)
class Hosts:
    """A parsed hosts file (see the module docstring)."""

    session: str
    ca: Path
    parties: tuple[Host, ...]
    driver: str | None = None
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.parties)

    def party(self, which: int | str, name: str = "--party") -> Host:
        """The party with index (or name) ``which``; ConfigError naming ``name`` if none."""
        for host in self.parties:
            if which in (host.index, host.name) or (
                    isinstance(which, str) and which.isdigit() and int(which) == host.index):
                return host
        allowed = ", ".join(f"{h.index} ({h.name})" for h in self.parties)
        raise ConfigError(f"{name}={which!r} is not allowed: the hosts file "
                          f"{self.path or ''} lists parties {allowed}")

    def by_name(self, name: str) -> Host | None:
        return next((h for h in self.parties if h.name == name), None)

    def cert_paths(self, name: str) -> tuple[Path, Path]:
        """The default certificate and key of identity ``name``: beside the CA."""
        return self.ca.parent / f"{name}.crt", self.ca.parent / f"{name}.key"

    def digest(self) -> bytes:
        """SHA-256 over the session and the party list: every party must agree on it."""
        text = "\n".join([self.session, self.driver or ""]
                         + [f"{h.index} {h.name} {h.host} {h.port}" for h in self.parties])
        return hashlib.sha256(b"veil-hosts/1\n" + text.encode()).digest()


def _fail(path: Any, key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"hosts file {path}: {key}={value!r} is not allowed: {allowed}")


def _address(path: Path, key: str, value: Any) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise _fail(path, key, value, "a string host:port")
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _fail(path, key, value, "host:port with a port in 1..65535")
    return host, int(port)


def load_hosts(path: str | os.PathLike, *, need_ca: bool = True) -> Hosts:
    """Read and check a hosts file (module docstring); ConfigError on any problem.
    ``need_ca=False``: the CA certificate need not exist yet (to issue it)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--hosts={str(path)!r} is not allowed: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"hosts file {path} cannot be read: {exc}") from None
    unknown = sorted(set(data) - {"session", "ca", "driver", "party"})
    if unknown:
        raise _fail(path, unknown[0], data[unknown[0]], "the keys are session, ca, driver "
                    "and [[party]] tables")
    session = data.get("session")
    if not isinstance(session, str) or not session.strip():
        raise _fail(path, "session", session, "a non-empty string naming the session")
    ca = data.get("ca")
    if not isinstance(ca, str) or not ca:
        raise _fail(path, "ca", ca, "the path of the CA certificate (PEM)")
    ca_path = (path.parent / ca).resolve()
    if need_ca and not ca_path.is_file():
        raise _fail(path, "ca", ca, f"no such file ({ca_path})")
    driver = data.get("driver")
    if driver is not None and (not isinstance(driver, str) or not _NAME.match(driver)):
        raise _fail(path, "driver", driver, "a name of letters, digits, '.', '_', '-'")
    rows = data.get("party")
    if not isinstance(rows, list) or not 2 <= len(rows) <= _MAX_PARTIES:
        raise _fail(path, "party", rows, f"2..{_MAX_PARTIES} [[party]] tables")
    parties = []
    for k, row in enumerate(rows):
        where = f"party[{k}]"
        if not isinstance(row, dict) or set(row) != {"index", "name", "address"}:
            raise _fail(path, where, row, "a table with exactly index, name and address")
        index, name = row["index"], row["name"]
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < len(rows):
            raise _fail(path, f"{where}.index", index, f"an integer in 0..{len(rows) - 1}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise _fail(path, f"{where}.name", name,
                        "1..63 letters, digits, '.', '_', '-' (the certificate's name)")
        parties.append(Host(index, name, *_address(path, f"{where}.address", row["address"])))
    for attr in ("index", "name", "address"):
        seen: set = set()
        for k, h in enumerate(parties):
            value = getattr(h, attr)
            if value in seen:
                raise _fail(path, f"party[{k}].{attr}", value, f"each party's {attr} once")
            seen.add(value)
    if driver is not None and any(h.name == driver for h in parties):
        raise _fail(path, "driver", driver, "a name that is not also a party's")
    return Hosts(session, ca_path, tuple(sorted(parties, key=lambda h: h.index)), driver,
                 path)
