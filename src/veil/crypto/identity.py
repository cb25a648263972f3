"""Party identities: Ed25519 signing keys bound to party indices.

Ed25519 (Bernstein, Duif, Lange, Schwabe & Yang 2012; RFC 8032) through ``cryptography``:
a 32-byte private key, a 32-byte public key, 64-byte deterministic signatures, existentially
unforgeable under chosen-message attack. A protocol in which a party must not take a
relaying server's word for what another party said has that party sign its statement, and
every reader verify it against an **identity table**: index -> public key, which each
party trusts on its own and which is not the relay's to swap. Where the table comes from
is the deployment's business: each party makes its key pair and publishes the public key
out of band (a PKI, a pinned configuration file, a certificate); in a simulation the runner
makes every key pair (:func:`make_identities`, from the CSPRNG) and hands each party its
private key and a copy of the table. :func:`write_identities` writes key files for a
deployment whose parties are set up from one place (each party's ``identity-<i>.key``,
readable by its owner only, to be moved to that party's machine; the public table
``identities.json``); :func:`write_identity` is one party making its own, with no dealer
(``identity-<i>.key`` and its one-entry table ``identity-<i>.json`` to publish);
:func:`read_key`, :func:`read_table` and :func:`read_tables` (the union of the published
tables) read them back.

Every statement a protocol signs starts with its own domain tag (``b"veil.<protocol>.<what>|"``)
and carries the round number, so a signature made for one purpose or one round verifies for
no other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from veil._io import check_absent, write_private
from veil._validation import check_int
from veil.errors import ConfigError

__all__ = ["PUBLIC", "SIGNATURE", "check_table", "make_identities", "public_identity",
           "read_key", "read_table", "read_tables", "sign", "verify", "write_identities",
           "write_identity", "write_key", "write_table"]

#: bytes of an Ed25519 public (and private) key
PUBLIC = 32
#: bytes of an Ed25519 signature
SIGNATURE = 64


def make_identities(parties: int) -> tuple[list[bytes], tuple[bytes, ...]]:
    """``parties`` fresh Ed25519 key pairs from the CSPRNG (OpenSSL's): (the private keys, one
    per party; the public keys, the identity table). In a deployment each party makes its
    own and publishes the public key."""
    private = [Ed25519PrivateKey.generate() for _ in range(check_int(parties, "parties",
                                                                     low=1))]
    return ([k.private_bytes_raw() for k in private],
            tuple(k.public_key().public_bytes_raw() for k in private))


def public_identity(private: bytes) -> bytes:
    """The public key of a 32-byte Ed25519 private key (ConfigError if it is not one)."""
    if not isinstance(private, bytes) or len(private) != PUBLIC:
        raise ConfigError(f"identity key of type {type(private).__name__} is not allowed: "
                          f"expected {PUBLIC} bytes (an Ed25519 private key)")
    return Ed25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


def sign(private: bytes, statement: bytes) -> bytes:
    """The 64-byte Ed25519 signature of ``statement``."""
    return Ed25519PrivateKey.from_private_bytes(private).sign(statement)


def verify(public: bytes | None, signature: object, statement: bytes) -> bool:
    """Whether ``signature`` is a valid signature of ``statement`` under ``public``; False
    for anything else a peer may send (wrong type or length, not a curve point, None)."""
    if not (isinstance(public, bytes) and len(public) == PUBLIC and
            isinstance(signature, bytes) and len(signature) == SIGNATURE):
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, statement)
    except (InvalidSignature, ValueError):
        return False
    return True


def check_table(table: Mapping[int, bytes], name: str = "identities") -> dict[int, bytes]:
    """An identity table (party index -> 32-byte public key) as a new dict (ConfigError
    naming the bad entry otherwise)."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{name} of type {type(table).__name__} is not allowed: expected a "
                          "mapping from party index to a 32-byte Ed25519 public key")
    out = {}
    for key, public in table.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 0 or \
                not isinstance(public, bytes) or len(public) != PUBLIC:
            raise ConfigError(f"{name}[{key!r}] is not allowed: expected an index >= 0 "
                              f"mapped to a {PUBLIC}-byte Ed25519 public key")
        out[key] = public
    return out


def write_key(path: str | os.PathLike, private: bytes, *, force: bool = False) -> None:
    """Write a 32-byte private identity key to ``path``, readable by its owner only
    (:func:`veil._io.write_private`: an existing ``path`` is replaced only with ``force``)."""
    public_identity(private)
    write_private(path, private, force=force, what="identity key")


def write_table(path: str | os.PathLike, table: Mapping[int, bytes]) -> Path:
    """Write an identity table as JSON, ``{"i": "<public key, hex>"}``; returns its path."""
    path = Path(path)
    path.write_text(json.dumps({str(i): k.hex() for i, k in sorted(check_table(table).items())},
                               indent=1))
    return path


def write_identities(directory: str | os.PathLike, parties: int, *,
                     force: bool = False) -> Path:
    """Make ``parties`` key pairs and write them under ``directory``: ``identity-<i>.key``
    (party i's 32-byte private key, mode 0600) and ``identities.json`` (the table,
    ``{"i": "<public key, hex>"}``). Returns the table's path. Existing key files are
    replaced only with ``force`` (ConfigError before anything is written otherwise)."""
    private, public = make_identities(parties)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    keys = [out / f"identity-{i}.key" for i in range(parties)]
    check_absent(keys, force=force, what="identity key")
    for key, secret in zip(keys, private):
        write_key(key, secret, force=force)
    return write_table(out / "identities.json", dict(enumerate(public)))


def write_identity(directory: str | os.PathLike, party: int, *,
                   force: bool = False) -> tuple[Path, Path]:
    """Party ``party`` makes its own key pair, with no dealer: ``identity-<party>.key``
    (its private key, mode 0600; ConfigError if the file exists, unless ``force`` -- an
    identity is never replaced silently) and ``identity-<party>.json`` (its one-entry table,
    to publish). Returns both paths."""
    check_int(party, "party", low=0)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    key = out / f"identity-{party}.key"
    (private,), (public,) = make_identities(1)
    write_key(key, private, force=force)
    return key, write_table(out / f"identity-{party}.json", {party: public})


def read_key(path: str | os.PathLike) -> bytes:
    """A private identity key written by :func:`write_identities` (ConfigError if the file
    is missing or is not 32 bytes)."""
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"identity key file {os.fspath(path)!r} cannot be read: "
                          f"{exc.strerror}") from None
    public_identity(key)
    return key


def read_table(path: str | os.PathLike) -> dict[int, bytes]:
    """An identity table written by :func:`write_identities` (ConfigError naming what is
    wrong otherwise)."""
    try:
        raw = json.loads(Path(path).read_text())
        table = {int(k): bytes.fromhex(v) for k, v in raw.items()}
    except OSError as exc:
        raise ConfigError(f"identity table {os.fspath(path)!r} cannot be read: "
                          f"{exc.strerror}") from None
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(f"identity table {os.fspath(path)!r} is not a JSON object of "
                          "party index -> hex public key") from None
    return check_table(table, f"identity table {os.fspath(path)!r}")


def read_tables(paths: Sequence[str | os.PathLike]) -> dict[int, bytes]:
    """The union of several identity tables (e.g. each party's own
    ``identity-<i>.json``); ConfigError if two of them give one index different keys."""
    merged: dict[int, bytes] = {}
    for path in paths:
        for index, key in read_table(path).items():
            if merged.setdefault(index, key) != key:
                raise ConfigError(f"identity table {os.fspath(path)!r} gives party {index} "
                                  "another key than an earlier table: which one is "
                                  f"party {index}'s must be settled out of band")
    return merged
