"""PrivacyBudget: one (epsilon, delta, accountant), validated once, shared by what
calibrates and what charges."""

from __future__ import annotations

import dataclasses

import pytest

from veil.dp import Ledger, PrivacyBudget
from veil.errors import ConfigError


def test_a_budget_is_validated_once_and_frozen():
    budget = PrivacyBudget(2.0, 1e-5, "rdp")
    assert (budget.epsilon, budget.delta, budget.accountant) == (2.0, 1e-5, "rdp")
    assert PrivacyBudget(1).accountant == "pld" and PrivacyBudget(1).delta == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.epsilon = 3.0
    for bad, name in (((0.0,), "epsilon=0"), ((1.0, 1.5), "delta=1.5"),
                      ((1.0, 1e-5, "rdpp"), "accountant='rdpp'")):
        with pytest.raises(ConfigError, match=name):
            PrivacyBudget(*bad)


def test_a_ledger_for_a_budget_holds_it_and_keeps_it_on_disk(tmp_path):
    budget = PrivacyBudget(3.0, 1e-6, "rdp")
    ledger = Ledger.for_budget(budget, path=tmp_path / "l.sqlite")
    assert ledger.budget == budget
    ledger.close()
    assert Ledger.open(tmp_path / "l.sqlite").budget == budget
    with pytest.raises(ConfigError, match="budget=3.0 is not allowed"):
        Ledger.for_budget(3.0)
