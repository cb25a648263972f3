"""Certificates for parties that authenticate each other: one CA, one certificate per name.

:func:`issue` makes a certificate authority (ECDSA P-256, self-signed, ``ca.crt``) and,
signed by it, one certificate and private key per identity (``NAME.crt`` / ``NAME.key``):
the identity is the certificate's common name (and a DNS subject alternative name), and
the host names / IP addresses a server presents are added as further alternative names.
Every certificate can serve both ends of a mutually authenticated TLS link (server and
client authentication). The CA's private key is not kept: nothing else can be signed with
it later. Keys are written by :func:`veil._io.write_private`: mode 0600, never through a
symlink nor over an existing key unless ``force``.

For tests and private deployments. An organisation with its own PKI issues its own
certificates (the common name must be the party's name in the hosts file,
:mod:`veil.net.hosts`); each party keeps its key on its own host.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from veil._io import atomic_write, check_absent, write_private
from veil.errors import ConfigError

__all__ = ["issue"]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def issue(directory: str | os.PathLike, identities: Mapping[str, Sequence[str]], *,
          ca_name: str = "veil CA", days: int = 30, force: bool = False) -> dict[str, Path]:
    """Write ``ca.crt`` and ``NAME.crt`` / ``NAME.key`` for each identity into ``directory``.

    ``identities``: name -> extra host names and IP addresses its certificate is valid for
    (may be empty). Returns the paths: ``"ca"``, and ``NAME + ".crt"`` / ``NAME + ".key"``.
    An existing key is replaced only with ``force`` (ConfigError before anything is
    written otherwise).
    """
    if not identities:
        raise ConfigError("identities={} is not allowed: name at least one identity")
    for name in identities:
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise ConfigError(f"identity name {name!r} is not allowed: a non-empty name "
                              "without '/' that does not start with '.'")
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = Path(directory)
    check_absent([out / f"{n}.key" for n in identities], force=force, what="TLS key")
    out.mkdir(parents=True, exist_ok=True)
    paths = {"ca": out / "ca.crt"}
    atomic_write(paths["ca"], ca.public_bytes(serialization.Encoding.PEM))
    for name, hosts in identities.items():
        key = ec.generate_private_key(ec.SECP256R1())
        alt = _alt_names([name, *[h for h in hosts if h != name]])
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(valid[0]).not_valid_after(valid[1])
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        paths[name + ".crt"] = out / f"{name}.crt"
        paths[name + ".key"] = out / f"{name}.key"
        atomic_write(paths[name + ".crt"], cert.public_bytes(serialization.Encoding.PEM))
        write_private(paths[name + ".key"], key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()), force=force, what="TLS key")
    return paths
