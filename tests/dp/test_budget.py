"""Budget allocation: fixed, adaptive and hierarchical splits, checked against a Ledger."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest

from veil.dp import Ledger
from veil.dp.accounting import epsilon_for, make_accountant, subsampled_gaussian_event
from veil.dp.budget import (
    BudgetAwareAllocation,
    FixedAllocation,
    ScheduledAllocation,
    hierarchical,
    noise_decay,
)
from veil.errors import BudgetExceededError, ConfigError


@pytest.mark.parametrize("accountant", ["pld", "rdp", "basic", "advanced"])
def test_fixed_shares_fill_the_budget_exactly(accountant):
    alloc = FixedAllocation(1.0, 0.0, rounds=7)
    ledger = Ledger(1.0, 0.0, accountant=accountant)
    for eps_s, delta_s in alloc:
        assert delta_s == 0.0
        ledger.charge(dpa.LaplaceDpEvent(1.0 / eps_s))  # a pure eps_s release per round
    assert math.fsum(e for e, _ in alloc) == pytest.approx(1.0)
    assert ledger.spent()[0] <= 1.0 + 1e-12
    with pytest.raises(BudgetExceededError):
        ledger.charge(dpa.LaplaceDpEvent(1e3))  # nothing is left for an eighth round


def test_gaussian_rounds_with_fixed_delta_shares_fit_a_tight_ledger():
    rounds, eps, delta = 5, 2.0, 1e-5
    ledger = Ledger(eps, delta)   # the default filter: the shares add up to the budget
    tight = Ledger(eps, delta, accountant="pld-nonadaptive")
    for eps_s, delta_s in FixedAllocation(eps, delta, rounds):
        sigma = dpa.get_sigma_gaussian(eps_s, delta_s) * (1 + 1e-9)
        for book in (ledger, tight):
            book.charge(dpa.GaussianDpEvent(sigma), delta=delta_s)
    assert ledger.spent()[0] == pytest.approx(eps, rel=1e-6)
    # PLD of the fixed sequence is tighter (valid only for shares fixed in advance)
    assert tight.spent()[0] < eps


def test_scheduled_shares_grow_geometrically_and_sum_to_the_budget():
    alloc = ScheduledAllocation(3.0, 1e-5, rounds=10, growth=1.2)
    shares = list(alloc)
    assert math.fsum(e for e, _ in shares) == pytest.approx(3.0)
    assert math.fsum(d for _, d in shares) == pytest.approx(1e-5)
    for s in range(10):
        assert shares[s][0] / shares[0][0] == pytest.approx(1.2 ** s)
    custom = ScheduledAllocation(1.0, 0.0, rounds=3, weights=[1, 1, 2])
    assert [e for e, _ in custom] == pytest.approx([0.25, 0.25, 0.5])
    with pytest.raises(ConfigError, match="weights"):
        ScheduledAllocation(1.0, 0.0, rounds=3, weights=[1, 2])
    with pytest.raises(ConfigError, match="weights\\[1\\]"):
        ScheduledAllocation(1.0, 0.0, rounds=2, weights=[1, -1])


def test_budget_aware_hands_unspent_budget_to_later_steps():
    ledger = Ledger(1.0)
    alloc = BudgetAwareAllocation(ledger, rounds=4)
    first, _ = alloc.share(0)
    assert first == pytest.approx(0.25)
    ledger.charge(dpa.LaplaceDpEvent(1.0 / first))
    # step 1 is skipped (e.g. no client answered): step 2 gets half of what is left
    assert alloc.share(2)[0] == pytest.approx(0.375)
    ledger.charge(dpa.LaplaceDpEvent(1.0 / alloc.share(2)[0]))
    last, _ = alloc.share(3)
    ledger.charge(dpa.LaplaceDpEvent(1.0 / last))
    assert ledger.spent()[0] == pytest.approx(1.0) and ledger.spent()[0] <= 1.0 + 1e-12
    with pytest.raises(ConfigError, match="step"):
        alloc.share(4)


@pytest.mark.parametrize("schedule, decay", [("exponential", 0.95), ("time", 0.1)])
def test_noise_decay_meets_the_budget_and_decays(schedule, decay):
    eps, delta, rounds, q = 2.0, 1e-5, 10, 0.1
    orders = list(range(2, 65))  # integer orders: a fast, valid RDP grid
    sigmas = noise_decay(eps, delta, rounds, decay=decay, schedule=schedule, sample_rate=q,
                         accountant="rdp", orders=orders)
    assert all(a > b for a, b in zip(sigmas, sigmas[1:]))
    expected_last = (sigmas[0] * decay ** (rounds - 1) if schedule == "exponential"
                     else sigmas[0] / (1 + decay * (rounds - 1)))
    assert sigmas[-1] == pytest.approx(expected_last)

    def spent(scale):
        acc = make_accountant("rdp", orders=orders)
        for s in sigmas:
            acc.compose(subsampled_gaussian_event(s * scale, q))
        return acc.get_epsilon(delta)

    assert spent(1.0) <= eps < spent(1 / 1.002)  # verified, and minimal to 0.1%
    # a coarser grid of orders certifies a larger epsilon: the schedule fits a default ledger
    ledger = Ledger(eps, delta, accountant="rdp")   # a schedule fixed in advance: one plan
    ledger.plan([subsampled_gaussian_event(s, q) for s in sigmas])
    # decay=1 is a constant schedule: the calibrate_noise value, to 0.1%
    flat = noise_decay(eps, delta, rounds, decay=1.0, sample_rate=q, accountant="rdp",
                       orders=orders)
    assert epsilon_for(flat[0], delta, q, rounds, accountant="rdp", orders=orders) <= eps


def test_hierarchical_levels_share_the_parent_budget():
    root = Ledger(1.0, 1e-5)
    levels = hierarchical(root, {"public": 0.2, "sensitive": 0.8})
    assert levels["public"].epsilon == pytest.approx(0.2)
    assert levels["sensitive"].delta == pytest.approx(8e-6)
    for _ in range(2):
        levels["public"].charge(dpa.LaplaceDpEvent(10.0))
    with pytest.raises(BudgetExceededError, match="public"):
        levels["public"].charge(dpa.LaplaceDpEvent(10.0))
    for _ in range(8):
        levels["sensitive"].charge(dpa.LaplaceDpEvent(10.0))
    with pytest.raises(BudgetExceededError):
        levels["sensitive"].charge(dpa.LaplaceDpEvent(100.0))
    assert root.spent()[0] <= 1.0 + 1e-12


@pytest.mark.parametrize("levels, match", [
    ({"a": 0.7, "b": 0.4}, "sum to"), ({}, "levels"), ({"a": 0.0}, "levels"),
    ({"a/b": 0.5}, "name"),
])
def test_hierarchical_bad_levels(levels, match):
    with pytest.raises(ConfigError, match=match):
        hierarchical(Ledger(1.0), levels)


def test_allocation_bad_input():
    with pytest.raises(ConfigError, match="rounds"):
        FixedAllocation(1.0, 0.0, rounds=0)
    with pytest.raises(ConfigError, match="delta"):
        FixedAllocation(1.0, 1.0, rounds=3)
    with pytest.raises(ConfigError, match="ledger"):
        BudgetAwareAllocation("ledger.db", rounds=3)
    with pytest.raises(ConfigError, match="decay"):
        noise_decay(1.0, 1e-5, 10, decay=1.5)
    with pytest.raises(ConfigError, match="delta=0"):
        noise_decay(1.0, 0.0, 10)
