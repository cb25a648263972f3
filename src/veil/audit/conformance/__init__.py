"""The privacy conformance suite: every public release path, tested black-box against its
neighbours (issue #28; DESIGN.md principle 1).

* :mod:`~veil.audit.conformance.registry`: :func:`register` (one call per path; a duplicate
  name is refused), :class:`Case`, :class:`Pair` and the neighbour relations.
* :mod:`~veil.audit.conformance.tester`: :func:`audit` (a Clopper-Pearson lower bound on
  epsilon at the certified delta per neighbouring pair, and the structure test),
  :func:`uncovered` (release sites of veil that no case covers).
* The registrations: :mod:`.paths_dp` (mechanisms, statistics, queries),
  :mod:`.paths_learn` (private models, DP-SGD), :mod:`.paths_fl` (federations, vertical,
  split and transfer learning, hybrid), :mod:`.paths_anon` (SafePub). Importing this
  package registers them all.

``veil audit conformance`` prints the table; ``tests/audit/test_conformance.py`` runs the
fast tier in ``make test`` and the deep tier under ``-m slow``.
"""

from __future__ import annotations

from veil.audit.conformance import (  # noqa: F401 (registers)
    paths_anon,
    paths_dp,
    paths_fl,
    paths_learn,
)
from veil.audit.conformance.registry import (
    ADD_REMOVE,
    ADD_REMOVE_CLIENT,
    REPLACE,
    REPLACE_CLIENT,
    Case,
    Pair,
    case,
    cases,
    register,
)
from veil.audit.conformance.tester import (
    PairResult,
    Verdict,
    audit,
    audit_pair,
    mechanism_classes,
    release_sites,
    uncovered,
)

__all__ = ["register", "cases", "case", "Case", "Pair", "ADD_REMOVE", "REPLACE",
           "ADD_REMOVE_CLIENT", "REPLACE_CLIENT", "audit", "audit_pair", "Verdict",
           "PairResult", "release_sites", "mechanism_classes", "uncovered"]
