"""Ed25519 identities: signatures bind a statement to a party; key files round-trip; anything
else a peer or a file may hold is refused with a clear error, never a raw exception."""

from __future__ import annotations

import os
import stat

import pytest

from veil.crypto.identity import (
    check_table,
    make_identities,
    public_identity,
    read_key,
    read_table,
    sign,
    verify,
    write_identities,
)
from veil.errors import ConfigError


def test_a_signature_verifies_only_for_its_key_and_statement():
    private, public = make_identities(2)
    signature = sign(private[0], b"statement")
    assert public_identity(private[0]) == public[0]
    assert verify(public[0], signature, b"statement")
    assert not verify(public[1], signature, b"statement")
    assert not verify(public[0], signature, b"statement!")
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    for bad in (flipped, signature[:-1], b"", None, "text", 7):
        assert not verify(public[0], bad, b"statement")
    for key in (None, b"", bytes(31), b"\xff" * 32):
        assert not verify(key, signature, b"statement")


def test_key_files_round_trip_and_stay_private(tmp_path):
    table_path = write_identities(tmp_path / "keys", 3)
    table = read_table(table_path)
    assert sorted(table) == [0, 1, 2]
    for i in range(3):
        path = tmp_path / "keys" / f"identity-{i}.key"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert public_identity(read_key(path)) == table[i]


@pytest.mark.parametrize("content", ["not json", '{"x": "00"}', '{"0": "zz"}', '{"0": "00"}',
                                     '["00"]', '{"-1": "' + "00" * 32 + '"}'])
def test_bad_tables_and_keys_are_config_errors(tmp_path, content):
    path = tmp_path / "identities.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="identit"):
        read_table(path)
    (tmp_path / "short.key").write_bytes(b"\x01" * 31)
    with pytest.raises(ConfigError, match="32 bytes"):
        read_key(tmp_path / "short.key")
    with pytest.raises(ConfigError, match="cannot be read"):
        read_key(tmp_path / "missing.key")
    with pytest.raises(ConfigError, match="identities"):
        check_table([b"\x00" * 32])
