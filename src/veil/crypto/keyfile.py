"""One party's threshold key share on disk: the file a dealer (or the dealer-free key
generation) writes for party i, and that only party i ever reads.

Format: :func:`veil.crypto.serialization.dump_key_share` (a checksummed frame holding the
:class:`~veil.crypto.threshold.ThresholdPublicKey`, then the party's
:class:`~veil.crypto.threshold.KeyShare`, which loads only under that public key), the same
bytes whether a dealer (``veil fl deal``) or the parties themselves (``veil keygen``) made
the key. The file is written by :func:`veil._io.write_private`: atomically, mode 0600,
never through a symlink nor over an existing file unless ``force``. Loading checks the
share against its published verification key (:meth:`~veil.crypto.threshold.KeyShare.check`),
and, when asked, that the share is the expected party's and under the expected public key
-- so a party started with another party's file, or with a file of another key, is refused
before it does anything.
"""

from __future__ import annotations

import os

from veil._io import write_private
from veil.crypto import serialization, threshold
from veil.errors import ConfigError, CryptoError

__all__ = ["load_key_share", "save_key_share"]


def save_key_share(path: str | os.PathLike, share: threshold.KeyShare, *,
                   force: bool = False) -> None:
    """Write ``share`` (and its public key) to ``path``, readable by its owner only; an
    existing ``path`` is replaced only with ``force``."""
    if not isinstance(share, threshold.KeyShare):
        raise ConfigError(f"share={type(share).__name__} is not allowed: expected a "
                          "threshold.KeyShare")
    write_private(path, serialization.dump_key_share(share), force=force,
                  what="key share file")


def load_key_share(path: str | os.PathLike, *, party: int | None = None,
                   fingerprint: bytes | None = None,
                   insecure_ok: bool = False) -> threshold.KeyShare:
    """The key share in ``path``. ``party``: the 0-based party index the share must belong
    to (key share number ``party + 1``); ``fingerprint``: the public key it must be under.
    ConfigError naming the file when either differs or the file is missing; CryptoError
    when its bytes are not a valid share. ``insecure_ok`` admits test-size keys."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ConfigError(f"key share file {path!r} cannot be read: {exc.strerror}") from None
    try:
        share = serialization.load_key_share(data, insecure_ok=insecure_ok)
    except CryptoError as exc:
        raise CryptoError(f"key share file {path!r} is not usable: {exc}") from None
    if party is not None and share.index != party + 1:
        raise ConfigError(f"key share file {path!r} holds the share of party "
                          f"{share.index - 1}, not of party {party}: each party loads only "
                          "its own share")
    if fingerprint is not None and share.public_key.fingerprint != fingerprint:
        raise ConfigError(f"key share file {path!r} is a share of key "
                          f"{share.public_key.fingerprint.hex()[:16]}, not of this "
                          f"federation's key {fingerprint.hex()[:16]}")
    return share
