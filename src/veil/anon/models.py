"""Privacy models, evaluated on equivalence classes.

Every model answers, for a table of classes (sizes ``counts`` and sensitive histograms
``hist``), which classes satisfy it. Records of failing classes can be suppressed within a
suppression limit (ARX's semantics: the remaining classes must all satisfy every model).

* k-anonymity (Samarati & Sweeney 1998): every class holds at least k records.
* l-diversity (Machanavajjhala, Kifer, Gehrke & Venkitasubramaniam, TKDD 2007), on the
  counts ``r_1 >= r_2 >= ... >= r_m`` of the sensitive values of a class:
  distinct: at least l distinct values; entropy: ``-sum p_i log p_i >= log l``;
  recursive (c, l): ``r_1 < c (r_l + r_{l+1} + ... + r_m)`` with r sorted in DEcreasing
  order (pycanon sorts increasingly, which tests a different condition).
* t-closeness (Li, Li & Venkatasubramanian 2007): the earth mover's distance between a
  class's distribution and the whole table's is at most t (:mod:`veil.anon.emd`).

Monotonicity (what the lattice search may infer): without suppression all these models are
monotone under generalization (a union of classes that satisfy them satisfies them:
counts add, distinct values unite, entropy is concave, recursive (c,l) is proved monotone
by Machanavajjhala et al., and the EMD is convex in the distribution). With suppression
only k-anonymity and distinct l-diversity remain monotone: a failing class merged with a
passing one passes, so the suppressed records can only shrink. For the others,
:meth:`PrivacyModel.assess` bounds how many records of a failing class every
specialization must still suppress (from the concavity of entropy and the convexity of
the EMD), which the search uses to rule out specializations.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod

import numpy as np

from veil._validation import check_choice, check_int, check_positive
from veil.anon.emd import HierarchyTree, equal_distance, hierarchical_distance, ordered_distance
from veil.anon.encoding import SensitiveDomain
from veil.anon.hierarchy import Hierarchy
from veil.errors import ConfigError, DataError

__all__ = ["PrivacyModel", "KAnonymity", "LDiversity", "TCloseness", "entropy_l",
           "recursive_c", "distinct_l"]

#: relative slack for floating-point comparisons of entropies and distances; a uniform
#: class over l values has entropy exactly log l, which floating point may miss by ulps.
_TOL = 1e-12


class PrivacyModel(ABC):
    """A privacy model: which equivalence classes satisfy it."""

    needs_sensitive = False
    monotone_with_suppression = False

    @abstractmethod
    def satisfied(self, counts: np.ndarray, hist: np.ndarray | None,
                  domain: SensitiveDomain | None) -> np.ndarray:
        """A boolean per class."""

    def bind(self, domain: SensitiveDomain | None) -> None:  # noqa: B027 - optional hook
        """Check the model against the sensitive attribute before any work starts."""

    def assess(self, counts: np.ndarray, hist: np.ndarray | None,
               domain: SensitiveDomain | None) -> tuple[np.ndarray, np.ndarray]:
        """Which classes satisfy the model, and a lower bound, per class, of the records
        that every specialization must suppress inside it (split into parts, the parts
        that satisfy the model hold at most the rest). A monotone model's failing class
        only splits into failing parts: all its records."""
        ok = self.satisfied(counts, hist, domain)
        forced = np.where(ok, 0, counts) if self.monotone_with_suppression else np.zeros_like(
            counts)
        return ok, forced


class KAnonymity(PrivacyModel):
    """Every equivalence class holds at least ``k`` records."""

    monotone_with_suppression = True

    def __init__(self, k: int) -> None:
        self.k = check_int(k, "k", low=1)

    def satisfied(self, counts, hist, domain):
        return counts >= self.k

    def __repr__(self) -> str:
        return f"KAnonymity({self.k})"

    def __str__(self) -> str:
        return f"{self.k}-anonymity"


def distinct_l(hist: np.ndarray) -> np.ndarray:
    """Number of distinct sensitive values per class."""
    return (hist > 0).sum(axis=1)


def entropy_l(hist: np.ndarray) -> np.ndarray:
    """``exp(H)`` per class, H the entropy (nats) of its sensitive values."""
    total = hist.sum(axis=1, keepdims=True)
    p = hist / np.maximum(total, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
    return np.exp(h)


def recursive_c(hist: np.ndarray, l: int) -> np.ndarray:
    """``r_1 / (r_l + ... + r_m)`` per class (r sorted decreasingly; inf below l values).

    Recursive (c, l)-diversity holds for a class iff c is larger than this ratio.
    """
    r = -np.sort(-hist, axis=1)
    tail = r[:, l - 1:].sum(axis=1) if l - 1 < r.shape[1] else np.zeros(r.shape[0])
    with np.errstate(divide="ignore"):
        return np.where(tail > 0, r[:, 0] / np.where(tail > 0, tail, 1), np.inf)


class LDiversity(PrivacyModel):
    """l-diversity of the sensitive attribute: ``variant`` distinct, entropy or recursive.

    ``c`` is required by (and only by) the recursive variant.
    """

    needs_sensitive = True

    def __init__(self, l: int, variant: str = "distinct", c: float | None = None) -> None:
        self.l = check_int(l, "l", low=1)
        self.variant = check_choice(variant, "variant", ("distinct", "entropy", "recursive"))
        if variant == "recursive":
            if c is None:
                raise ConfigError("c=None is not allowed for recursive (c,l)-diversity: "
                                  "pass c > 0")
            self.c = check_positive(c, "c")
        elif c is not None:
            raise ConfigError(f"c={c!r} is not allowed for {variant} l-diversity: c belongs "
                              "to variant='recursive'")
        else:
            self.c = None
        self.monotone_with_suppression = variant == "distinct"

    def satisfied(self, counts, hist, domain):
        if self.variant == "distinct":
            return distinct_l(hist) >= self.l
        if self.variant == "entropy":
            return entropy_l(hist) >= self.l * (1 - _TOL)
        return recursive_c(hist, self.l) < self.c

    def assess(self, counts, hist, domain):
        """Entropy l-diversity: entropy is concave, so a class of entropy H split into
        parts has ``H >= sum_i w_i H_i``; the parts that satisfy the model have
        ``H_i >= h0 = log(l)`` (and the others ``H_i >= 0``), so they hold at most
        ``|E| H / h0`` records and at least ``|E| (1 - H / h0)`` must be suppressed."""
        if self.variant != "entropy":
            return super().assess(counts, hist, domain)
        ok = self.satisfied(counts, hist, domain)
        h0 = math.log(self.l * (1 - _TOL))
        if h0 <= 0:
            return ok, np.zeros_like(counts)
        share = np.clip(1 - np.log(entropy_l(hist)) / h0, 0, 1)
        return ok, np.where(ok, 0, np.ceil(counts * share - 1e-6)).astype(counts.dtype)

    def __repr__(self) -> str:
        extra = f", c={self.c}" if self.c is not None else ""
        return f"LDiversity({self.l}, variant={self.variant!r}{extra})"

    def __str__(self) -> str:
        if self.variant == "recursive":
            return f"recursive ({self.c:g},{self.l})-diversity"
        return f"{self.variant} {self.l}-diversity"


class TCloseness(PrivacyModel):
    """t-closeness with the earth mover's distance.

    ``distance``: ``"equal"``, ``"ordered"`` (numeric sensitive attribute),
    ``"hierarchical"`` (needs ``hierarchy``, the sensitive attribute's generalization
    tree) or ``"auto"`` (hierarchical with a hierarchy, else ordered for numbers, else
    equal).
    """

    needs_sensitive = True

    def __init__(self, t: float, distance: str = "auto",
                 hierarchy: Hierarchy | None = None) -> None:
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 <= t <= 1:
            raise ConfigError(f"t={t!r} is not allowed: must be a number in [0, 1]")
        self.t = float(t)
        self.distance = check_choice(distance, "distance",
                                     ("auto", "equal", "ordered", "hierarchical"))
        if distance == "hierarchical" and hierarchy is None:
            raise ConfigError("distance='hierarchical' needs hierarchy=<the sensitive "
                              "attribute's Hierarchy>")
        if hierarchy is not None and not isinstance(hierarchy, Hierarchy):
            raise ConfigError(f"hierarchy={hierarchy!r} is not allowed: pass a Hierarchy")
        self.hierarchy = hierarchy
        self._tree: tuple[SensitiveDomain, HierarchyTree] | None = None
        self._top: tuple[SensitiveDomain, float] | None = None   # the largest distance

    def resolved_distance(self, domain: SensitiveDomain) -> str:
        if self.distance != "auto":
            return self.distance
        if self.hierarchy is not None:
            return "hierarchical"
        return "ordered" if domain.numeric else "equal"

    def bind(self, domain: SensitiveDomain | None) -> None:
        kind = self.resolved_distance(domain)
        if kind == "ordered" and not domain.numeric:
            raise DataError(f"the ordered EMD needs a numeric sensitive attribute; "
                            f"{domain.name!r} is categorical: use distance='equal' or "
                            "'hierarchical'")
        if kind == "hierarchical":
            self._tree = (domain, HierarchyTree(self.hierarchy, domain.labels, domain.name))

    def distances(self, hist: np.ndarray, domain: SensitiveDomain) -> np.ndarray:
        """EMD of each class's distribution to the table's."""
        P = hist / np.maximum(hist.sum(axis=1, keepdims=True), 1)
        kind = self.resolved_distance(domain)
        if kind == "equal":
            return equal_distance(P, domain.q)
        if kind == "ordered":
            return ordered_distance(P, domain.q)
        if self._tree is None or self._tree[0] is not domain:
            self.bind(domain)
        return hierarchical_distance(P, domain.q, self._tree[1])

    def satisfied(self, counts, hist, domain):
        return self.distances(hist, domain) <= self.t + _TOL

    def assess(self, counts, hist, domain):
        """The EMD to the table's distribution is convex in a class's distribution (an
        optimal-transport cost, linear constraints), so a class at distance d split into
        parts has ``d <= sum_i w_i d_i``; parts that satisfy the model have
        ``d_i <= t`` and the others ``d_i <= D``, the largest distance of any
        distribution (attained at a single value, by convexity). So the parts that fail
        hold at least ``|E| (d - t) / (D - t)`` records."""
        d = self.distances(hist, domain)
        t = self.t + _TOL
        ok = d <= t
        if self._top is None or self._top[0] is not domain:
            self._top = (domain, float(self.distances(np.eye(domain.size), domain).max()))
        top = self._top[1]
        if top <= t:
            return ok, np.zeros_like(counts)
        share = np.clip((d - t) / (top - t), 0, 1)
        return ok, np.where(ok, 0, np.ceil(counts * share - 1e-6)).astype(counts.dtype)

    def __repr__(self) -> str:
        return f"TCloseness({self.t}, distance={self.distance!r})"

    def __str__(self) -> str:
        return f"{self.t:g}-closeness ({self.distance} EMD)"


def max_suppressed(limit: float, n: int) -> int:
    """Records that a suppression limit (a share of the table) allows to suppress."""
    return int(math.floor(limit * n + 1e-9))
