"""Regression tests for issue #28 items 6 and 7 (the other items are fixed on their branches).

6. ``make_private(rng=<int>)`` drew the DP-SGD noise from the seed and still returned a plain
   certificate.
7. The ``"rdp"`` ledger policy converted the composed RDP curve at the best order of the
   grid *after* each charge: not a privacy filter.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from dp_accounting import dp_event as de
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

from veil.dp import Ledger
from veil.dp.accounting import RDPAccountant
from veil.dp.accounting.rdp import DEFAULT_ORDERS
from veil.errors import BudgetExceededError

DELTA = 1e-5


def _curve(event):
    acc = rdp_lib.RdpAccountant(list(DEFAULT_ORDERS))
    acc.compose(event)
    return np.asarray(acc._rdp)


def _at(order_index, curve, delta=DELTA):
    """epsilon of an RDP curve converted at one order only."""
    return rdp_lib.compute_epsilon([DEFAULT_ORDERS[order_index]], [curve[order_index]],
                                   delta)[0]


def test_rdp_ledger_is_a_filter_at_the_order_its_first_charge_fixes():
    """Attack (#28 item 7): Feldman & Zrnic's Renyi filter holds for one order fixed in
    advance. A ledger that converts at the best order of the grid after each charge lets
    the order that admits the next charge depend on earlier outputs: an analyst spends on
    one kind of release (whose best order is large: one weak Gaussian), looks at the
    outputs, then switches to releases whose best order is small (many sharp ones), and
    the old ledger re-prices the whole history at the new order. A valid filter prices
    everything at the order the first charge fixed, so it certifies more (and admits less).
    """
    weak, sharp = de.GaussianDpEvent(20.0), de.GaussianDpEvent(2.0)
    first = _curve(weak)
    alpha = int(np.argmin([_at(i, first) for i in range(len(DEFAULT_ORDERS))]))
    total = first + 6 * _curve(sharp)
    at_alpha = _at(alpha, total)
    best = rdp_lib.compute_epsilon(list(DEFAULT_ORDERS), list(total), DELTA)[0]
    assert at_alpha > 1.5 * best   # the sequence is chosen so that the two disagree

    ledger = Ledger(100.0, DELTA, accountant="rdp")
    ledger.charge(weak)
    for _ in range(6):
        ledger.charge(sharp)
    assert ledger.spent()[0] == pytest.approx(at_alpha, rel=1e-9)
    # a budget the grid-best conversion (a non-adaptive accountant) would call enough
    loose = RDPAccountant()
    loose.compose(weak)
    loose.compose(sharp, count=6)
    assert loose.get_epsilon(DELTA) == pytest.approx(best, rel=1e-9)
    tight = Ledger(best * 1.01, DELTA, accountant="rdp")
    tight.charge(weak)
    with pytest.raises(BudgetExceededError):
        for _ in range(6):
            tight.charge(sharp)


def test_rdp_ledger_prices_a_planned_first_block_exactly():
    """The order is the best one for the first charge: a planned schedule charged first
    (a DP-SGD run, a federation's rounds) costs what non-adaptive RDP says for it."""
    plan = de.SelfComposedDpEvent(de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.1)),
                                  500)
    acc = RDPAccountant()
    acc.compose(plan)
    ledger = Ledger(acc.get_epsilon(DELTA) * (1 + 1e-9), DELTA, accountant="rdp")
    ledger.charge(plan)
    assert ledger.spent()[0] == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


def test_rdp_ledger_keeps_pure_budgets_exact():
    """While every charge is pure DP, basic composition admits at no delta (the pure route
    of RDPFilter): ten Laplace releases of epsilon 0.1 fill a (1, 0) ledger exactly."""
    ledger = Ledger(1.0, 0.0, accountant="rdp")
    for _ in range(10):
        ledger.charge(de.LaplaceDpEvent(10.0))
    assert ledger.spent()[0] == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):
        ledger.charge(de.LaplaceDpEvent(1e3))


def test_seeded_dpsgd_is_labelled_a_simulation(caplog):
    """Attack (#28 item 6): ``make_private(rng=7)`` drew the DP-SGD noise from the seed, so
    anyone who knows the seed can subtract the noise, yet the plan was a plain certificate.
    Now the plan, the ledger's charge, the optimizer and the log all say "simulation:
    seeded noise, epsilon not certified"; without a seed the plan stays certified."""
    torch = pytest.importorskip("torch")
    from veil.learn.dpsgd import make_private

    def run(rng):
        model = torch.nn.Linear(3, 2)
        ledger = Ledger(1.0, DELTA)
        x = torch.randn(40, 3)
        y = torch.randint(0, 2, (40,))
        _, opt, _ = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                 (x, y), budget=ledger.budget, max_grad_norm=1.0,
                                 epochs=1, batch_size=10, rng=rng, dataset_size="public",
                                 ledger=ledger)
        return opt, ledger

    with caplog.at_level(logging.WARNING, logger="veil.learn.dpsgd.privacy"):
        opt, ledger = run(7)
    plan = opt.plan
    assert plan.simulated and not plan.certified
    assert "not certified" in str(plan) and "not certified" in repr(opt)
    assert "not certified" in ledger.history()[-1].label
    assert any("not certified" in r.getMessage() for r in caplog.records)

    opt, ledger = run(None)
    assert opt.plan.certified and not opt.plan.simulated
    assert "not certified" not in ledger.history()[-1].label + str(opt.plan)
