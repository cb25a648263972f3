"""The default Ledger is a valid privacy filter; planned schedules stay PLD-tight."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import integrate, special, stats

from veil.dp import Gaussian, Ledger
from veil.dp.accounting import PLDAccountant, calibrate_noise, epsilon_for
from veil.errors import BudgetExceededError, ConfigError


def _gaussian_profile(mu: float, e: float) -> float:
    """delta(e) of the Gaussian mechanism with mu = sensitivity / sigma, any real e
    (Balle & Wang 2018): Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu)."""
    return float(special.ndtr(mu / 2 - e / mu) - math.exp(e) * special.ndtr(-mu / 2 - e / mu))


def _laplace_profile(b: float, e: float) -> float:
    """delta(e) = E_p[(1 - e^(e - L))_+] for p = Lap(0, b), q = Lap(1, b), any real e: the
    loss L is 1/b for y <= 0, -1/b for y >= 1 and (1 - 2y)/b between."""
    y = min(1.0, max(0.0, (1.0 - e * b) / 2))  # the middle part counts for y < y*
    middle = 0.5 * (-math.expm1(-y / b)) - 0.5 * math.exp(e - 1 / b) * math.expm1(y / b)
    return (0.5 * max(0.0, -math.expm1(e - 1 / b)) + middle
            + 0.5 * math.exp(-1 / b) * max(0.0, -math.expm1(e + 1 / b)))


def _least_noise(ledger: Ledger, event_for, delta: float) -> float:
    """The smallest noise parameter whose event the ledger admits now (bisection)."""
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ledger.fits(event_for(mid), delta=delta) else (mid, hi)
    return hi


def _adaptive_delta(ledger: Ledger, epsilon: float) -> float:
    """Realised delta at ``epsilon`` of two releases on Ledger(1, 1e-3), the second chosen
    from the first's output: a Gaussian first release (epsilon 0.5, delta 5e-4); then, of
    the two second releases the ledger admits (the least-noise Gaussian and the
    least-noise Laplace), whichever leaks more given the first output."""
    first = Gaussian(epsilon=0.5, delta=5e-4, sensitivity=1.0)
    ledger.release(first, 0.0, rng=0)
    left = 1e-3 - 5e-4
    sigma = _least_noise(ledger, dpa.GaussianDpEvent, left)
    b = _least_noise(ledger, dpa.LaplaceDpEvent, left)
    mu1 = 1.0 / first.event.noise_multiplier
    # the first release's privacy loss is N(mu1^2/2, mu1^2) under the first dataset;
    # the adaptive analyst picks the second release with the larger profile at eps - L1
    grid = np.linspace(mu1 * mu1 / 2 - 9 * mu1, mu1 * mu1 / 2 + 9 * mu1, 401)
    worst = [max(_gaussian_profile(1.0 / sigma, epsilon - loss),
                 _laplace_profile(b, epsilon - loss)) for loss in grid]
    density = stats.norm(mu1 * mu1 / 2, mu1).pdf(grid)
    return float(integrate.trapezoid(density * np.array(worst), grid))


def test_the_adaptive_two_step_example_stays_within_the_budget():
    # plain PLD composition (not a filter) admits second releases that the adaptive
    # analyst combines into a realised delta above the budget
    assert _adaptive_delta(Ledger(1.0, 1e-3, accountant="pld-nonadaptive"), 1.0) > 1.2e-3
    # the default ledger is a filter: the budget holds whatever the analyst chooses
    assert _adaptive_delta(Ledger(1.0, 1e-3), 1.0) <= 1e-3 * (1 + 1e-3)


def test_a_planned_dpsgd_run_is_charged_what_pld_says_and_fills_the_budget():
    # the README's example: sigma calibrated with the defaults fills the default ledger
    q, steps, delta = 256 / 60000, 14062, 1e-5
    sigma = calibrate_noise(3.0, delta, sample_rate=q, steps=steps)
    ledger = Ledger(3.0, delta)
    step = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma))
    plan = ledger.plan(step, steps=steps, delta=delta, label="dp-sgd")
    pld = epsilon_for(sigma, delta, q, steps, accountant="pld")
    spent = ledger.spent()[0]
    assert spent <= 3.0 and spent == pytest.approx(pld, rel=1e-2)
    assert spent >= 3.0 * (1 - 2e-3)  # calibrate_noise's rtol, not 5-7% under
    # the steps are charged to the plan: the spend does not move
    for _ in range(3):
        plan.charge(step, label="step")
    assert ledger.spent()[0] == spent and plan.used == 3


def test_a_plan_takes_exactly_its_steps(tmp_path):
    step = dpa.GaussianDpEvent(5.0)
    ledger = Ledger(2.0, 1e-5, path=tmp_path / "l.sqlite")
    plan = ledger.plan(step, steps=2, delta=1e-6, label="two rounds")
    with pytest.raises(ConfigError, match="step 0 of plan"):
        plan.charge(dpa.GaussianDpEvent(4.0))  # not the planned noise
    plan.charge(step)
    ledger.close()
    # another process goes on with the same plan, and cannot go past it
    again = Ledger.open(tmp_path / "l.sqlite")
    resumed = again.block(plan.index)
    assert resumed.used == 1 and resumed.fits(step)
    resumed.charge(step)
    with pytest.raises(BudgetExceededError, match="all its 2 steps"):
        resumed.charge(step)
    assert [c.kind for c in again.history()] == ["plan", "step", "step"]
    with pytest.raises(ConfigError, match="no plan #7"):
        again.block(7)
    # the longest plan that fits, when the whole schedule does not
    short = Ledger(1.0, 1e-5).longest_plan(dpa.GaussianDpEvent(20.0), steps=100, delta=1e-5)
    exact = PLDAccountant()
    exact.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(20.0), len(short.steps) + 1))
    assert 1 <= len(short.steps) < 100 and exact.get_epsilon(1e-5) > 1.0


def test_block_deltas_follow_one_convention():
    ledger = Ledger(10.0, 1e-5)
    ledger.charge(dpa.LaplaceDpEvent(1.0))                      # pure: delta_b = 0
    ledger.charge(dpa.GaussianDpEvent(2.0), delta=4e-6)          # as calibrated
    ledger.charge(dpa.GaussianDpEvent(2.0))                      # all that is left: 6e-6
    assert [c.delta for c in ledger.history()] == [None, 4e-6, pytest.approx(6e-6)]
    # no delta left: a non-pure release cannot fit, a pure one still does
    assert not ledger.fits(dpa.GaussianDpEvent(100.0))
    assert ledger.fits(dpa.LaplaceDpEvent(10.0))


def test_a_format_1_ledger_is_migrated_and_repriced_by_the_filter(tmp_path):
    import sqlite3
    import time

    from veil.dp.accounting import event_to_json

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE budgets (scope TEXT PRIMARY KEY, epsilon REAL NOT NULL,
                              delta REAL NOT NULL);
        CREATE TABLE charges (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL,
            scope TEXT NOT NULL, kind TEXT NOT NULL, label TEXT, event TEXT NOT NULL,
            event_delta REAL, epsilon REAL NOT NULL);
        INSERT INTO meta VALUES ('format_version', '1'), ('accountant', 'pld'),
                                ('created', '0.0');
        INSERT INTO budgets VALUES ('', 3.0, 1e-5);
    """)
    for _ in range(2):
        conn.execute("INSERT INTO charges (time, scope, kind, label, event, event_delta, "
                     "epsilon) VALUES (?, '', 'charge', 'old', ?, 1e-6, 0.5)",
                     (time.time(), event_to_json(dpa.GaussianDpEvent(10.0))))
    conn.commit()
    conn.close()
    read = Ledger.open(path, read_only=True)  # read as is, not written
    assert len(read.history()) == 2
    read.close()
    ledger = Ledger.open(path)
    assert [c.block for c in ledger.history()] == [None, None]
    # re-priced by today's filter: two blocks at their recorded delta, summed
    one = Ledger(3.0, 1e-5)
    one.charge(dpa.GaussianDpEvent(10.0), delta=1e-6)
    assert ledger.spent()[0] == pytest.approx(2 * one.spent()[0])
    ledger.plan(dpa.GaussianDpEvent(10.0), steps=2, delta=1e-6).charge(dpa.GaussianDpEvent(10.0))
    ledger.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone() \
            == ("2",)


def test_every_entry_point_defaults_to_the_one_policy():
    import inspect

    from veil.cli import budget as cli_budget
    from veil.dp import PrivacyBudget
    from veil.dp.accounting import DEFAULT_ACCOUNTANT
    from veil.dp.budget import noise_decay

    for entry in (Ledger.__init__, calibrate_noise, epsilon_for, noise_decay, PrivacyBudget):
        assert inspect.signature(entry).parameters["accountant"].default == DEFAULT_ACCOUNTANT
    option = inspect.signature(cli_budget.calibrate).parameters["accountant"].default
    assert option.default == DEFAULT_ACCOUNTANT
