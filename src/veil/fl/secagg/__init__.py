"""Secure aggregation (SecAgg+): the encoding, the key agreement and masks, the protocol.

* :mod:`~veil.fl.secagg.ring` -- an update as a vector of Z_2^k, and the round's plan;
* :mod:`~veil.fl.secagg.masks` -- X25519 + HKDF key agreement, masks expanded by a PRG;
* :mod:`~veil.fl.secagg.planner` -- :class:`RoundPlanner`, what a round asks of its planner;
* :mod:`~veil.fl.secagg.protocol` -- the server's and client's stage machines.

The strategy is :class:`veil.fl.strategies.SecAgg`.
"""

from veil.fl.secagg.planner import RoundPlanner
from veil.fl.secagg.protocol import SecAggClient, SecAggServer

__all__ = ["RoundPlanner", "SecAggClient", "SecAggServer"]
