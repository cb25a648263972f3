"""Crash-safe checkpoints of a federated run.

After every round the server writes the global parameters, the number of the next round,
the strategy's and the runtime's state and the history so far, as one file in veil's
message encoding (:func:`veil.fl.messages.encode`: no pickle). The write is atomic: the
state goes to a temporary file that is flushed and fsync'ed, then renamed over the
checkpoint (``os.replace`` is atomic on POSIX), and the directory is fsync'ed. A crash
therefore leaves either the previous checkpoint or the new one, never a torn file, and a
resumed run never applies a round twice. The privacy ledger persists itself
(``Ledger(path=...)``), charge by charge, so a resumed run never resets the budget.
"""

from __future__ import annotations

import os
from typing import Any

from veil._io import atomic_write
from veil.errors import DataError, ProtocolError
from veil.fl.messages import decode, encode

__all__ = ["Checkpoint"]

_KIND = "veil.fl.checkpoint"
_VERSION = 1


class Checkpoint:
    """A checkpoint file at ``path`` (created on the first :meth:`save`)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def save(self, state: dict[str, Any]) -> None:
        """Atomically replace the checkpoint with ``state`` (encodable values only)."""
        data = encode({"kind": _KIND, "version": _VERSION, "state": state})
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        atomic_write(self.path, data)

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when there is no checkpoint yet."""
        if not self.exists():
            return None
        with open(self.path, "rb") as fh:
            data = fh.read()
        try:
            content = decode(data)
        except ProtocolError as exc:
            raise DataError(f"{self.path} is not a readable veil checkpoint: {exc}") from None
        if not (isinstance(content, dict) and content.get("kind") == _KIND
                and isinstance(content.get("state"), dict)):
            raise DataError(f"{self.path} is not a veil federated-learning checkpoint")
        if content.get("version") != _VERSION:
            raise DataError(f"{self.path} has checkpoint version {content.get('version')!r}; "
                            f"this veil reads version {_VERSION}")
        return content["state"]
