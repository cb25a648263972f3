"""Certificates for parties that authenticate each other: one CA, one certificate per name.

Each organisation makes its own private key (the CA never sees one):

1. the CA's operator runs :func:`new_ca` once: ``ca.crt`` (public, to every party) and
   ``ca.key`` (0600; it stays on the CA's machine);
2. each party runs :func:`request` on its own machine: ``NAME.key`` (0600, never leaves it)
   and ``NAME.csr``, a certificate signing request for its name and the host names / IP
   addresses it is reached at, signed with that key (proof that it holds it);
3. the CA runs :func:`sign` on each request it is given: it checks the request's signature,
   that its name is one of the session's and that it carries the addresses the session
   lists for it, and writes ``NAME.crt``, valid for exactly the names and addresses in the
   request. :func:`fingerprint` (SHA-256 of the public key) is printed on both sides: the
   CA compares it with the one the party tells it over another channel, so a request
   swapped on the way is not signed.

The CA can certify any key for any name of the session (so it can let someone impersonate
a party: whoever runs it is trusted for that, and should be a party or the session's
organiser, not the aggregator of a run it would attack); it can neither read traffic nor
act as a party without such a forged certificate, and it never holds a party's private key.

:func:`issue` is the single-machine shortcut (tests, demos): one process makes the CA and
every party's key and certificate in one folder, and discards the CA's key.

The identity is the certificate's common name (and a DNS subject alternative name); the
host names / IP addresses a server presents are further alternative names. Every
certificate can serve both ends of a mutually authenticated TLS link (server and client
authentication). Keys are ECDSA P-256, written by :func:`veil._io.write_private`: mode
0600, never through a symlink nor over an existing key unless ``force``.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from veil._io import atomic_write, check_absent, write_private
from veil.errors import ConfigError

__all__ = ["fingerprint", "issue", "new_ca", "read_request", "request", "sign"]


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


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    from veil._validation import check_int

    now = datetime.datetime.now(datetime.UTC)
    return (now - datetime.timedelta(minutes=5),
            now + datetime.timedelta(days=check_int(days, "days", low=1, high=3650)))


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ConfigError(f"identity name {name!r} is not allowed: a non-empty name "
                          "without '/' that does not start with '.'")
    return name


def _ca(name: str, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    valid = _validity(days)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(name: str, public_key: Any, alt: Sequence[x509.GeneralName], ca: x509.Certificate,
          ca_key: Any, days: int) -> x509.Certificate:
    """``name``'s certificate for ``public_key``, valid for the alternative names ``alt``."""
    valid = _validity(days)
    return (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def _pem(cert: x509.Certificate | x509.CertificateSigningRequest) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def fingerprint(public_key: Any) -> str:
    """SHA-256 of a public key (DER SubjectPublicKeyInfo), hex: what a party and the CA
    compare over another channel before the CA signs."""
    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def issue(directory: str | os.PathLike, identities: Mapping[str, Sequence[str]], *,
          ca_name: str = "veil CA", days: int = 30, force: bool = False) -> dict[str, Path]:
    """Write ``ca.crt`` and ``NAME.crt`` / ``NAME.key`` for each identity into ``directory``
    (the single-machine shortcut: module docstring).

    ``identities``: name -> extra host names and IP addresses its certificate is valid for
    (may be empty). Returns the paths: ``"ca"``, and ``NAME + ".crt"`` / ``NAME + ".key"``.
    An existing key is replaced only with ``force`` (ConfigError before anything is
    written otherwise).
    """
    if not identities:
        raise ConfigError("identities={} is not allowed: name at least one identity")
    for name in identities:
        _check_name(name)
    ca, ca_key = _ca(ca_name, days)
    out = Path(directory)
    check_absent([out / f"{n}.key" for n in identities], force=force, what="TLS key")
    out.mkdir(parents=True, exist_ok=True)
    paths = {"ca": out / "ca.crt"}
    atomic_write(paths["ca"], _pem(ca))
    for name, hosts in identities.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _leaf(name, key.public_key(), _alt_names([name, *[h for h in hosts
                                                                 if h != name]]),
                     ca, ca_key, days)
        paths[name + ".crt"] = out / f"{name}.crt"
        paths[name + ".key"] = out / f"{name}.key"
        atomic_write(paths[name + ".crt"], _pem(cert))
        write_private(paths[name + ".key"], _private_pem(key), force=force, what="TLS key")
    return paths


def new_ca(cert: str | os.PathLike, *, name: str = "veil CA", days: int = 365,
           force: bool = False) -> dict[str, Any]:
    """The CA's operator, once: write the CA certificate ``cert`` and its private key
    ``ca.key`` beside it (0600; it signs requests with :func:`sign` and never leaves this
    machine). Returns ``{"ca": cert, "key": key, "fingerprint": ...}``; an existing CA
    key or certificate is replaced only with ``force``."""
    cert = Path(cert)
    key_path = cert.with_name("ca.key")
    check_absent([key_path, cert], force=force, what="CA file")
    ca, ca_key = _ca(name, days)
    cert.parent.mkdir(parents=True, exist_ok=True)
    write_private(key_path, _private_pem(ca_key), force=force, what="CA key")
    atomic_write(cert, _pem(ca))
    return {"ca": cert, "key": key_path, "fingerprint": fingerprint(ca.public_key())}


def request(directory: str | os.PathLike, name: str, hosts: Sequence[str] = (), *,
            force: bool = False) -> dict[str, Any]:
    """A party, on its own machine: write its private key ``NAME.key`` (0600, it stays
    here) and ``NAME.csr``, its signing request for ``name`` and the host names / IP
    addresses ``hosts`` it is reached at, into ``directory``. Returns the paths (``"key"``,
    ``"csr"``) and the key's ``"fingerprint"`` (to tell the CA over another channel). An
    existing key is replaced only with ``force``."""
    name = _check_name(name)
    out = Path(directory)
    paths = {"key": out / f"{name}.key", "csr": out / f"{name}.csr"}
    check_absent([paths["key"]], force=force, what="TLS key")
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder().subject_name(_name(name))
           .add_extension(x509.SubjectAlternativeName(
               _alt_names([name, *[h for h in hosts if h != name]])), critical=False)
           .sign(key, hashes.SHA256()))
    out.mkdir(parents=True, exist_ok=True)
    write_private(paths["key"], _private_pem(key), force=force, what="TLS key")
    atomic_write(paths["csr"], _pem(csr))
    return {**paths, "fingerprint": fingerprint(key.public_key())}


def read_request(path: str | os.PathLike) -> tuple[str, list[str], str]:
    """A signing request's name, alternative names (as text) and key fingerprint, once its
    signature is checked (the requester holds the key): ConfigError otherwise."""
    try:
        csr = x509.load_pem_x509_csr(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"request {str(path)!r} is not a PEM certificate signing request "
                          f"({exc})") from None
    if not csr.is_signature_valid:
        raise ConfigError(f"request {str(path)!r} is not allowed: its signature does not "
                          "verify (it was not made with the key it asks to certify)")
    names = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise ConfigError(f"request {str(path)!r} is not allowed: it has {len(names)} common "
                          "names; expected one, the party's name")
    try:
        alt = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        alt = x509.SubjectAlternativeName([])
    hosts = [str(v) for v in alt.get_values_for_type(x509.DNSName)] + \
        [str(v) for v in alt.get_values_for_type(x509.IPAddress)]
    return _check_name(str(names[0].value)), hosts, fingerprint(csr.public_key())


def sign(csr_path: str | os.PathLike, ca_cert: str | os.PathLike,
         names: Mapping[str, Sequence[str]], out: str | os.PathLike, *,
         days: int = 30) -> dict[str, Any]:
    """The CA: certify the request ``csr_path`` with the CA certificate ``ca_cert`` and its
    key ``ca.key`` beside it, writing the certificate to ``out``.

    ``names``: the session's names -> the host names / addresses each must be reached at
    (the hosts file's). The request must name one of them and carry its addresses, or it is
    refused (ConfigError, nothing written); the certificate is valid for the name and the
    request's own alternative names, no others. Returns ``"cert"`` (the path), ``"name"``,
    ``"hosts"`` and ``"fingerprint"`` (of the certified key)."""
    name, hosts, print_ = read_request(csr_path)
    if name not in names:
        raise ConfigError(f"request {str(csr_path)!r} for {name!r} is not allowed: the "
                          f"session's names are {', '.join(sorted(names))}")
    missing = [h for h in names[name] if h not in hosts and h != name]
    if missing:
        raise ConfigError(f"request {str(csr_path)!r} for {name!r} is not allowed: it lacks "
                          f"the address(es) {', '.join(missing)} the session lists for it "
                          "(make it again with --host)")
    ca_cert, key_path = Path(ca_cert), Path(ca_cert).with_name("ca.key")
    try:
        ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
        ca_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"the CA {str(ca_cert)!r} with its key {str(key_path)!r} cannot be "
                          f"read ({exc}): make them with veil net ca") from None
    if fingerprint(ca_key.public_key()) != fingerprint(ca.public_key()):
        raise ConfigError(f"{str(key_path)!r} is not allowed: it is not the key of the CA "
                          f"{str(ca_cert)!r}")
    csr = x509.load_pem_x509_csr(Path(csr_path).read_bytes())
    alt = _alt_names([name, *[h for h in hosts if h != name]])
    atomic_write(out, _pem(_leaf(name, csr.public_key(), alt, ca, ca_key, days)))
    return {"cert": Path(out), "name": name, "hosts": hosts, "fingerprint": print_}
