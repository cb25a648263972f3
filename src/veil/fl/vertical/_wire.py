"""The one message reader of the vertical protocols (dicts encoded by veil.fl.messages)."""

from __future__ import annotations

from typing import Any

from veil.errors import ProtocolError
from veil.fl.messages import decode

__all__ = ["read_message"]


def read_message(data: Any, stage: str, party: str, what: str = "message") -> dict:
    """A decoded ``what`` of ``stage`` from ``party`` (ProtocolError naming it if not)."""
    try:
        value = decode(data)
    except ProtocolError as exc:
        raise ProtocolError(f"{what} from {party!r}: {exc}") from None
    if not isinstance(value, dict) or value.get("stage") != stage:
        got = value.get("stage") if isinstance(value, dict) else type(value).__name__
        raise ProtocolError(f"{what} from {party!r} is not a {stage!r} message (got {got!r})")
    return value
