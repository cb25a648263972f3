"""What privacy a table achieves: k, l (distinct, entropy), c of recursive (c,l), t.

:func:`check` groups the records of any table by its quasi-identifiers and reports the
largest parameters every equivalence class satisfies (definitions in
:mod:`veil.anon.models`):

* ``k``: the smallest class size;
* ``l_distinct``: the fewest distinct sensitive values in a class;
* ``l_entropy``: the largest l with entropy l-diversity, ``min over classes of exp(H)``;
* ``c`` (given ``l``): recursive (c, l)-diversity holds for every c > ``c``, where
  ``c = max over classes of r_1 / (r_l + ... + r_m)``, r sorted decreasingly (inf when a
  class has fewer than l values);
* ``t``: the largest EMD between a class's sensitive distribution and the table's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from veil.anon.encoding import SensitiveDomain
from veil.anon.hierarchy import Hierarchy
from veil.anon.metrics import class_ids
from veil.anon.models import TCloseness, entropy_l, recursive_c
from veil.errors import ConfigError, DataError

__all__ = ["CheckReport", "check", "report_from_classes"]


@dataclass(frozen=True)
class CheckReport:
    """Privacy achieved by a table (None where a sensitive attribute is needed)."""

    records: int
    classes: int
    k: int
    l_distinct: int | None = None
    l_entropy: float | None = None
    l: int | None = None
    c: float | None = None
    t: float | None = None
    t_distance: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {key: value for key, value in self.__dict__.items() if value is not None}


def report_from_classes(counts: np.ndarray, hist: np.ndarray | None,
                        domain: SensitiveDomain | None, *, l: int | None = None,
                        closeness: TCloseness | None = None) -> CheckReport:
    """The report for classes given by their sizes and sensitive histograms."""
    base = {"records": int(counts.sum()), "classes": int(counts.size), "k": int(counts.min())}
    if hist is None or domain is None:
        return CheckReport(**base)
    closeness = closeness or TCloseness(1.0)
    closeness.bind(domain)
    return CheckReport(
        **base,
        l_distinct=int((hist > 0).sum(axis=1).min()),
        l_entropy=float(entropy_l(hist).min()),
        l=l,
        c=None if l is None else float(recursive_c(hist, l).max()),
        t=float(closeness.distances(hist, domain).max()),
        t_distance=closeness.resolved_distance(domain),
    )


def check(table: pd.DataFrame, quasi_identifiers: Sequence[str] | Mapping[str, object],
          sensitive: str | None = None, *, l: int | None = None, distance: str = "auto",
          sensitive_hierarchy: Hierarchy | None = None) -> CheckReport:
    """Report the k, l, c (for ``l``) and t that ``table`` achieves.

    ``distance`` picks the EMD of t (see :class:`~veil.anon.models.TCloseness`);
    ``sensitive_hierarchy`` is needed for the hierarchical one. Records are grouped by
    their values as they are (suppressed records, all ``*``, form one class).
    """
    if not isinstance(table, pd.DataFrame):
        raise DataError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    qis = list(quasi_identifiers)
    if not qis:
        raise ConfigError("quasi_identifiers=[] is not allowed: name at least one column")
    if l is not None and (isinstance(l, bool) or not isinstance(l, int) or l < 1):
        raise ConfigError(f"l={l!r} is not allowed: must be an integer >= 1")
    ids, sizes = class_ids(table, qis)
    if sensitive is None:
        return CheckReport(records=len(table), classes=int(sizes.size), k=int(sizes.min()))
    if sensitive not in table.columns:
        raise DataError(f"sensitive column {sensitive!r} is not in the table")
    if sensitive in qis:
        raise ConfigError(f"sensitive={sensitive!r} is not allowed: it is also a "
                          "quasi-identifier")
    domain = SensitiveDomain(sensitive, table[sensitive])
    hist = np.bincount(ids * domain.size + domain.codes,
                       minlength=sizes.size * domain.size).reshape(sizes.size, domain.size)
    closeness = TCloseness(1.0, distance=distance, hierarchy=sensitive_hierarchy)
    return report_from_classes(sizes, hist, domain, l=l, closeness=closeness)
