"""One exception hierarchy for veil.

Every error a user can trigger is a :class:`VeilError`. Each message names the
parameter (or field, party, file), the offending value and what is allowed, so a
user never has to read a numpy traceback to find out what went wrong.

The value errors also derive from :class:`ValueError` so that code written for the
standard library's conventions (``except ValueError``) keeps working.
"""

from __future__ import annotations


class VeilError(Exception):
    """Base class of every error raised by veil."""


class ConfigError(VeilError, ValueError):
    """A parameter, option or configuration value is not allowed."""


class DataError(VeilError, ValueError):
    """Input data is malformed: NaN/inf, wrong shape, unknown column, bad file."""


class BudgetExceededError(VeilError):
    """A release would spend more privacy budget than is left.

    Raised before any noise is drawn and before anything is recorded.
    """


class ProtocolError(VeilError):
    """A multi-party protocol message is malformed, replayed, late or from an unknown party."""


class CryptoError(VeilError):
    """A cryptographic operation failed: bad ciphertext, wrong key, forged share, overflow."""


class MissingDependencyError(VeilError, ImportError):
    """An optional dependency (an extra such as ``torch``) is needed and not installed."""


__all__ = [
    "VeilError",
    "ConfigError",
    "DataError",
    "BudgetExceededError",
    "ProtocolError",
    "CryptoError",
    "MissingDependencyError",
]
