"""Accountants and ledger policies by name, and the one default every entry point uses.

*Accountants* (:data:`ACCOUNTANTS`) are the math: what a sequence of events fixed in
advance costs; calibration (:func:`~veil.dp.accounting.calibrate_noise`, ...) uses them.
*Policies* (:data:`POLICIES`) are what a :class:`~veil.dp.Ledger` composes its charges
with; each gives a different guarantee when charges are chosen adaptively:

==================== ========================================================== ==========
policy               guarantee                                                  filter?
==================== ========================================================== ==========
``"pld"`` (default)  blocks (one release, or a planned schedule) priced by PLD,  valid
                     composed by basic composition (:mod:`.filter`)
``"rdp"``            Renyi-DP curves added over all charges, converted at one   valid [1]
                     order fixed by the first charge (:class:`.RDPFilter`)
``"basic"``          sum of per-charge (epsilon, delta) (delta= required)       valid
``"advanced"``       Dwork-Rothblum-Vadhan over per-charge (epsilon, delta)     valid
``"pld-nonadaptive"`` PLD of the whole sequence: tight only if every charge's    **no**
                     parameters were fixed before the first one (opt-in)
==================== ========================================================== ==========

[1] at a Renyi order fixed in advance (Feldman & Zrnic 2021, Thm. 3.1): the first charge,
chosen before any output, fixes it; the best order of the grid *at the end* would not be a
filter (the order that admits a charge could depend on earlier outputs).

:data:`DEFAULT_ACCOUNTANT` is the one default of the Ledger, of calibration and of every
entry point that calibrates or charges (make_private, DPFedAvg.from_budget, noise_decay,
``veil budget calibrate``): a sigma calibrated with the defaults is exactly what the
default ledger charges for it (a planned block priced by PLD).
"""

from __future__ import annotations

from typing import Any

from veil._validation import check_choice
from veil.dp.accounting.advanced import AdvancedAccountant
from veil.dp.accounting.base import Accountant
from veil.dp.accounting.basic import BasicAccountant
from veil.dp.accounting.defaults import DEFAULT_ACCOUNTANT, NOT_A_FILTER
from veil.dp.accounting.filter import PLDFilter
from veil.dp.accounting.gdp import GDPAccountant
from veil.dp.accounting.pld import PLDAccountant
from veil.dp.accounting.rdp import RDPAccountant, RDPFilter
from veil.errors import ConfigError

__all__ = ["ACCOUNTANTS", "CERTIFIED", "DEFAULT_ACCOUNTANT", "NOT_A_FILTER", "POLICIES",
           "make_accountant", "make_policy"]

ACCOUNTANTS: dict[str, type[Accountant]] = {
    cls.name: cls for cls in (PLDAccountant, RDPAccountant, BasicAccountant,
                              AdvancedAccountant, GDPAccountant)}
#: the accountants whose epsilon is a certified upper bound (usable for budgets)
CERTIFIED: tuple[str, ...] = tuple(n for n, c in ACCOUNTANTS.items() if c.certified)
#: ledger policies (the table above)
POLICIES: dict[str, type[Accountant]] = {
    "pld": PLDFilter, "rdp": RDPFilter, "basic": BasicAccountant,
    "advanced": AdvancedAccountant, NOT_A_FILTER: PLDAccountant}


def make_accountant(name: str, *, certified_only: bool = True, **options: Any) -> Accountant:
    """A fresh accountant by name (a policy name stands for the accountant that prices its
    blocks: "pld-nonadaptive" -> "pld"); ``options`` go to its constructor."""
    name = "pld" if name == NOT_A_FILTER else name
    allowed = CERTIFIED if certified_only else tuple(ACCOUNTANTS)
    if certified_only and name in ACCOUNTANTS and name not in CERTIFIED:
        raise ConfigError(f"accountant={name!r} is not allowed here: it is an approximation "
                          f"that cannot certify a budget; choose one of {', '.join(CERTIFIED)}")
    check_choice(name, "accountant", allowed)
    try:
        return ACCOUNTANTS[name](**options)
    except TypeError as exc:
        raise ConfigError(f"options {sorted(options)} are not allowed for accountant={name!r}: "
                          f"{exc}") from None


def make_policy(name: str, delta: float) -> Accountant:
    """A fresh ledger accountant for policy ``name`` on a ledger of this delta (the "rdp"
    filter fixes its order at it); ConfigError naming the policies."""
    if name in ACCOUNTANTS and name not in CERTIFIED:
        raise ConfigError(f"accountant={name!r} is not allowed for a budget: it is an "
                          f"approximation; choose one of {', '.join(POLICIES)}")
    check_choice(name, "accountant", tuple(POLICIES))
    policy = POLICIES[name]
    return policy(delta) if policy is RDPFilter else policy()
