"""How messages move between a server and its clients.

* :mod:`~veil.fl.runtime.local` -- :class:`LocalRuntime`: the clients in this process, or in
  forked worker processes, with simulated :class:`Faults` and byte counts;
* :mod:`~veil.fl.runtime.workers` -- the persistent worker processes (:class:`WorkerLost`
  names the clients of a lost worker).
"""

from veil.fl.runtime.local import Faults, LocalRuntime, RoundReport
from veil.fl.runtime.workers import WorkerLost

__all__ = ["Faults", "LocalRuntime", "RoundReport", "WorkerLost"]
