"""Key-share files (``veil keygen --out``): public key and share in one checked frame."""

from __future__ import annotations

import pytest

from veil.crypto import threshold
from veil.crypto.serialization import dump_key_share, load_key_share
from veil.dp.trust import Trust
from veil.errors import ConfigError, CryptoError


@pytest.fixture(scope="module")
def shares():
    return threshold.keygen(bits=512, parties=3, threshold=2, insecure_ok=True, rng=3)[1]


def test_round_trip(shares):
    back = [load_key_share(dump_key_share(s), insecure_ok=True) for s in shares]
    pk = back[0].public_key
    assert [s.index for s in back] == [1, 2, 3]
    assert pk.fingerprint == shares[0].public_key.fingerprint
    c = pk.encrypt(77)
    assert pk.combine([back[0].partial_decrypt(c), back[2].partial_decrypt(c)]) == 77


def test_bad_files_are_refused(shares):
    blob = bytearray(dump_key_share(shares[0]))
    with pytest.raises(CryptoError, match="under 2048|insecure"):
        load_key_share(bytes(blob))
    blob[len(blob) // 2] ^= 1
    with pytest.raises(CryptoError):
        load_key_share(bytes(blob), insecure_ok=True)
    with pytest.raises(CryptoError):
        load_key_share(b"VKSF\x01", insecure_ok=True)
    with pytest.raises(CryptoError, match="KeyShare"):
        dump_key_share(shares[0].public_key)


# -- every writer of a private key (issue 29, item 9) ---------------------------------------
def _writers(shares):
    from veil.crypto import identity
    from veil.crypto.keyfile import save_key_share
    from veil.fl.hybrid.setup import PartyIdentity, PublicSetup
    from veil.net.certs import issue

    private, public = identity.make_identities(3)
    setup = PublicSetup(shares[0].public_key, public)

    def tls(path, force):
        issue(path.parent, {path.stem: ()}, force=force)

    return {"identity key": lambda p, force: identity.write_key(p, private[0], force=force),
            "key share": lambda p, force: save_key_share(p, shares[0], force=force),
            "party identity": lambda p, force: PartyIdentity(0, private[0], setup).save(
                p, force=force),
            "tls key": tls}


@pytest.mark.parametrize("kind", ["identity key", "key share", "party identity", "tls key"])
def test_key_writers_never_reuse_a_file_or_follow_a_link(shares, tmp_path, kind):
    """Attack: a key written over an existing world-readable file kept its mode 0644 (the
    old writers opened with O_TRUNC), and one written where another user left a symlink
    went through it into the file the link named. Every writer now goes through
    ``veil._io.write_private``: a new file created 0600, linked into place only where
    nothing exists; ``force`` renames over the path (a symlink is replaced, not followed)."""
    write = _writers(shares)[kind]
    path = tmp_path / "k" / "p.key"
    path.parent.mkdir()
    path.write_bytes(b"old")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="already exists"):
        write(path, False)
    assert path.read_bytes() == b"old"
    write(path, True)
    assert path.read_bytes() != b"old" and oct(path.stat().st_mode & 0o777) == "0o600"
    victim = tmp_path / "victim"
    victim.write_bytes(b"theirs")
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(ConfigError, match="already exists"):
        write(path, False)
    write(path, True)
    assert victim.read_bytes() == b"theirs" and not path.is_symlink()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".")) == []


def test_the_dealer_refuses_to_deal_a_distributed_key(tmp_path):
    """``veil fl deal`` with ``keygen="distributed"`` ran the DKG of every party in one
    process and wrote every share: a dealer by another name. It is refused, pointing to
    the dealer-free set-up, and nothing is written."""
    from veil.fl.hybrid.setup import deal

    with pytest.raises(ConfigError, match="veil keygen"):
        deal(Trust(3, 2), tmp_path / "out", bits=512, insecure_ok=True, keygen="distributed")
    assert not (tmp_path / "out").exists()


def test_the_identity_command_replaces_keys_only_with_force(tmp_path, capsys):
    from veil.cli.main import main

    folder = tmp_path / "keys"
    assert main(["fl", "identities", str(folder), "--parties", "3"]) == 0
    before = (folder / "identity-1.key").read_bytes()
    assert main(["fl", "identities", str(folder), "--parties", "3"]) == 2
    assert "already exist" in capsys.readouterr().err
    assert (folder / "identity-1.key").read_bytes() == before        # nothing replaced
    assert main(["fl", "identities", str(folder), "--parties", "3", "--force"]) == 0
    assert (folder / "identity-1.key").read_bytes() != before
    assert oct((folder / "identity-1.key").stat().st_mode & 0o777) == "0o600"
