"""Federated learning: sans-I/O protocols, a local runtime with faults, strategies, runs.

* :class:`Federation` — ``Federation(clients, model, strategy, rounds).run()``, with
  checkpoints and resume; ``veil fl run CONFIG.toml`` (:mod:`veil.fl.config`);
* :mod:`veil.fl.strategies` — FedAvg, FedProx, DPFedAvg, SecAgg;
* :class:`LocalRuntime` and :class:`Faults` — one process, simulated faults, byte counts;
* :mod:`veil.fl.protocol` and :mod:`veil.fl.messages` — the base classes and the wire
  format every protocol (secure aggregation, the hybrid approach) is built on.
"""

from veil.fl.federation import Federation
from veil.fl.history import History
from veil.fl.messages import SERVER, Message
from veil.fl.protocol import Aggregate, ClientProtocol, ClientUpdate, RoundResult, ServerRound
from veil.fl.runtime import Faults, LocalRuntime, RoundReport
from veil.fl.trainer import LocalTrainer

__all__ = ["Aggregate", "ClientProtocol", "ClientUpdate", "Faults", "Federation", "History",
           "LocalRuntime", "LocalTrainer", "Message", "RoundReport", "RoundResult", "SERVER",
           "ServerRound"]
