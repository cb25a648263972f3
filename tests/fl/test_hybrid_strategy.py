"""The Hybrid strategy in a Federation: training, charging, dropouts, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from veil.crypto import threshold
from veil.dp import Ledger, PrivacyBudget
from veil.dp.trust import Trust
from veil.errors import BudgetExceededError, ConfigError
from veil.fl import Faults, Federation, LocalRuntime
from veil.fl.strategies import Hybrid
from veil.learn import LogisticRegression

BITS = 512


@pytest.fixture(scope="module")
def primes():
    return threshold.generate_safe_primes(BITS, insecure_ok=True, rng=51)


def _clients(n=5, rows=120, seed=0):
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        X = gen.uniform(-1, 1, size=(rows, 4))
        y = (X[:, 0] - 0.5 * X[:, 1] + 0.3 * gen.normal(size=rows) > 0).astype(int)
        out.append((X, y))
    return out


def test_hybrid_federation_learns_and_charges_every_round(primes):
    data = _clients()
    test = _clients(1, 400, seed=9)[0]
    budget = PrivacyBudget(4.0, 1e-5)
    strategy = Hybrid(Trust(5, 3), rounds=8, budget=budget, learning_rate=2.0,
                      key_bits=BITS, primes=primes, insecure_ok=True, rng=1)
    ledger = Ledger.for_budget(budget)
    runtime = LocalRuntime(Faults(dropout=0.4, dropout_exact=True, dropout_stage="decrypt"))
    history = Federation(data, LogisticRegression(alpha=0.0), strategy, 8, test=test,
                         ledger=ledger, runtime=runtime, rng=2).run()
    assert all(r["status"] == "ok" for r in history.rounds)      # 2 = t - 1 drop each round
    assert all(r["dropped"] == 2 for r in history.rounds)
    plan, *rounds = ledger.history()
    assert plan.kind == "plan" and [c.block for c in rounds] == [plan.index] * 8
    assert ledger.spent()[0] <= 4.0 + 1e-9
    assert history.rounds[-1]["accuracy"] > 0.8
    assert strategy.public_key.threshold == 3                # threshold = n - t + 1
    # the server only ever asked threshold = 3 valid partial decryptions per round
    assert all(r["decryptions"] == 3 for r in history.rounds)


def test_more_rounds_than_planned_are_refused(primes):
    data = _clients()
    budget = PrivacyBudget(1.0, 1e-5)
    strategy = Hybrid(Trust(5, 5), rounds=2, budget=budget, key_bits=BITS, primes=primes,
                      insecure_ok=True, rng=1)
    ledger = Ledger.for_budget(budget)
    with pytest.raises(BudgetExceededError):
        Federation(data, LogisticRegression(), strategy, 3, ledger=ledger, rng=2).run()
    assert [c.kind for c in ledger.history()] == ["plan", "step", "step"]


def test_bad_input(primes):
    budget = PrivacyBudget(1.0, 1e-6)
    with pytest.raises(ConfigError, match="t"):
        Hybrid(Trust(5, 6), rounds=2, budget=budget, key_bits=BITS, primes=primes, insecure_ok=True)
    with pytest.raises(ConfigError, match="t"):
        Hybrid(Trust(5, 0), rounds=2, budget=budget, key_bits=BITS, primes=primes, insecure_ok=True)
    with pytest.raises(ConfigError, match="budget"):
        Hybrid(Trust(5, 2), rounds=2, budget=1.0, key_bits=BITS, primes=primes, insecure_ok=True)
    with pytest.raises(ConfigError, match="delta=1e-05 is not allowed with budget"):
        Hybrid(Trust(5, 2), rounds=2, budget=budget, delta=1e-5, key_bits=BITS, primes=primes,
               insecure_ok=True)
    with pytest.raises(ConfigError, match="exactly one"):
        Hybrid(Trust(5, 2), rounds=2, key_bits=BITS, primes=primes, insecure_ok=True)
    strategy = Hybrid(Trust(3, 2), rounds=2, budget=budget, key_bits=BITS, primes=primes,
                      insecure_ok=True)
    with pytest.raises(ConfigError, match="set up for parties 0..2"):
        Federation(_clients(5), LogisticRegression(), strategy, 1,
                   ledger=Ledger.for_budget(budget))


def test_a_ledger_of_another_budget_is_refused(primes):
    """Epsilon given twice could disagree: the noise was calibrated for one budget and the
    run capped by another (a looser cap certifies less than it admits; another accountant
    stops the run early). The ledger must hold the budget the strategy was calibrated for,
    checked before any party is built or anything charged."""
    budget = PrivacyBudget(1.0, 1e-6)
    strategy = Hybrid(Trust(3, 2), rounds=2, budget=budget, key_bits=BITS, primes=primes,
                      insecure_ok=True)
    for other in (Ledger(2.0, 1e-6), Ledger(1.0, 1e-5), Ledger(1.0, 1e-6, accountant="rdp")):
        with pytest.raises(ConfigError, match="was calibrated for epsilon=1"):
            Federation(_clients(3), LogisticRegression(), strategy, 1, ledger=other)
        assert not other.history()
    assert strategy.privacy.budget == Ledger.for_budget(budget).budget == budget


def test_the_strategy_keeps_no_key_share(primes_for_strategy=None):
    """The Hybrid strategy held every party's key share for the whole run."""
    import numpy as np

    from veil.errors import ConfigError
    from veil.fl.strategies import Hybrid
    from veil.fl.trainer import LocalTrainer
    from veil.learn import LogisticRegression

    strategy = Hybrid(Trust(3, 2), rounds=1, noise_multiplier=1.0, key_bits=256, insecure_ok=True,
                      rng=1)
    X, y = np.random.default_rng(0).normal(size=(10, 2)), np.array([0, 1] * 5)
    model = LogisticRegression().initialize(2, [0, 1])
    clients = [strategy.client(i, LocalTrainer(model, X, y)) for i in range(3)]
    assert [c.key_share.index for c in clients] == [1, 2, 3]
    assert all(share is None for share in strategy._shares)
    assert not any(isinstance(v, (list, tuple)) and any(hasattr(x, "_share") for x in v)
                   for v in vars(strategy).values())
    with pytest.raises(ConfigError, match="already handed"):
        strategy.client(0, LocalTrainer(model, X, y))


def test_the_parties_can_generate_the_key_together():
    """keygen="distributed": no dealer ever knows the factorization (veil.crypto.dkg); the
    parties' key has no root shares, so they decrypt by Damgard-Jurik."""
    import numpy as np

    from veil.dp import Ledger
    from veil.fl import Federation
    from veil.fl.strategies import Hybrid
    from veil.learn import LogisticRegression

    gen = np.random.default_rng(0)
    data = []
    for _ in range(3):
        X = gen.normal(size=(30, 2))
        data.append((X, (X[:, 0] > 0).astype(int)))
    strategy = Hybrid(Trust(3, 2), rounds=2, noise_multiplier=1.0, key_bits=256, insecure_ok=True,
                      keygen="distributed")
    assert strategy.public_key.share_bits is not None and not strategy.public_key.root_keys
    history = Federation(data, LogisticRegression(), strategy, 2,
                         ledger=Ledger(1e6, 1e-3, accountant="rdp")).run()
    assert [r["status"] for r in history.rounds] == ["ok", "ok"]
