"""The graphical model: junction trees, exact inference, estimation and sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from veil.random import default_rng
from veil.synth.model import JunctionTree, Measurement, _Plan, estimate, marginal_counts

SIZES = (3, 4, 2, 3)


def _codes(n: int = 4000) -> np.ndarray:
    """Four dependent columns: a cycle a-b-c-d-a of associations."""
    g = np.random.default_rng(0)
    a = g.integers(0, 3, n)
    b = (a + g.integers(0, 2, n)) % 4
    c = (b % 2) ^ (g.random(n) < 0.2)
    d = (a + c + g.integers(0, 2, n)) % 3
    return np.stack([a, b, c.astype(int), d], 1)


def _joint(model) -> np.ndarray:
    """The model's full joint table: product of clique marginals over separator marginals."""
    tree = model.tree
    joint = np.ones(SIZES)
    for i, clique in enumerate(tree.cliques):
        p = model.probs[i]
        if tree.parent[i] >= 0:
            axes = tuple(k for k, a in enumerate(clique) if a not in tree.separator[i])
            sep = p.sum(axis=axes, keepdims=True)
            p = np.where(sep > 0, p / np.where(sep > 0, sep, 1), 0)
        joint = joint * p.reshape([SIZES[a] if a in clique else 1 for a in range(len(SIZES))])
    return joint


def test_the_tree_covers_every_set_and_has_the_running_intersection_property():
    tree = JunctionTree(SIZES, [(0, 1), (1, 2), (2, 3), (0, 3)])
    assert all(any(set(s) <= set(c) for c in tree.cliques) for s in [(0, 1), (1, 2), (2, 3)])
    for a in range(len(SIZES)):  # the cliques holding a attribute form a connected subtree
        holding = {i for i, c in enumerate(tree.cliques) if a in c}
        roots = [i for i in holding if tree.parent[i] not in holding]
        assert len(roots) == 1
    assert tree.cells() == sum(np.prod([SIZES[a] for a in c]) for c in tree.cliques)


def test_exact_marginals_are_recovered_from_noiseless_measurements():
    codes = _codes()
    sets = [(0, 1), (1, 2), (2, 3), (0, 3)]
    ms = [Measurement(s, marginal_counts(codes, SIZES, s), 1.0) for s in sets]
    model, _ = estimate(SIZES, ms, iters=2000)
    assert model.total == pytest.approx(len(codes))
    for s in sets:
        truth = marginal_counts(codes, SIZES, s) / len(codes)
        assert np.abs(model.marginal(s) - truth).sum() < 2e-3


def test_marginals_across_cliques_match_the_joint_and_samples_match_the_model():
    codes = _codes()
    ms = [Measurement(s, marginal_counts(codes, SIZES, s), 5.0)
          for s in [(0, 1), (1, 2), (2, 3)]]
    model, _ = estimate(SIZES, ms, iters=300)
    joint = _joint(model)
    assert joint.sum() == pytest.approx(1.0)
    for r in itertools.combinations(range(4), 2):
        other = tuple(a for a in range(4) if a not in r)
        np.testing.assert_allclose(model.marginal(r), joint.sum(axis=other), atol=1e-12)
    n = 2000
    sample = model.sample(n, default_rng(3))
    for i, clique in enumerate(model.tree.cliques):  # controlled rounding: within 1 row a cell
        if model.tree.parent[i] < 0:
            diff = marginal_counts(sample, SIZES, clique) - n * model.probs[i]
            assert np.abs(diff).max() < 1.0 + 1e-9
    for r in itertools.combinations(range(4), 2):  # and close everywhere else
        assert np.abs(marginal_counts(sample, SIZES, r) / n - model.marginal(r)).sum() < 0.08


def test_a_warm_start_reproduces_the_previous_fit():
    codes = _codes()
    ms = [Measurement(s, marginal_counts(codes, SIZES, s), 3.0) for s in [(0, 1), (1, 2)]]
    model, theta = estimate(SIZES, ms, iters=400)
    again, _ = estimate(SIZES, ms, iters=1, warm=theta)
    np.testing.assert_allclose(again.marginal((0, 1, 2)), model.marginal((0, 1, 2)), atol=1e-3)


def test_a_plan_reaches_every_set_as_direct_sums_do():
    """The shared marginalisation (and its adjoint, the gathering of potentials) gives each
    set's marginal, and the clique's potential, exactly as one sum (one broadcast) per set."""
    g = np.random.default_rng(1)
    clique = (0, 1, 2, 3)
    sets = [(0,), (3,), (1, 3), (0, 1, 2), (0, 2), (2, 3), clique]
    plan = _Plan.of(clique, sets)
    table = g.random(SIZES)
    found: dict = {}
    plan.project(table, found)
    for s in sets:
        axes = tuple(i for i, a in enumerate(clique) if a not in s)
        assert np.allclose(found[s], table.sum(axis=axes))
    theta = {s: g.normal(size=[SIZES[a] for a in s]) for s in sets}
    direct = sum(t.reshape([SIZES[a] if a in s else 1 for a in clique])
                 for s, t in theta.items())
    assert np.allclose(plan.gather(theta, SIZES), direct)
    assert np.allclose(_Plan.of(clique, []).gather({}, SIZES), 0.0)
