"""The Ledger: charge before release, budgets, persistence, crashes, threads, hierarchy."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import dp_accounting as dpa
import pytest

from veil.dp import Gaussian, Ledger
from veil.dp.accounting import make_accountant, make_policy
from veil.dp.ledger import FORMAT_VERSION
from veil.dp.mechanism import Mechanism
from veil.errors import BudgetExceededError, ConfigError, DataError


class Noisy(Mechanism):
    """A test mechanism: Laplace (pure) or Gaussian noise; counts its noise draws and can
    look at the ledger while it draws."""

    def __init__(self, scale: float, kind: str = "laplace", delta: float = 0.0,
                 ledger: Ledger | None = None) -> None:
        self.scale, self.kind, self.delta = scale, kind, delta
        self.epsilon = 1.0 / scale if kind == "laplace" else float("nan")
        self.draws = 0
        self.charges_seen: list[int] = []
        self._ledger = ledger

    @property
    def event(self):
        return (dpa.LaplaceDpEvent(self.scale) if self.kind == "laplace"
                else dpa.GaussianDpEvent(self.scale))

    def _randomize(self, value, rng):
        self.draws += 1
        if self._ledger is not None:
            self.charges_seen.append(len(self._ledger.history()))
        noise = rng.laplace(0.0, self.scale) if self.kind == "laplace" else rng.normal(
            0.0, self.scale)
        return value + noise


# -- charge, then release ----------------------------------------------------------------

def test_release_charges_before_drawing_noise():
    ledger = Ledger(1.0)
    mech = Noisy(10.0, ledger=ledger)
    out = ledger.release(mech, 5.0, label="q1", rng=1)
    assert mech.charges_seen == [1]  # the charge was recorded when the noise was drawn
    assert out != 5.0
    (charge,) = ledger.history()
    assert (charge.kind, charge.label, charge.event) == ("release", "q1", mech.event)
    assert ledger.spent() == (pytest.approx(0.1), 0.0)


def test_exceeding_the_budget_draws_no_noise_and_records_nothing():
    ledger = Ledger(0.25)
    mech = Noisy(10.0)
    ledger.release(mech, 0.0, rng=1)
    ledger.release(mech, 0.0, rng=1)
    with pytest.raises(BudgetExceededError, match="no noise was drawn"):
        ledger.release(mech, 0.0, rng=1)
    assert mech.draws == 2
    assert len(ledger.history()) == 2
    assert ledger.spent()[0] == pytest.approx(0.2)
    assert ledger.remaining() == (pytest.approx(0.05), 0.0)


# not "rdp": a Renyi filter prices the Gaussian by its RDP curve (1.1 here); taking the
# minimum with the exact (epsilon, delta) of the release would not be a filter (RDPFilter)
@pytest.mark.parametrize("accountant", ["pld", "basic"])
def test_a_one_off_ledger_holds_exactly_one_calibrated_release(accountant):
    eps, delta = 1.0, 1e-5
    sigma = dpa.get_sigma_gaussian(eps, delta)  # analytic Gaussian, to the solver's tolerance
    ledger = Ledger(eps, delta, accountant=accountant)
    ledger.release(Noisy(sigma, "gaussian", delta=delta), 0.0, rng=1)
    assert ledger.spent()[0] <= eps * (1 + 1e-9)
    with pytest.raises(BudgetExceededError):
        ledger.release(Noisy(100 * sigma, "gaussian", delta=delta), 0.0, rng=1)


def test_gaussian_cannot_be_released_on_a_pure_budget():
    ledger = Ledger(10.0, delta=0.0)
    with pytest.raises(BudgetExceededError):
        ledger.release(Noisy(1.0, "gaussian", delta=1e-6), 0.0)
    assert ledger.history() == ()


def test_bad_arguments_are_refused_before_anything_is_charged():
    ledger = Ledger(1.0)
    with pytest.raises(ConfigError, match="rng"):
        ledger.release(Noisy(10.0), 0.0, rng="seed")
    with pytest.raises(ConfigError, match="Mechanism"):
        ledger.release(object(), 0.0)
    with pytest.raises(ConfigError, match="label"):
        ledger.charge(dpa.LaplaceDpEvent(10.0), label=3)
    with pytest.raises(ConfigError):
        ledger.charge(dpa.UnsupportedDpEvent())
    assert ledger.history() == ()


def test_bad_data_is_refused_by_the_mechanism_before_the_charge():
    from veil.dp import Laplace
    from veil.errors import DataError

    ledger = Ledger(1.0)
    with pytest.raises(DataError):
        ledger.release(Laplace(epsilon=0.5, sensitivity=1.0), [1.0, float("nan")])
    assert ledger.history() == () and ledger.spent()[0] == 0.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=1.0, delta=1.0), "delta"),
    (dict(epsilon=1.0, delta=-1e-9), "delta"), (dict(epsilon=1.0, accountant="gdp"),
                                                "approximation"),
    (dict(epsilon=1.0, accountant="moments"), "accountant"),
])
def test_bad_budgets(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Ledger(**kwargs)


@pytest.mark.parametrize("accountant", ["pld", "rdp", "basic", "advanced"])
def test_every_accountant_stops_at_the_budget(accountant):
    ledger = Ledger(3.0, 1e-5, accountant=accountant)
    mech = Noisy(5.0, "gaussian", delta=1e-6)
    n = 0
    with pytest.raises(BudgetExceededError):
        while True:
            ledger.release(mech, 0.0, rng=n)
            n += 1
    spent, delta = ledger.spent()
    assert spent <= 3.0 and delta == 1e-5
    # the ledger's figure is the policy's figure for exactly the n admitted events
    acc = make_policy(accountant, 1e-5)
    for _ in range(n):
        acc.compose(mech.event, delta=1e-6)
    assert spent == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    acc.compose(mech.event, delta=1e-6)
    assert acc.get_epsilon(1e-5) > 3.0  # and one more would not have fitted


def test_charge_with_own_noise_and_would_spend():
    ledger = Ledger(2.0, 1e-5)
    step = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)),
                                   100)
    preview = ledger.would_spend(step)
    assert ledger.fits(step) and ledger.spent()[0] == 0.0
    charge = ledger.charge(step, label="epoch 1")
    assert charge.epsilon == pytest.approx(preview) == pytest.approx(ledger.spent()[0])
    # the block was priced at the ledger's delta: a larger delta does not re-price it
    assert ledger.spent(1e-3)[0] == ledger.spent()[0]
    tight = Ledger(2.0, 1e-5, accountant="pld-nonadaptive")
    tight.charge(step)
    assert tight.spent(1e-3)[0] < tight.spent()[0]  # epsilon at a larger delta is smaller


def test_an_equal_split_of_a_pure_budget_always_fits():
    ledger = Ledger(1.0, accountant="pld")
    for _ in range(3):
        ledger.charge(dpa.LaplaceDpEvent(3.0))  # 1/3 + 1/3 + 1/3
    assert ledger.spent()[0] == pytest.approx(1.0)
    assert not ledger.fits(dpa.LaplaceDpEvent(1000.0))


# -- persistence ----------------------------------------------------------------------

def test_reopen_continues_from_the_recorded_spend(tmp_path):
    path = tmp_path / "budget.db"
    events = [dpa.LaplaceDpEvent(10.0), dpa.GaussianDpEvent(4.0),
              dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(2.0)),
                                      10), dpa.RandomizedResponseDpEvent(0.9, 3)]
    with Ledger(3.0, 1e-5, path=path) as ledger:
        for i, e in enumerate(events):
            ledger.charge(e, label=f"c{i}", delta=1e-7)
        before = ledger.spent()
        history = ledger.history()
    reopened = Ledger.open(path)
    assert reopened.spent() == before
    assert reopened.history() == history  # events restored exactly
    reopened.charge(dpa.LaplaceDpEvent(10.0))
    assert reopened.spent()[0] > before[0]
    assert (reopened.epsilon, reopened.delta, reopened.accountant) == (3.0, 1e-5, "pld")


def test_the_stored_budget_wins_and_says_so(tmp_path, caplog):
    path = tmp_path / "budget.db"
    Ledger(1.0, 1e-6, accountant="rdp", path=path).close()
    with caplog.at_level(logging.WARNING, logger="veil.dp.ledger"):
        ledger = Ledger(5.0, 1e-5, path=path)
    assert (ledger.epsilon, ledger.delta, ledger.accountant) == (1.0, 1e-6, "rdp")
    assert "stored budget wins" in caplog.text and "epsilon=5" in caplog.text


def test_two_handles_on_one_file_share_the_budget(tmp_path):
    path = tmp_path / "shared.db"
    a = Ledger(1.0, path=path)
    b = Ledger(1.0, path=path)
    a.charge(dpa.LaplaceDpEvent(2.0))  # 0.5
    b.charge(dpa.LaplaceDpEvent(4.0))  # 0.25: b saw a's charge before admitting
    with pytest.raises(BudgetExceededError):
        a.charge(dpa.LaplaceDpEvent(2.0))
    assert a.spent()[0] == pytest.approx(0.75) == b.spent()[0]


def test_closed_ledger_refuses_charges(tmp_path):
    ledger = Ledger(1.0, path=tmp_path / "c.db")
    ledger.close()
    with pytest.raises(ConfigError, match="closed"):
        ledger.charge(dpa.LaplaceDpEvent(2.0))
    assert ledger.spent() == (0.0, 0.0)


def test_corrupt_file_is_an_error_and_is_left_untouched(tmp_path):
    path = tmp_path / "broken.db"
    payload = b"this is not an SQLite database" * 100
    path.write_bytes(payload)
    for opener in (lambda: Ledger(1.0, path=path), lambda: Ledger.open(path)):
        with pytest.raises(DataError, match="not a usable veil ledger"):
            opener()
    assert path.read_bytes() == payload


def test_truncated_ledger_is_an_error(tmp_path):
    path = tmp_path / "t.db"
    with Ledger(1.0, path=path) as ledger:
        for _ in range(50):
            ledger.charge(dpa.LaplaceDpEvent(100.0), label="x" * 200)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError):
        Ledger.open(path).history()


def test_newer_format_version_is_refused(tmp_path):
    path = tmp_path / "new.db"
    Ledger(1.0, path=path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'",
                     (str(FORMAT_VERSION + 1),))
    with pytest.raises(DataError, match="newer veil"):
        Ledger(1.0, path=path)


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(DataError, match="not a veil ledger"):
        Ledger(1.0, path=path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("people",)]


@pytest.mark.parametrize("column, value", [
    ("event", '{"type": "GaussianDpEvent", "noise_multiplier": -3}'),
    ("event", "{broken"), ("kind", "gift"), ("event_delta", 2.0),
])
def test_tampered_rows_are_data_errors(tmp_path, column, value):
    path = tmp_path / "tampered.db"
    with Ledger(1.0, 1e-5, path=path) as ledger:
        ledger.charge(dpa.LaplaceDpEvent(10.0))
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE charges SET {column} = ?", (value,))
    with pytest.raises(DataError, match="charge #1"):
        Ledger.open(path)


def test_open_needs_an_existing_file(tmp_path):
    with pytest.raises(DataError, match="not an existing ledger file"):
        Ledger.open(tmp_path / "missing.db")


_CHILD = textwrap.dedent("""
    import sys
    import dp_accounting as dpa
    from veil.dp import Ledger
    from veil.dp.mechanism import Mechanism

    class M(Mechanism):
        def __init__(self, kind):
            self.kind, self.epsilon = kind, 0.01
            self.delta = 1e-7 if kind == "gaussian" else 0.0
        @property
        def event(self):
            return (dpa.GaussianDpEvent(50.0) if self.kind == "gaussian"
                    else dpa.LaplaceDpEvent(100.0))
        def _randomize(self, value, rng):
            return value + rng.normal()

    ledger = Ledger(1000.0, 1e-5, path=sys.argv[1])
    i = 0
    while True:
        kind = "gaussian" if i % 2 else "laplace"
        value = ledger.release(M(kind), float(i))
        sys.stdout.write(f"{kind} {value!r}\\n")
        sys.stdout.flush()
        i += 1
""")


def test_a_killed_process_never_loses_a_released_charge(tmp_path):
    path = tmp_path / "crash.db"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    released = []
    try:
        for line in proc.stdout:
            released.append(line.split()[0])
            if len(released) >= 40:
                break
        proc.send_signal(signal.SIGKILL)  # in the middle of its loop
    finally:
        proc.kill()
        proc.wait()
    assert len(released) == 40
    ledger = Ledger.open(path)
    history = ledger.history()
    assert len(history) >= len(released)
    assert [c.event for c in history[:40]] == [
        dpa.GaussianDpEvent(50.0) if k == "gaussian" else dpa.LaplaceDpEvent(100.0)
        for k in released]
    acc = make_accountant("pld")
    for kind in released:
        acc.compose(dpa.GaussianDpEvent(50.0) if kind == "gaussian" else
                    dpa.LaplaceDpEvent(100.0), delta=1e-7 if kind == "gaussian" else None)
    assert ledger.spent()[0] >= acc.get_epsilon(1e-5)


# -- concurrency -------------------------------------------------------------------------

@pytest.mark.parametrize("persisted", [False, True])
def test_eight_threads_never_overspend(tmp_path, persisted):
    ledger = Ledger(1.0, path=tmp_path / "threads.db" if persisted else None)
    admitted = []
    lock = threading.Lock()

    def worker(seed):
        mech = Noisy(20.0)  # epsilon 0.05
        for i in range(10):
            try:
                ledger.release(mech, 0.0, rng=seed * 100 + i)
            except BudgetExceededError:
                return
            with lock:
                admitted.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # exactly 20 releases of 0.05 fit in 1.0, whatever the interleaving
    assert len(admitted) == 20 == len(ledger.history())
    assert ledger.spent()[0] == pytest.approx(1.0) and ledger.spent()[0] <= 1.0 + 1e-12


# -- hierarchy ----------------------------------------------------------------------------

def test_children_never_exceed_the_parent():
    root = Ledger(1.0)
    a, b = root.child("a", 0.6), root.child("b", 0.6)
    for _ in range(6):
        a.charge(dpa.LaplaceDpEvent(10.0))  # a spends 0.6, its whole budget
    with pytest.raises(BudgetExceededError, match="ledger 'a'"):
        a.charge(dpa.LaplaceDpEvent(10.0))
    for _ in range(4):
        b.charge(dpa.LaplaceDpEvent(10.0))  # b can only get the 0.4 the parent has left
    with pytest.raises(BudgetExceededError, match="the ledger"):
        b.charge(dpa.LaplaceDpEvent(10.0))
    assert b.spent()[0] == pytest.approx(0.4) and root.spent()[0] == pytest.approx(1.0)
    assert b.remaining()[0] == pytest.approx(0.0, abs=1e-12)
    assert len(root.history()) == 10 and len(a.history()) == 6
    assert set(root.children()) == {"a", "b"}


def test_grandchildren_and_budget_limits(tmp_path):
    path = tmp_path / "tree.db"
    root = Ledger(2.0, 1e-5, path=path)
    with pytest.raises(ConfigError, match="exceeds its parent"):
        root.child("big", 3.0)
    leaf = root.child("level", 1.0).child("query", 0.5)
    assert leaf.name == "level/query"
    leaf.charge(dpa.LaplaceDpEvent(4.0))
    leaf.charge(dpa.LaplaceDpEvent(4.0))
    with pytest.raises(BudgetExceededError, match="level/query"):
        leaf.charge(dpa.LaplaceDpEvent(4.0))
    root.close()
    again = Ledger.open(path)
    assert again.child("level", 1.0).spent()[0] == pytest.approx(0.5)
    assert again.child("level", 1.0).child("query", 0.9).epsilon == 0.5  # stored wins
    assert again.spent()[0] == pytest.approx(0.5)


# -- the contract with veil's mechanisms -------------------------------------------------

@pytest.mark.parametrize("accountant", ["pld", "rdp", "basic", "advanced"])
def test_every_veil_mechanism_fits_a_ledger_of_exactly_its_budget(accountant):
    """The one-off ledger of ``veil.dp.stats`` (budget = the mechanism's own guarantee)
    must admit one release of every mechanism, under every accountant, and not two."""
    import numpy as np

    from veil import dp

    cases = [(dp.Laplace(1.0), 3.0), (dp.Gaussian(1.0, 1e-5), 3.0),
             (dp.DiscreteLaplace(1.0), 3), (dp.DiscreteGaussian(1.0, 1e-5), 3),
             (dp.RandomizedResponse(1.0, 3), 1), (dp.Exponential(1.0), np.array([1.0, 2.0]))]
    for mech, value in cases:
        if accountant == "rdp" and mech.delta > 0:
            continue  # a Renyi filter prices by the RDP curve, above the exact (eps, delta)
        ledger = Ledger(mech.epsilon, mech.delta, accountant=accountant)
        ledger.release(mech, value, rng=1)
        assert ledger.spent()[0] <= mech.epsilon * (1 + 1e-9), type(mech).__name__
        with pytest.raises(BudgetExceededError):
            ledger.release(mech, value, rng=2)



def test_spent_names_its_delta_as_the_one_the_epsilon_is_stated_at():
    """spent() returned a bare (epsilon, delta): printed as {'delta': 1e-05} after a 1e-6
    query, it read as "delta spent". It is Spent(epsilon, at_delta), still a pair."""
    ledger = Ledger(2.0, 1e-5)
    ledger.release(Gaussian(1.0, 1e-6, sensitivity=1.0), 0.0)
    spent = ledger.spent()
    epsilon, at = spent
    assert spent._asdict() == {"epsilon": epsilon, "at_delta": 1e-5} and at == spent.at_delta
    assert ledger.spent(delta=1e-3).at_delta == 1e-3 and ledger.spent(delta=1e-3).epsilon <= epsilon
