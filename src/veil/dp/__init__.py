"""Differential privacy: mechanisms, statistics, accounting and the Ledger that charges them.

Mechanisms (each knows its cost, ``.event``, before it runs; values leave through
``Ledger.release``): :class:`Laplace`, :class:`Gaussian` (floating-point safe, on a grid),
:class:`DiscreteLaplace` (= :data:`Geometric`), :class:`DiscreteGaussian`,
:class:`Exponential`, :class:`ReportNoisyMax`, :class:`RandomizedResponse`,
:class:`AboveThreshold` and its interactive form :class:`SparseVector`.
Statistics: :mod:`veil.dp.stats`. Sensitivity, clipping and sample-and-aggregate:
:mod:`veil.dp.sensitivity`. Exact samplers: :mod:`veil.dp.samplers`.
"""

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.dp import samplers, sensitivity, stats
    from veil.dp.gaussian import DiscreteGaussian, Gaussian
    from veil.dp.laplace import DiscreteLaplace, Geometric, Laplace
    from veil.dp.ledger import Ledger
    from veil.dp.mechanism import Mechanism
    from veil.dp.privacy_budget import PrivacyBudget
    from veil.dp.randomized_response import RandomizedResponse
    from veil.dp.result import Result
    from veil.dp.selection import Exponential, ReportNoisyMax, pure_dp_event
    from veil.dp.sensitivity import clip_l1, clip_l2, sample_and_aggregate
    from veil.dp.sparse_vector import AboveThreshold, SparseVector
    from veil.dp.trust import Trust

__all__ = [
    "Ledger", "Mechanism", "PrivacyBudget", "Trust", "Result",
    "Laplace", "Gaussian", "DiscreteLaplace", "Geometric", "DiscreteGaussian",
    "Exponential", "ReportNoisyMax", "RandomizedResponse", "AboveThreshold", "SparseVector",
    "pure_dp_event", "clip_l1", "clip_l2", "sample_and_aggregate",
    "samplers", "sensitivity", "stats",
]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
