"""The hybrid approach to private federated learning (Truex et al., AISec 2019).

* :mod:`~veil.fl.hybrid.grid` -- the integer grid an answer travels on, with its noise share;
* :mod:`~veil.fl.hybrid.fit` -- the methods (none, smc, central, local, hybrid), the simulated
  aggregator and :func:`fit_queries`;
* :mod:`~veil.fl.hybrid.protocol` -- the sans-I/O threshold-Paillier protocol;
* :mod:`~veil.fl.hybrid.run` -- :class:`HybridAggregator`, the protocol on a runtime.

The strategy that trains a :class:`~veil.fl.Federation` this way is
:class:`veil.fl.strategies.Hybrid`.
"""

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.fl.hybrid.fit import (
               METHODS,
               Aggregator,
               SimulatedAggregator,
               fit_queries,
               plan_multiplier,
    )
    from veil.fl.hybrid.grid import contribute, decode
    from veil.fl.hybrid.protocol import Agreement, HybridClient, HybridKeys, HybridServer, deal_keys
    from veil.fl.hybrid.run import HybridAggregator

__all__ = ["METHODS", "Aggregator", "Agreement", "HybridAggregator", "HybridClient", "HybridKeys",
           "HybridServer", "SimulatedAggregator", "contribute", "decode", "deal_keys",
           "fit_queries", "plan_multiplier"]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
