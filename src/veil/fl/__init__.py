"""Federated learning: sans-I/O protocols, a local runtime with faults, strategies, runs.

* :class:`Federation` — ``Federation(clients, model, strategy, rounds).run()``, with
  checkpoints and resume; ``veil fl run CONFIG.toml`` (:mod:`veil.experiments.fl_config`);
* :mod:`veil.fl.strategies` — FedAvg, FedProx, DPFedAvg, SecAgg, Hybrid;
* :class:`LocalRuntime` and :class:`Faults` — the clients in this process or, with
  ``workers > 1``, in persistent worker processes (:mod:`veil.fl.runtime`); simulated
  faults, byte counts; :class:`WorkerLost` names the clients of a lost worker;
* :mod:`veil.fl.hybrid` — the hybrid approach (threshold Paillier + distributed noise);
* :mod:`veil.fl.canary` — canary clients (their audit: :mod:`veil.experiments.canary_audit`);
* :mod:`veil.fl.protocol` and :mod:`veil.fl.messages` — the base classes and the wire
  format every protocol (secure aggregation, the hybrid approach) is built on.
"""

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.fl.federation import Federation
    from veil.fl.history import History
    from veil.fl.messages import SERVER, Message
    from veil.fl.protocol import Aggregate, ClientProtocol, ClientUpdate, RoundResult, ServerRound
    from veil.fl.runtime import Faults, LocalRuntime, RoundReport, WorkerLost
    from veil.fl.trainer import LocalTrainer

__all__ = ["Aggregate", "ClientProtocol", "ClientUpdate", "Faults", "Federation", "History",
           "LocalRuntime", "LocalTrainer", "Message", "RoundReport", "RoundResult", "SERVER",
           "ServerRound", "WorkerLost"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
