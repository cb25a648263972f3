"""TLS certificates for a Flower deployment: a self-signed CA and a server certificate.

:func:`self_signed` writes ``ca.crt`` (a CA, ECDSA P-256, self-signed) and ``server.crt``
/ ``server.key`` (the SuperLink's certificate, signed by that CA, valid for the given host
names and IP addresses) into a directory. The SuperLink serves with ``--ssl-ca-certfile
ca.crt --ssl-certfile server.crt --ssl-keyfile server.key``; every SuperNode and ``flwr``
trusts ``--root-certificates ca.crt``. For tests and private deployments: an organisation
with its own PKI uses its own certificates. The CA's private key is not kept (nothing else
can be signed with it later); the server key is written readable by its owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from veil.errors import ConfigError

__all__ = ["self_signed"]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def self_signed(directory: str | os.PathLike,
                hosts: Sequence[str] = ("localhost", "127.0.0.1"),
                days: int = 30) -> dict[str, Path]:
    """Write ``ca.crt``, ``server.crt`` and ``server.key`` into ``directory``; their paths
    by name (``"ca"``, ``"cert"``, ``"key"``). ``hosts``: DNS names and IP addresses the
    server certificate is valid for."""
    if not hosts:
        raise ConfigError("hosts=() is not allowed: name at least one host of the server")
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("veil federation CA"))
          .issuer_name(_name("veil federation CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"ca": out / "ca.crt", "cert": out / "server.crt", "key": out / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(paths["key"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))
    return paths
