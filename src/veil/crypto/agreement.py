"""Key agreement: X25519 (RFC 7748) and HKDF-SHA256 (RFC 5869).

Two parties with secrets a, b and public keys aG, bG share ``X25519(a, bG) = X25519(b, aG)``;
:func:`agree` derives a key from it with HKDF-SHA256 bound to a context string ``info``, so
keys for different purposes (a mask, a channel, a direction) are independent. Used by
secure aggregation (:mod:`veil.fl.secagg.masks`) and by the sealed channels of vertical
parties (:mod:`veil.fl.vertical.parties`).
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from veil.errors import ProtocolError

__all__ = ["KEY", "agree", "agree_many", "public_key"]

#: bytes of every secret and derived key
KEY = 32


def public_key(secret: bytes) -> bytes:
    """The X25519 public key of a 32-byte secret."""
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


def agree(secret: bytes, peer_public: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 of the X25519 shared secret, bound to ``info`` (a peer's low-order public
    key, whose shared secret is all zeros, is a ProtocolError)."""
    return agree_many(secret, [(peer_public, info)])[0]


def agree_many(secret: bytes, peers: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
    """:func:`agree` of one secret with each ``(peer_public, info)``, the private key loaded
    once (the SecAgg server recovering a dropped client's seeds with all its partners)."""
    own = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for peer_public, info in peers:
        try:
            shared = own.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError as exc:
            raise ProtocolError(f"key agreement failed: {exc}") from None
        out.append(HKDF(hashes.SHA256(), KEY, salt=None, info=info).derive(shared))
    return out
