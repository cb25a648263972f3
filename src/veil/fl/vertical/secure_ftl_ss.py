"""Secure federated transfer learning on secret shares (Liu, Kang, Xing, Chen & Yang, "A
Secure Federated Transfer Learning Framework", IEEE Intelligent Systems 2020,
arXiv:1812.03337: the secret-sharing protocol with Beaver triples; the semi-honest
SPDZ-style version of Sharma, Xing, Liu & Kang, "Secure and Efficient Federated Transfer
Learning", IEEE Big Data 2019, arXiv:1910.13271, reports 0.8 s per iteration of 500 people).

The model, the loss and its gradients are those of :mod:`veil.fl.vertical.secure_ftl`
(the HE variant): A (the source, MPC party 0) holds ``X_A`` and labels, B (the target, MPC
party 1) holds ``X_B``; each trains its own representation network, here any tanh MLP
(:class:`veil.fl.vertical._ftl.Network`, ``layers`` hidden widths). One iteration on a
batch S of overlapping people, in a two-party :class:`veil.mpc.Session` (``[v]``: v
additively shared, ``|S|`` times every gradient so that fixed point keeps its precision):

1. each party evaluates its network in the clear and shares what only it knows:
   A: ``a_i = -y_i Phi / 2 - 2 gamma u_A,i``, ``M = Phi Phi^T / 4``, ``Phi``,
   ``-y_i / 2`` and ``u_A,i`` (i in S), and the Jacobian ``J = dPhi/dW_A`` of its own
   network; B: ``u_B,i`` (i in S) and ``K = sum_i u_B,i u_B,i^T / 4``;
2. on shares (Beaver products for every product of the two parties' values)::

       [G_B,i]  = [a_i] + [u_B,i] [M] + 2 gamma [u_B,i]          (|S| dL/du_B,i)
       [g_Phi]  = sum_i [-y_i / 2] [u_B,i] + [K] [Phi]           (|S| dL/dPhi)
       [G_A,i]  = 2 gamma ([u_A,i] - [u_B,i])                    (|S| dL/du_A,i, batch part)

3. each party's backward pass (:class:`~veil.fl.vertical._ftl.Network`) runs on shares
   too: the owner shares its activations, derivatives ``1 - h^2`` and weights, and
   ``delta_L = G * (1 - u^2)``, ``dW_l = [h_{l-1}, 1]^T delta_l``,
   ``delta_{l-1} = (delta_l W_l[:-1]^T) * (1 - h_{l-1}^2)`` are Beaver products; A adds
   ``J g_Phi`` (the part of dL/du_A,k = (y_k / N_A) dL/dPhi on all its rows);
4. each party's weight gradient is revealed to that party only (``reveal(to=...)``); it
   divides by ``|S|`` and steps ``W <- W - lr (dL/dW + lam W)``.

Prediction for B's rows ``X``: ``phi_j = [u_B,j] . [Phi]``, revealed to B only.

Threat model: two semi-honest parties. Correlated randomness comes from the trusted dealer
(``correlation="dealer"``: a third party that never colludes with A or B and sees none of
their messages; the session plays it) or, without a dealer, from Paillier
(``correlation="paillier"``: Gilboa / SecureML triples, :mod:`veil.mpc.triples`, and
SecureML's local truncation, which fails with probability about 2^(k + 1 - 64) for a
value of k bits, Mohassel & Zhang 2017, Theorem 1). Each party learns its own weight
gradients (what it learns in the HE variant too) and B its predictions; the
representations, Phi, the labels and the per-row gradients stay in shares (additive
sharing is perfectly hiding; Beaver openings are uniformly masked). As in
:func:`veil.fl.vertical.linear.train_ss`, the runner :func:`train_ss_ftl` holds both
parties' plaintext halves in this process and drives one session; what crosses between
the MPC parties is shares and masked openings only. Malicious parties are not covered.
Every message between the MPC parties is checked by :mod:`veil.mpc.party` (session,
sender, instruction, step, shapes): a bad one is a :class:`~veil.errors.ProtocolError`
naming the sender, as the source (party 0) or the target (party 1).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._validation import check_choice, check_int
from veil.errors import ConfigError, DataError, ProtocolError
from veil.fl.vertical._ftl import FTLParty, FTLStats, Network, signed_labels
from veil.mpc.fixedpoint import INPUT_BITS
from veil.random import check_rng

__all__ = ["SSFTLSource", "SSFTLTarget", "train_ss_ftl", "predict_ss_ftl", "CORRELATIONS"]

log = logging.getLogger(__name__)

CORRELATIONS = ("dealer", "paillier")
_ROLES = ("source", "target")


class SSFTLSource(FTLParty):
    """Party A: features, labels in {0, 1} or {-1, +1} and the overlap rows; the network
    and training settings as keywords (:class:`veil.fl.vertical._ftl.FTLParty`:
    ``layers``, ``dim``, ``learning_rate``, ``gamma``, ``lam``, ``rng``)."""

    name = "source"

    def __init__(self, X: Any, y: Any, overlap: Any, **kw: Any) -> None:
        super().__init__(X, overlap, **kw)
        self._y = signed_labels(y, self._X.shape[0])

    def phi(self) -> np.ndarray:
        """Phi = mean of y_k u_A,k over A's rows."""
        return (self._y[:, None] * self.represent()).mean(axis=0)


class SSFTLTarget(FTLParty):
    """Party B: features and the overlap rows; no labels (keywords as
    :class:`SSFTLSource`)."""

    name = "target"


def _session(correlation: str, frac_bits: int, paillier_bits: int, insecure_ok: bool,
             rng: Any) -> Any:
    from veil.mpc import Session

    return Session(parties=2, frac_bits=frac_bits, correlation=correlation,
                   paillier_bits=paillier_bits, insecure_ok=insecure_ok, rng=rng)


def _named(exc: ProtocolError) -> ProtocolError:
    """The MPC engine's error with each party named by its role."""
    text = re.sub(r"party ([01])\b", lambda m: f"party {m[1]} ({_ROLES[int(m[1])]!r})",
                  str(exc))
    return ProtocolError(f"secure FTL (secret sharing): {text}")


def _augment(h: np.ndarray) -> np.ndarray:
    return np.hstack([h, np.ones((h.shape[0], 1))])


def _backprop(s: Any, owner: int, net: Network, acts: Sequence[np.ndarray], G: Any) -> Any:
    """Shares of every dW_l of ``net`` (flattened, joined in layer order) from shares of
    ``G`` = dL/du on the rows of ``acts`` (the owner's activations, shared by the owner)."""
    from veil.mpc import concatenate

    grads = []
    delta = G * s.share(1.0 - acts[-1] ** 2, owner)
    for layer in reversed(range(len(net.weights))):
        grads.append((s.share(_augment(acts[layer]).T, owner) @ delta).reshape(-1))
        if layer:
            back = delta @ s.share(net.weights[layer][:-1].T, owner)
            delta = back * s.share(1.0 - acts[layer] ** 2, owner)
    return concatenate(grads[::-1])


def _phi_jacobian(source: SSFTLSource, acts: Sequence[np.ndarray]) -> np.ndarray:
    """``J[p, j] = dPhi_j / dW_p`` over A's flattened weights (A's own, in the clear)."""
    y, dim = source._y, source.dim
    columns = []
    for j in range(dim):
        G = np.zeros((y.size, dim))
        G[:, j] = y / y.size
        columns.append(np.concatenate([g.ravel() for g in source.net.backward(acts, G)]))
    return np.stack(columns, axis=1)


def _unflatten(flat: np.ndarray, net: Network) -> list[np.ndarray]:
    out, at = [], 0
    for W in net.weights:
        out.append(flat[at:at + W.size].reshape(W.shape))
        at += W.size
    return out


def _check_pair(source: Any, target: Any, frac_bits: int) -> None:
    if not isinstance(source, SSFTLSource) or not isinstance(target, SSFTLTarget):
        raise ConfigError(f"source and target must be an SSFTLSource and an SSFTLTarget; got "
                          f"{type(source).__name__} and {type(target).__name__}")
    if source.overlap.size != target.overlap.size:
        raise DataError(f"the overlaps have {source.overlap.size} and {target.overlap.size} "
                        "rows; align them first")
    if source.dim != target.dim or source.gamma != target.gamma:
        raise ConfigError(f"the parties disagree on the joint loss: dim {source.dim} / "
                          f"{target.dim}, gamma {source.gamma} / {target.gamma}")
    limit = 2.0 ** (INPUT_BITS - frac_bits)
    for party in (source, target):
        worst = float(np.max(np.abs(party._X)))
        if worst >= limit:
            raise DataError(f"X of {party.name!r} holds a value of magnitude {worst:.6g}; "
                            f"with frac_bits={frac_bits} shares hold |x| < {limit:g} "
                            "(standardize the features)")


def train_ss_ftl(source: SSFTLSource, target: SSFTLTarget, iterations: int, *,
                 batch_size: int = 500, correlation: str = "dealer", frac_bits: int = 16,
                 paillier_bits: int = 2048, insecure_ok: bool = False, rng: Any = None,
                 session_rng: Any = None) -> FTLStats:
    """Train both networks for ``iterations`` steps (module docstring) on batches of the
    overlap drawn with ``rng`` (simulation). ``correlation``: where Beaver triples come
    from, ``"dealer"`` or ``"paillier"`` (``paillier_bits``; under 2048 bits only with
    ``insecure_ok``); ``frac_bits``: the fixed point of the shares; ``session_rng``: the
    shares' and dealer's randomness (None: the CSPRNG; a seed only in tests). Every input
    is checked before the session starts. Returns seconds and bytes per iteration (each
    party's sent bytes; ``dealer``: what the dealer sent)."""
    iterations = check_int(iterations, "iterations", low=1)
    batch_size = check_int(batch_size, "batch_size", low=1)
    correlation = check_choice(correlation, "correlation", CORRELATIONS)
    frac_bits = check_int(frac_bits, "frac_bits", low=8, high=24)
    _check_pair(source, target, frac_bits)
    rng = check_rng(rng)
    stats = FTLStats()
    y, gamma = source._y, source.gamma
    try:
        with _session(correlation, frac_bits, paillier_bits, insecure_ok, session_rng) as s:
            for _ in range(iterations):
                batch = rng.permutation(source.overlap.size)[:batch_size]
                ra, rb = source.overlap[batch], target.overlap[batch]
                with s.measure() as m:
                    actsA = source.net.forward(source._X)
                    actsB = target.net.forward(target._X[rb])
                    uA, uB = actsA[-1], actsB[-1]
                    phi = (y[:, None] * uA).mean(axis=0)
                    a = s.share(-0.5 * y[ra, None] * phi - 2 * gamma * uA[ra], 0)
                    M, Phi = s.share(np.outer(phi, phi) / 4, 0), s.share(phi, 0)
                    half_y, uA_s = s.share(-0.5 * y[ra], 0), s.share(uA[ra], 0)
                    uB_s, K = s.share(uB, 1), s.share(uB.T @ uB / 4, 1)
                    G_B = a + uB_s @ M + uB_s * (2 * gamma)
                    g_phi = half_y @ uB_s + K @ Phi
                    G_A = (uA_s - uB_s) * (2 * gamma)
                    grad_b = _backprop(s, 1, target.net, actsB, G_B)
                    J = s.share(_phi_jacobian(source, actsA), 0)
                    grad_a = _backprop(s, 0, source.net, [h[ra] for h in actsA], G_A) + \
                        J @ g_phi
                    flat_a, flat_b = grad_a.reveal(to=0), grad_b.reveal(to=1)
                    size = batch.size
                    source.net.step(_unflatten(flat_a / size, source.net),
                                    source.learning_rate, source.lam)
                    target.net.step(_unflatten(flat_b / size, target.net),
                                    target.learning_rate, target.lam)
                cost = m.cost
                stats.seconds.append(cost.seconds)
                stats.bytes.append({"source": cost.sent[0], "target": cost.sent[1],
                                    "dealer": sum(cost.dealer)})
    except ProtocolError as exc:
        raise _named(exc) from None
    log.info("secure FTL (secret sharing, %s triples): %d iterations, %.3f s each (median)",
             correlation, iterations, float(np.median(stats.seconds)))
    return stats


def predict_ss_ftl(source: SSFTLSource, target: SSFTLTarget, X: Any, *,
                   correlation: str = "dealer", frac_bits: int = 16, paillier_bits: int = 2048,
                   insecure_ok: bool = False, session_rng: Any = None) -> np.ndarray:
    """B's scores ``phi_j = Phi . u_B,j`` for its rows ``X`` (the sign is the predicted
    label), computed on shares and revealed to B only."""
    correlation = check_choice(correlation, "correlation", CORRELATIONS)
    frac_bits = check_int(frac_bits, "frac_bits", low=8, high=24)
    _check_pair(source, target, frac_bits)
    u = target.represent(X)
    try:
        with _session(correlation, frac_bits, paillier_bits, insecure_ok, session_rng) as s:
            return (s.share(u, 1) @ s.share(source.phi(), 0)).reveal(to=1)
    except ProtocolError as exc:
        raise _named(exc) from None
