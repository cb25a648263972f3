"""Accountants by name (what ``Ledger(accountant=...)`` and calibration accept)."""

from __future__ import annotations

from typing import Any

from veil._validation import check_choice
from veil.dp.accounting.advanced import AdvancedAccountant
from veil.dp.accounting.base import Accountant
from veil.dp.accounting.basic import BasicAccountant
from veil.dp.accounting.gdp import GDPAccountant
from veil.dp.accounting.pld import PLDAccountant
from veil.dp.accounting.rdp import RDPAccountant
from veil.errors import ConfigError

__all__ = ["ACCOUNTANTS", "CERTIFIED", "make_accountant"]

ACCOUNTANTS: dict[str, type[Accountant]] = {
    cls.name: cls for cls in (PLDAccountant, RDPAccountant, BasicAccountant,
                              AdvancedAccountant, GDPAccountant)}
#: the accountants whose epsilon is a certified upper bound (usable for budgets)
CERTIFIED: tuple[str, ...] = tuple(n for n, c in ACCOUNTANTS.items() if c.certified)


def make_accountant(name: str, *, certified_only: bool = True, **options: Any) -> Accountant:
    """A fresh accountant by name; ``options`` go to its constructor."""
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
