"""How well a membership-inference attack separates members from non-members.

An attack gives every candidate record a score (higher = "more likely a member") and
decides "member" when the score is at least a threshold t. Over all thresholds:

* ROC curve: TPR(t) = P[score >= t | member] against FPR(t) = P[score >= t | non-member];
* AUC: the area under it = P[score(member) > score(non-member)] (+ half the ties);
* advantage (Yeom et al. 2018): max_t |TPR(t) - FPR(t)|, the attack's best gain over guessing;
* TPR at a low FPR (Carlini et al. 2022): the largest TPR(t) with FPR(t) <= target, the
  figure that matters for confident attacks (0.1% and 1% here). With n non-members an FPR
  below 1/n cannot be measured: the function then returns the TPR at FPR = 0.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as _sk_roc_curve

from veil._validation import check_array, check_probability

LOW_FPRS = (0.001, 0.01)


def check_scores(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray]:
    """Both score sets as finite, non-empty 1-D float arrays."""
    return (check_array(member_scores, "member_scores", ndim=1),
            check_array(nonmember_scores, "nonmember_scores", ndim=1))


def _labelled(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray]:
    ins, outs = check_scores(member_scores, nonmember_scores)
    labels = np.concatenate([np.ones(ins.size), np.zeros(outs.size)])
    return labels, np.concatenate([ins, outs])


def roc_curve(member_scores, nonmember_scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) at every distinct threshold, from (0, 0) to (1, 1)."""
    labels, scores = _labelled(member_scores, nonmember_scores)
    fpr, tpr, thresholds = _sk_roc_curve(labels, scores, drop_intermediate=False)
    return fpr, tpr, thresholds


def auc(member_scores, nonmember_scores) -> float:
    """Area under the ROC curve (0.5 = guessing)."""
    labels, scores = _labelled(member_scores, nonmember_scores)
    return float(roc_auc_score(labels, scores))


def advantage(member_scores, nonmember_scores) -> float:
    """max over thresholds of |TPR - FPR|."""
    fpr, tpr, _ = roc_curve(member_scores, nonmember_scores)
    return float(np.max(np.abs(tpr - fpr)))


def tpr_at_fpr(member_scores, nonmember_scores, fpr: float) -> float:
    """The largest TPR reached at a false-positive rate of at most ``fpr``."""
    target = check_probability(fpr, "fpr")
    f, t, _ = roc_curve(member_scores, nonmember_scores)
    return float(np.max(t[f <= target]))


def attack_metrics(member_scores, nonmember_scores) -> dict[str, float]:
    """AUC, advantage and TPR at FPR 0.1% and 1%, with the sample sizes."""
    ins, outs = check_scores(member_scores, nonmember_scores)
    fpr, tpr, _ = roc_curve(ins, outs)
    out = {"auc": auc(ins, outs), "advantage": float(np.max(np.abs(tpr - fpr)))}
    for target in LOW_FPRS:
        out[f"tpr_at_fpr_{target:g}"] = float(np.max(tpr[fpr <= target]))
    out["n_members"] = int(ins.size)
    out["n_nonmembers"] = int(outs.size)
    return out
