"""What a differentially private statistic returns: the value, its cost, and what was clipped."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Result"]


@dataclass(frozen=True)
class Result:
    """A released statistic.

    ``value`` is differentially private. ``epsilon``/``delta`` is the guarantee of this
    release (the sum of its parts' guarantees; the ledger may compose them more tightly).
    ``clipped`` is the exact number of input values that were outside the declared bounds
    and were clipped into them: a diagnostic for the data curator, *not* a private value,
    and not meant for publication. ``mechanism`` names the mechanism(s) used; ``details``
    holds public parameters (bins, grid, parts).
    """

    value: Any
    epsilon: float
    delta: float
    clipped: int
    query: str
    mechanism: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A plain dictionary (for JSON output)."""
        return asdict(self)
