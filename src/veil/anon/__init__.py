"""Anonymization for data publishing.

* :class:`Hierarchy` — generalization hierarchies (ARX CSV files, intervals, masking);
* privacy models :class:`KAnonymity`, :class:`LDiversity` (distinct, entropy, recursive),
  :class:`TCloseness` (equal, ordered and hierarchical EMD), ARX's others
  (:class:`KMap`, :class:`DeltaPresence`, :class:`BasicBetaLikeness`, :class:`EnhancedBetaLikeness`,
  :class:`DeltaDisclosure`, and on the whole table :class:`AverageReidentificationRisk`,
  :class:`SampleUniqueness`, :class:`PopulationUniqueness`), and :func:`check`, which
  reports the k, l, c and t a table achieves;
* :func:`analyze_risk` — prosecutor, journalist and marketer risk, sample and population
  uniqueness (:mod:`~veil.anon.risk`, :mod:`~veil.anon.population`);
* :func:`anonymize` — optimal full-domain generalization with suppression (ARX's optimum),
  Mondrian, MDAV microaggregation and Anatomy behind one call;
* :mod:`~veil.anon.metrics` (non-uniform entropy, DM*, AECS, loss/NCP, precision,
  prosecutor risk), :mod:`~veil.anon.perturbation` (permutation, noise, swapping) and
  :mod:`~veil.anon.rules` (Apriori and association-rule hiding).
"""

from __future__ import annotations

from veil.anon import metrics, perturbation, rules
from veil.anon.api import ALGORITHMS, AnonymizationResult, anonymize
from veil.anon.check import CheckReport, check
from veil.anon.hierarchy import Hierarchy
from veil.anon.metrics import RiskReport, reidentification_risk
from veil.anon.models import (
    BasicBetaLikeness,
    DeltaDisclosure,
    DeltaPresence,
    EnhancedBetaLikeness,
    KAnonymity,
    KMap,
    LDiversity,
    PrivacyModel,
    TCloseness,
)
from veil.anon.perturbation import add_noise, permute_sensitive, rank_swap
from veil.anon.risk import (
    AverageReidentificationRisk,
    PopulationUniqueness,
    RiskAnalysis,
    SampleUniqueness,
    analyze_risk,
)
from veil.anon.rules import Rule, association_rules, hide_rules

__all__ = [
    "ALGORITHMS", "AnonymizationResult", "AverageReidentificationRisk", "BasicBetaLikeness",
    "CheckReport", "DeltaDisclosure", "DeltaPresence", "EnhancedBetaLikeness", "Hierarchy",
    "KAnonymity", "KMap",
    "LDiversity", "PopulationUniqueness", "PrivacyModel", "RiskAnalysis", "RiskReport", "Rule",
    "SampleUniqueness", "TCloseness", "add_noise", "analyze_risk", "anonymize",
    "association_rules", "check", "hide_rules", "metrics", "permute_sensitive", "perturbation",
    "rank_swap", "reidentification_risk", "rules",
]
