"""Each organisation makes its own TLS key; the CA signs requests and never sees a key
(issue 30: `veil net certs` wrote every party's private key into one folder)."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import NameOID

from veil.cli.main import main
from veil.errors import ConfigError
from veil.net import Identity, load_hosts
from veil.net.certs import new_ca, request, sign

from .conftest import write_hosts

DER, PEM = Encoding.DER, Encoding.PEM


def _spki(csr):
    return csr.public_key().public_bytes(DER, PublicFormat.SubjectPublicKeyInfo)


def _alt(cert):
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(alt.get_values_for_type(x509.DNSName)) | \
        {str(a) for a in alt.get_values_for_type(x509.IPAddress)}


def test_parties_make_their_own_keys_and_the_ca_only_signs(tmp_path, capsys):
    """The whole flow through the CLI: the CA's folder ends with the CA's own files and
    the certificates, no party's key; each party's key stays in its own folder (0600) and
    works with the certificate the CA made for it (the mesh's Identity loads both); each
    certificate is valid for the names and addresses the party asked for."""
    hosts = write_hosts(tmp_path, 2, certs=False)
    assert main(["net", "ca", "--hosts", str(hosts)]) == 0
    assert main(["net", "ca", "--hosts", str(hosts)]) == 2   # a CA is never replaced
    assert "already exist" in capsys.readouterr().err
    requests = []
    for i in range(2):
        org = tmp_path / f"org{i}"
        assert main(["net", "csr", "--name", f"p{i}", "--host", "127.0.0.1", "--host",
                     f"p{i}.example.org", "--out", str(org)]) == 0
        requests.append(str(org / f"p{i}.csr"))
        assert (org / f"p{i}.key").stat().st_mode & 0o777 == 0o600
        printed = capsys.readouterr().out
        assert main(["net", "csr", "--name", f"p{i}", "--out", str(org)]) == 2  # no --force
        assert "already exist" in capsys.readouterr().err
    assert main(["net", "sign", *requests, "--hosts", str(hosts),
                 "--out", str(tmp_path / "certs")]) == 0
    assert "p1.example.org" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == \
        ["ca.crt", "ca.key", "p0.crt", "p1.crt"]
    session = load_hosts(hosts)
    for i in range(2):
        cert_path = tmp_path / "certs" / f"p{i}.crt"
        Identity(session, f"p{i}", cert_path, tmp_path / f"org{i}" / f"p{i}.key")
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"p{i}"
        assert _alt(cert) == {f"p{i}", f"p{i}.example.org", "127.0.0.1"}
    assert printed   # the fingerprint to tell the CA


def test_the_ca_refuses_requests_outside_the_session_or_forged(tmp_path):
    """A request for a name that is not the session's, one that lacks the address the
    session lists for the party (peers could not reach it under its certificate), and a
    request whose key is not the one that signed it (an attacker swapping the public key
    of a party's request for its own on the way to the CA) are refused, nothing written."""
    ca = new_ca(tmp_path / "ca" / "ca.crt")["ca"]
    names = {"p0": ("10.0.0.1",), "p1": ("10.0.0.2",)}
    stranger = request(tmp_path / "x", "mallory", ["10.0.0.1"])["csr"]
    with pytest.raises(ConfigError, match="'mallory' is not allowed: the session's names"):
        sign(stranger, ca, names, tmp_path / "out.crt")
    elsewhere = request(tmp_path / "y", "p0", ["10.0.0.9"])["csr"]
    with pytest.raises(ConfigError, match="lacks the address"):
        sign(elsewhere, ca, names, tmp_path / "out.crt")
    # the public key of a genuine request replaced by another one: the signature fails
    genuine = x509.load_pem_x509_csr(request(tmp_path / "z", "p1", ["10.0.0.2"])["csr"]
                                     .read_bytes())
    other = x509.load_pem_x509_csr(request(tmp_path / "w", "p1", ["10.0.0.2"])["csr"]
                                   .read_bytes())
    forged = tmp_path / "forged.csr"
    forged.write_bytes(x509.load_der_x509_csr(genuine.public_bytes(DER).replace(
        _spki(genuine), _spki(other))).public_bytes(PEM))
    with pytest.raises(ConfigError, match="signature does not verify"):
        sign(forged, ca, names, tmp_path / "out.crt")
    assert not (tmp_path / "out.crt").exists()
    ok = sign(tmp_path / "z" / "p1.csr", ca, names, tmp_path / "p1.crt")
    assert ipaddress.ip_address("10.0.0.2") in x509.load_pem_x509_certificate(
        ok["cert"].read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.IPAddress)


def test_a_request_never_replaces_a_key_without_force(tmp_path):
    first = request(tmp_path, "p0")
    key = first["key"].read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        request(tmp_path, "p0")
    assert first["key"].read_bytes() == key
    assert request(tmp_path, "p0", force=True)["key"].read_bytes() != key
