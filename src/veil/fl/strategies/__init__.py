"""Federated strategies, one file each: what clients compute and how the server aggregates.

* :class:`FedAvg` — federated averaging with client sampling (McMahan et al. 2017);
* :class:`FedProx` — FedAvg with a proximal local objective (Li et al. 2020);
* :class:`DPFedAvg` — user-level DP around any strategy: clipping (fixed or adaptive),
  Gaussian noise at the server, the clients, or shared among them (McMahan et al. 2018,
  Andrew et al. 2021);
* :class:`SecAgg` — secure aggregation with the SecAgg+ neighbour graph (Bonawitz et al.
  2017, Bell et al. 2020), around any strategy; it must be the outermost wrapper;
* :class:`Hybrid` — threshold Paillier + distributed DP noise (Truex et al. 2019).
"""

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.fl.strategies.base import Strategy, StrategyWrapper, UpdateStrategy
    from veil.fl.strategies.dp import DPFedAvg
    from veil.fl.strategies.fedavg import FedAvg
    from veil.fl.strategies.fedprox import FedProx
    from veil.fl.strategies.hybrid import Hybrid
    from veil.fl.strategies.secagg import SecAgg

__all__ = ["DPFedAvg", "FedAvg", "FedProx", "Hybrid", "SecAgg", "Strategy", "StrategyWrapper",
           "UpdateStrategy"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
