"""Secure multi-party computation: secret-shared tensors, secure regression, joint queries.

See :mod:`veil.mpc.session` for the threat model. ``from veil.mpc import Session``.
"""

from veil.mpc.runtime import PartyTimeout
from veil.mpc.session import Cost, Session
from veil.mpc.tensor import SharedTensor, concatenate, stack, where

__all__ = ["Session", "SharedTensor", "Cost", "PartyTimeout", "concatenate", "stack", "where"]
