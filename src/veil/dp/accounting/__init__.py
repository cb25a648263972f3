"""Privacy accounting: what a sequence of releases costs, and how much noise a target needs.

* Accountants (one small class each, same interface, math only; the bookkeeping lives in
  :class:`veil.dp.Ledger`): :class:`PLDAccountant` (tight, default), :class:`RDPAccountant`,
  :class:`BasicAccountant`, :class:`AdvancedAccountant`, and :class:`GDPAccountant`, a
  labelled approximation that budgets never use. Each reports an epsilon it can certify.
* Events (:mod:`~veil.dp.accounting.events`): dp_accounting's ``DpEvent`` s, veil's
  :class:`ParallelDpEvent`, sound handling of fixed-size batches, and their exact JSON form
  (:mod:`~veil.dp.accounting.serialize`); :class:`SkellamDpEvent`, the Skellam
  mechanism's RDP curve (:mod:`~veil.dp.accounting.skellam`).
* Ledger policies (:data:`POLICIES`, the table of their guarantees in
  :mod:`~veil.dp.accounting.registry`): the default :class:`PLDFilter` (a valid privacy
  filter whose blocks are priced by PLD), and :data:`DEFAULT_ACCOUNTANT`, the one default
  of every entry point.
* Calibration: :func:`calibrate_noise` (sigma for a target) and :func:`epsilon_for`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil._lazy import lazy_exports

if TYPE_CHECKING:  # exported lazily (veil._lazy)
    from veil.dp.accounting.advanced import AdvancedAccountant
    from veil.dp.accounting.base import Accountant
    from veil.dp.accounting.basic import BasicAccountant
    from veil.dp.accounting.calibration import calibrate, calibrate_noise, epsilon_for
    from veil.dp.accounting.defaults import DEFAULT_ACCOUNTANT, NOT_A_FILTER
    from veil.dp.accounting.events import (
        ParallelDpEvent,
        describe,
        parallel,
        subsampled_gaussian_event,
    )
    from veil.dp.accounting.filter import PLDFilter
    from veil.dp.accounting.gdp import GDPAccountant
    from veil.dp.accounting.pld import PLDAccountant
    from veil.dp.accounting.rdp import RDPAccountant, RDPFilter
    from veil.dp.accounting.registry import (
        ACCOUNTANTS,
        CERTIFIED,
        POLICIES,
        make_accountant,
        make_policy,
    )
    from veil.dp.accounting.serialize import event_from_json, event_to_json
    from veil.dp.accounting.skellam import SkellamDpEvent

__all__ = [
    "Accountant", "PLDAccountant", "RDPAccountant", "BasicAccountant", "AdvancedAccountant",
    "GDPAccountant", "ACCOUNTANTS", "CERTIFIED", "make_accountant", "PLDFilter", "RDPFilter",
    "DEFAULT_ACCOUNTANT", "NOT_A_FILTER", "POLICIES", "make_policy",
    "calibrate_noise", "epsilon_for", "calibrate",
    "ParallelDpEvent", "SkellamDpEvent", "parallel", "subsampled_gaussian_event", "describe",
    "event_to_json", "event_from_json",
]

__getattr__, __dir__ = lazy_exports(__name__, __all__)
