"""The default accounting of every entry point, by name: importable without any accountant.

The accountants and policies these names stand for are in :mod:`.registry` (which re-exports
both names); keeping the names here lets a configuration table name its default without
loading dp_accounting and scipy.
"""

__all__ = ["DEFAULT_ACCOUNTANT", "NOT_A_FILTER"]

#: the default accounting of every entry point (ledger policy and calibration accountant)
DEFAULT_ACCOUNTANT = "pld"
#: the opt-in policy that composes all charges by PLD as if fixed in advance (not a filter)
NOT_A_FILTER = "pld-nonadaptive"
