"""Measure what leaks: membership inference, empirical epsilon, mutual information, reports.

* Attacks (:mod:`~veil.audit.attacks`): :func:`membership_inference` — loss and confidence
  thresholds (Yeom et al. 2018), shadow models (Shokri et al. 2017), LiRA online/offline
  (Carlini et al. 2022) — returning an :class:`AttackResult` with AUC, advantage, TPR at
  low FPR and the ROC curve (:mod:`~veil.audit.metrics`).
* Empirical epsilon: :func:`epsilon_lower_bound` (Clopper–Pearson on independent trials;
  Jagielski et al. 2020, Nasr et al. 2021), :func:`one_run_epsilon_lower_bound` (Steinke,
  Nasr & Jagielski 2023) with :func:`make_canaries` (canary clients, gradient canaries),
  :func:`coordinate_canaries` (white-box canaries for an unmodified DP-SGD) and
  :func:`label_flip_canaries` (black-box canary records).
* Mutual information (:mod:`~veil.audit.mi`): :func:`mutual_information` with KSG, Ross,
  plug-in (Miller–Madow), KDE, MINE and InfoNCE estimators; the leakage quantities
  :func:`sample_model_mi`, :func:`party_aggregate_mi` and their DP ceiling :func:`mi_ceiling`.
* Reports: :func:`privacy_report` on a run directory (:mod:`~veil.audit.rundir`) -> JSON and a
  self-contained HTML page; ``veil audit RUN_DIR`` on the command line.
"""

from __future__ import annotations

from veil.audit.attacks import AttackResult, loss_scores, membership_inference
from veil.audit.canaries import (
    Canaries,
    CanaryRecords,
    CoordinateCanaries,
    coordinate_canaries,
    label_flip_canaries,
    make_canaries,
)
from veil.audit.epsilon import (
    EpsilonBound,
    audit_samples_needed,
    clopper_pearson,
    epsilon_lower_bound,
)
from veil.audit.leakage import (
    membership_mi,
    mi_ceiling,
    party_aggregate_mi,
    sample_model_mi,
)
from veil.audit.metrics import advantage, attack_metrics, auc, roc_curve, tpr_at_fpr
from veil.audit.mi import MIEstimate, mutual_information
from veil.audit.one_run import (
    OneRunBound,
    canaries_needed,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from veil.audit.report import PrivacyReport, privacy_report
from veil.audit.rundir import Run, RunRecord, read_run, write_run

__all__ = [
    "membership_inference", "AttackResult", "loss_scores",
    "roc_curve", "auc", "advantage", "tpr_at_fpr", "attack_metrics",
    "epsilon_lower_bound", "EpsilonBound", "clopper_pearson", "audit_samples_needed",
    "one_run_epsilon_lower_bound", "one_run_p_value", "OneRunBound", "canaries_needed",
    "make_canaries", "Canaries", "label_flip_canaries", "CanaryRecords",
    "coordinate_canaries", "CoordinateCanaries",
    "mutual_information", "MIEstimate",
    "sample_model_mi", "party_aggregate_mi", "membership_mi", "mi_ceiling",
    "privacy_report", "PrivacyReport", "Run", "RunRecord", "read_run", "write_run",
]
