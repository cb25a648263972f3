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
import pandas as pd

from veil._validation import check_choice, check_int, check_positive
from veil.anon.emd import HierarchyTree, equal_distance, hierarchical_distance, ordered_distance
from veil.anon.encoding import ClassTable, EncodedTable, SensitiveDomain, _fits, _strides
from veil.anon.hierarchy import Hierarchy
from veil.errors import ConfigError, DataError

__all__ = ["PrivacyModel", "KAnonymity", "LDiversity", "TCloseness", "BasicBetaLikeness",
           "EnhancedBetaLikeness", "DeltaDisclosure", "DeltaPresence", "KMap", "PopulationCounts",
           "entropy_l", "recursive_c", "distinct_l"]

#: relative slack for floating-point comparisons of entropies and distances; a uniform
#: class over l values has entropy exactly log l, which floating point may miss by ulps.
_TOL = 1e-12


class PrivacyModel(ABC):
    """A privacy model: which equivalence classes satisfy it.

    ``monotone``: a union of classes that satisfy it satisfies it (so without suppression
    every generalization of an anonymous transformation is anonymous);
    ``monotone_with_suppression``: the same holds with a suppression limit (the
    suppressed records can only shrink). The search prunes only on what a model declares.
    ``min_class_size``: every kept class holds at least this many records.
    """

    needs_sensitive = False
    monotone = True
    monotone_with_suppression = False
    min_class_size = 1

    @abstractmethod
    def satisfied(self, counts: np.ndarray, hist: np.ndarray | None,
                  domain: SensitiveDomain | None) -> np.ndarray:
        """A boolean per class."""

    def bind(self, domain: SensitiveDomain | None) -> None:  # noqa: B027 - optional hook
        """Check the model against the sensitive attribute before any work starts."""

    def prepare(self, n: int) -> None:  # noqa: B027 - optional hook
        """Derive what depends on the table's size (n records) before any work starts."""

    def attach(self, enc: EncodedTable) -> None:  # noqa: B027 - optional hook
        """See the encoded table before a search (models of a population table)."""

    def check(self, levels: np.ndarray, table: ClassTable,
              domain: SensitiveDomain | None) -> np.ndarray:
        """Which classes of a transformation (``levels``) satisfy the model."""
        return self.satisfied(table.counts, table.hist, domain)

    def assess_at(self, levels: np.ndarray, table: ClassTable, rows: np.ndarray,
                  domain: SensitiveDomain | None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`assess` of the classes ``rows`` of a transformation."""
        return self.assess(table.counts[rows], None if table.hist is None else
                           table.hist[rows], domain)

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
        self.min_class_size = self.k

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


def _check_attribute(model: PrivacyModel, domain: SensitiveDomain | None) -> None:
    if domain is None or domain.name != model.attribute:
        raise ConfigError(f"{model!r} protects attribute {model.attribute!r}, but the "
                          f"sensitive attribute is {None if domain is None else domain.name!r}"
                          f": pass sensitive={model.attribute!r}")


class _Likeness(PrivacyModel):
    """A bound on how much more likely each sensitive value is in a class than in the
    table: ``(p_E(s) - q(s)) / q(s) <= bound(s)`` for every value s present in E, p_E the
    class's distribution and q the table's (Cao & Karras, PVLDB 2012). p_E of a union of
    classes is a weighted mean of theirs, so the model is monotone under generalization
    (not under suppression, as ARX declares)."""

    needs_sensitive = True

    def __init__(self, attribute: str, beta: float) -> None:
        self.attribute = str(attribute)
        self.beta = check_positive(beta, "beta")

    def bind(self, domain):
        _check_attribute(self, domain)

    def bounds(self, q: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _excess(self, counts, hist, domain) -> tuple[np.ndarray, np.ndarray]:
        """``a_s = (1 + bound(s)) q(s)`` and, per class and value, ``c_E(s) - a_s |E|``:
        the class passes where no value exceeds (``p_E(s) <= a_s`` is the bound on the
        gain, and a value absent from E has no gain to bound)."""
        cap = (1 + self.bounds(domain.q) + _TOL) * domain.q
        return cap, hist - counts[:, None] * cap

    def satisfied(self, counts, hist, domain):
        return (self._excess(counts, hist, domain)[1] <= 0).all(axis=1)

    def assess(self, counts, hist, domain):
        """A class E split into parts: the parts that pass hold at most ``a_s = (1 +
        bound(s)) q(s)`` of their records with value s, so with f records in failing
        parts, ``c_E(s) - f <= a_s (|E| - f)``: every specialization suppresses at least
        ``f >= (c_E(s) - a_s |E|) / (1 - a_s)`` records of E, for each s with a_s < 1
        (computed for the failing classes only)."""
        cap, excess = self._excess(counts, hist, domain)
        ok = (excess <= 0).all(axis=1)
        forced = np.zeros_like(counts)
        fail = np.flatnonzero(~ok)
        if fail.size:
            room = np.where(cap < 1, 1 - cap, np.inf)
            need = (excess[fail] / room).max(axis=1)
            forced[fail] = np.clip(np.ceil(need - 1e-6), 0, counts[fail])
        return ok, forced


class BasicBetaLikeness(_Likeness):
    """Basic beta-likeness: every value's relative gain is at most beta."""

    def bounds(self, q):
        return np.full_like(q, self.beta)

    def __repr__(self) -> str:
        return f"BasicBetaLikeness({self.attribute!r}, {self.beta})"

    def __str__(self) -> str:
        return f"basic {self.beta:g}-likeness"


class EnhancedBetaLikeness(_Likeness):
    """Enhanced beta-likeness: the gain of a value of table frequency q is at most
    ``min(beta, -ln q)``, so that ``p_E(s) <= q (1 - ln q) < 1``: no class reveals a
    value with certainty."""

    def bounds(self, q):
        return np.minimum(self.beta, -np.log(q))

    def __repr__(self) -> str:
        return f"EnhancedBetaLikeness({self.attribute!r}, {self.beta})"

    def __str__(self) -> str:
        return f"enhanced {self.beta:g}-likeness"


class DeltaDisclosure(PrivacyModel):
    """delta-disclosure privacy (Brickell & Shmatikov, KDD 2008): ``|log2(p_E(s) / q(s))|
    < delta`` for every sensitive value s present in class E. Not monotone (a union may
    hold a value rarely that some part lacks), as ARX declares."""

    needs_sensitive = True
    monotone = False

    def __init__(self, attribute: str, delta: float) -> None:
        self.attribute = str(attribute)
        self.delta = check_positive(delta, "delta")

    def bind(self, domain):
        _check_attribute(self, domain)

    def satisfied(self, counts, hist, domain):
        p = hist / np.maximum(counts, 1)[:, None]
        with np.errstate(divide="ignore"):
            ratio = np.abs(np.log2(np.where(hist > 0, p, domain.q) / domain.q))
        return (ratio < self.delta).all(axis=1)

    def __repr__(self) -> str:
        return f"DeltaDisclosure({self.attribute!r}, {self.delta})"

    def __str__(self) -> str:
        return f"{self.delta:g}-disclosure privacy"


class PopulationCounts:
    """The population size of every class of the research table, at any levels.

    The population table holds the quasi-identifiers of a population that contains the
    research table (as a multiset of records, checked at level 0); it is encoded with
    the same hierarchies and its classes are matched to the research classes by label.
    """

    def __init__(self, enc: EncodedTable, population: pd.DataFrame) -> None:
        missing = [c for c in enc.names if c not in population.columns]
        if missing:
            raise DataError(f"the population table lacks quasi-identifier {missing[0]!r}")
        self.enc = EncodedTable(population, {c.name: c.hierarchy for c in enc.columns}, None,
                                histograms=False)
        self.maps = []
        for mine, theirs in zip(enc.columns, self.enc.columns):
            per_level = []
            for level in range(mine.height + 1):
                at = np.searchsorted(theirs.labels[level], mine.labels[level])
                at = np.minimum(at, theirs.labels[level].size - 1)
                if not np.array_equal(theirs.labels[level][at], mine.labels[level]):
                    raise DataError(f"column {mine.name!r} holds values the population table "
                                    "lacks: the research records must be in the population")
                per_level.append(at)
            self.maps.append(per_level)
        zero = np.zeros(len(enc.columns), dtype=np.int64)
        pcount, _ = self(zero, enc.bottom())
        if np.any(pcount < enc.bottom().counts):
            raise DataError("the research table is not contained in the population table: "
                            "some records occur more often in it")

    def __call__(self, levels: np.ndarray, table: ClassTable) -> tuple[np.ndarray, bool]:
        """Population size of each class of ``table`` (at ``levels``), and whether the
        population has classes without any research record."""
        pop = self.enc.rollup(self.enc.bottom(), np.zeros_like(levels), levels)
        radices = self.enc.radices(levels)
        mine = np.stack([self.maps[j][lv][table.codes[:, j]] for j, lv in enumerate(levels)],
                        axis=1)
        if _fits(radices):
            strides = _strides(radices)
            theirs, mine = pop.codes @ strides, mine @ strides
        else:
            both, ids = np.unique(np.vstack([pop.codes, mine]), axis=0, return_inverse=True)
            ids = ids.ravel()
            theirs, mine = ids[:len(pop)], ids[len(pop):]
        order = np.argsort(theirs, kind="stable")
        at = order[np.searchsorted(theirs[order], mine)]
        return pop.counts[at], np.unique(at).size < len(pop)


def _population_table(value: object) -> pd.DataFrame:
    if not isinstance(value, pd.DataFrame) or len(value) == 0:
        raise ConfigError(f"population={type(value).__name__} is not allowed: pass the "
                          "population's table (a non-empty DataFrame with the "
                          "quasi-identifiers)")
    return value


class DeltaPresence(PrivacyModel):
    """delta-presence (Nergiz, Atzori & Clifton, SIGMOD 2007): an attacker who knows a
    person is in the population learns that they are in the released (research) table
    with probability ``delta_E = |E| / |P_E|`` in ``[dmin, dmax]``, P_E the population
    records of class E. As in ARX, population classes without research records count
    as ``delta = 0``: if dmin > 0 such a class fails and cannot be suppressed (it is
    not released), so the transformation fails. ``delta_E`` of a union is a weighted
    mean of its parts': monotone without suppression, not with it (ARX's declaration).
    """

    def __init__(self, dmin: float, dmax: float, *, population: pd.DataFrame) -> None:
        for name, value in (("dmin", dmin), ("dmax", dmax)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not 0 <= value <= 1:
                raise ConfigError(f"{name}={value!r} is not allowed: must be in [0, 1]")
        if dmin > dmax:
            raise ConfigError(f"dmin={dmin!r} is not allowed: above dmax={dmax!r}")
        self.dmin, self.dmax = float(dmin), float(dmax)
        self.population = _population_table(population)
        self._counts: PopulationCounts | None = None

    def attach(self, enc):
        self._counts = PopulationCounts(enc, self.population)

    def check(self, levels, table, domain):
        pcount, empty = self._counts(levels, table)
        if empty and self.dmin > 0:
            return np.zeros(len(table), dtype=bool)
        delta = table.counts / pcount
        return (delta >= self.dmin - _TOL) & (delta <= self.dmax + _TOL)

    def assess_at(self, levels, table, rows, domain):
        return self.check(levels, table, domain)[rows], np.zeros(rows.size, dtype=np.int64)

    def satisfied(self, counts, hist, domain):
        raise ConfigError(f"{self} needs algorithm='optimal' (classes of generalization "
                          "levels, matched to the population)")

    def __repr__(self) -> str:
        return f"DeltaPresence({self.dmin}, {self.dmax}, population=<{len(self.population)} rows>)"

    def __str__(self) -> str:
        return f"({self.dmin:g}, {self.dmax:g})-presence"


KMAP_ESTIMATORS = ("poisson", "zero-truncated-poisson")


class KMap(PrivacyModel):
    """k-map (Sweeney 2002): every released class matches at least k people of the
    population the sample was drawn from.

    With ``population`` (the population's table, which contains the sample) each class's
    population size is counted (:class:`PopulationCounts`). Without it, the population
    size F of a sample class of size f is estimated (El Emam & Dankar, JAMIA 2008), as ARX
    does: with sampling fraction ``pi = n / population_size`` and ``lambda = pi k``, the
    smallest class size k' such that a class of k' sample records has fewer than k
    population members with probability at most ``significance`` under the estimator
    (Poisson(lambda), or Poisson(lambda) truncated at zero) is derived
    (:func:`veil.anon.population.kmap_k`), and k-map becomes k'-anonymity (k' <= k).
    Population sizes add up under generalization: monotone, with suppression too.
    """

    monotone_with_suppression = True

    def __init__(self, k: int, *, population: pd.DataFrame | None = None,
                 estimator: str = "zero-truncated-poisson", population_size: int | None = None,
                 significance: float = 0.01) -> None:
        self.k = check_int(k, "k", low=1)
        self.population = None if population is None else _population_table(population)
        self.estimator = check_choice(estimator, "estimator", KMAP_ESTIMATORS)
        if (population is None) == (population_size is None):
            raise ConfigError("KMap needs exactly one of population=<table> (counted) and "
                              "population_size=<people> (estimated)")
        self.population_size = None if population_size is None else check_int(
            population_size, "population_size", low=1)
        if isinstance(significance, bool) or not isinstance(significance, numbers.Real) \
                or not 0 <= significance <= 1:
            raise ConfigError(f"significance={significance!r} is not allowed: must be a "
                              "probability in [0, 1]")
        self.significance = float(significance)
        self.derived_k: int | None = None
        self._counts: PopulationCounts | None = None

    def prepare(self, n: int) -> None:
        """Derive k' for a sample of n records (before any search)."""
        from veil.anon.population import kmap_k

        if self.population is not None:
            return
        if n > self.population_size:
            raise DataError(f"population_size={self.population_size} is not allowed: the "
                            f"sample holds {n} records, more than the population")
        self.derived_k = min(self.k, kmap_k(self.k, n / self.population_size,
                                            self.significance, self.estimator), n)
        self.min_class_size = self.derived_k

    def attach(self, enc):
        if self.population is not None:
            self._counts = PopulationCounts(enc, self.population)

    def check(self, levels, table, domain):
        if self.population is None:
            return self.satisfied(table.counts, table.hist, domain)
        return self._counts(levels, table)[0] >= self.k

    def satisfied(self, counts, hist, domain):
        if self.population is not None:
            raise ConfigError(f"{self} with a population table needs algorithm='optimal'")
        return counts >= self.min_class_size

    def __repr__(self) -> str:
        if self.population is not None:
            return f"KMap({self.k}, population=<{len(self.population)} rows>)"
        return (f"KMap({self.k}, estimator={self.estimator!r}, "
                f"population_size={self.population_size}, significance={self.significance})")

    def __str__(self) -> str:
        how = "population table" if self.population is not None else self.estimator
        return f"{self.k}-map ({how})"


def max_suppressed(limit: float, n: int) -> int:
    """Records that a suppression limit (a share of the table) allows to suppress."""
    return int(math.floor(limit * n + 1e-9))
