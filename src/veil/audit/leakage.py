"""The two leakage quantities veil reports, their estimators, and what DP certifies of them.

Let Z ~ Bernoulli(1/2) decide whether one target is in the training run, and let the
auditor see the released output (a trained model, or the sequence of aggregates of a
federated run).

* **Sample-model MI** — I(Z; theta): how much the trained model theta tells about whether one
  record was in the training data. Estimated as I(Z; S) with S the membership score of the
  record under the model; by the data-processing inequality I(Z; S) <= I(Z; theta), so the
  estimate is a (noisy) *lower* estimate of the leakage, as strong as the attack behind S.
  Computed over audit records (or canaries) whose membership was decided by fair coins.
* **Party-aggregate MI** — I(Z_p; A): how much the released aggregates A of a federated run
  tell about whether a party p took part with its update. Estimated with canary clients
  (:class:`veil.audit.Canaries`): Z_p their inclusion coin, S_p = sum_t <A_t, u_p>.

Both use Ross's nearest-neighbour estimator (discrete Z, continuous S) on a balanced sample
(the larger class is subsampled, so the empirical prior of Z is the 1/2 of the definition).

What DP certifies: if the training run is (epsilon, delta)-DP, then for Z ~ Bernoulli(1/2)

    I(Z; output) <= log 2 - (1 - delta) * H_b(1 / (1 + e^epsilon))        (nats),

because every (epsilon, delta)-DP pair of output distributions is a post-processing of the
canonical randomized-response pair of Kairouz, Oh & Viswanath (2015, "The composition
theorem for differential privacy": the (epsilon, delta) randomized response simulates every
(epsilon, delta)-DP mechanism on a pair of neighbouring inputs), whose output
reveals Z with probability delta and otherwise flips it with probability 1 / (1 + e^eps);
the data-processing inequality does the rest. :func:`mi_ceiling` computes it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from veil._validation import check_array, check_delta
from veil.audit.canaries import Canaries
from veil.audit.metrics import check_scores
from veil.audit.mi import MIEstimate, ross
from veil.errors import ConfigError, DataError
from veil.random import check_rng


def mi_ceiling(epsilon: float, delta: float = 0.0) -> float:
    """Largest I(Z; output) in nats an (epsilon, delta)-DP run allows for Z ~ Bernoulli(1/2)."""
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ConfigError(f"epsilon={epsilon!r} is not allowed: must be finite and >= 0")
    delta = check_delta(delta)
    tail = math.exp(-epsilon)     # p = 1 / (1 + e^eps), written so no epsilon overflows
    p = tail / (1.0 + tail)
    h = 0.0 if p <= 0.0 else -(p * math.log(p) + (1 - p) * math.log1p(-p))
    return math.log(2.0) - (1.0 - delta) * h


def membership_mi(scores, included, *, k: int = 3, bootstrap: int = 100,
                  confidence: float = 0.95, rng=None) -> MIEstimate:
    """I(Z; S) in nats for membership coins ``included`` and scores ``scores``, balanced."""
    s = check_array(scores, "scores", ndim=1)
    z = np.asarray(included)
    if z.shape != s.shape:
        raise DataError(f"included has shape {z.shape} and scores {s.shape}; need one "
                        "membership flag per score")
    z = z.astype(bool)
    rng = check_rng(rng)
    ins, outs = np.flatnonzero(z), np.flatnonzero(~z)
    size = min(ins.size, outs.size)
    if size == 0:
        raise DataError("membership MI needs both members and non-members; got only "
                        f"{'members' if outs.size == 0 else 'non-members'}")
    rows = np.concatenate([ins[rng.permutation(ins.size)[:size]],
                           outs[rng.permutation(outs.size)[:size]]])
    return ross(z[rows].astype(np.int64), s[rows], k=k, bootstrap=bootstrap,
                confidence=confidence, rng=rng)


def sample_model_mi(member_scores, nonmember_scores, **options: Any) -> MIEstimate:
    """Sample-model MI I(Z; S) from attack scores of members and non-members."""
    ins, outs = check_scores(member_scores, nonmember_scores)
    return membership_mi(np.concatenate([ins, outs]),
                         np.concatenate([np.ones(ins.size, bool), np.zeros(outs.size, bool)]),
                         **options)


def party_aggregate_mi(canaries: Canaries, aggregates, **options: Any) -> MIEstimate:
    """Party-aggregate MI I(Z_p; S_p) from canary clients and the released aggregates."""
    return membership_mi(canaries.scores(aggregates), canaries.included, **options)
