"""X25519 + HKDF-SHA256 key agreement (veil.crypto.agreement): both sides derive one key per
context, and a low-order public key (all-zero shared secret) is refused."""

from __future__ import annotations

import pytest

from veil.crypto.agreement import KEY, agree, public_key
from veil.errors import ProtocolError
from veil.random import default_rng


def test_both_sides_derive_the_same_key_per_context():
    rng = default_rng(1)
    a, b = rng.bytes(32), rng.bytes(32)
    ab = agree(a, public_key(b), b"mask|0|1|2")
    assert len(ab) == KEY and ab == agree(b, public_key(a), b"mask|0|1|2")
    assert ab != agree(a, public_key(b), b"mask|1|1|2")      # another round, another key


def test_a_low_order_public_key_is_refused():
    """The all-zero point gives the all-zero shared secret whatever the secret key: a peer
    sending it would know the derived key (RFC 7748, section 6.1)."""
    with pytest.raises(ProtocolError, match="key agreement failed"):
        agree(default_rng(2).bytes(32), bytes(32), b"channel")
