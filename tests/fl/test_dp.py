"""DP-FedAvg: clipping, noise of the stated size, charges to the ledger, adaptive clipping."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from veil.dp import Ledger, PrivacyBudget
from veil.dp.accounting import epsilon_for
from veil.errors import BudgetExceededError, ConfigError
from veil.fl import Federation
from veil.fl.protocol import Aggregate
from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg
from veil.learn import LogisticRegression
from veil.random import Generator


def test_client_updates_are_clipped_and_weights_are_one(clients, known_updates):
    data = clients(3)
    inner = known_updates(scale=10.0)
    dp = DPFedAvg(inner, noise_multiplier=1.0, clip_norm=0.5)
    model = LogisticRegression().initialize(6, [0, 1])
    from veil.fl.trainer import LocalTrainer

    for X, y in data:
        update = dp.client_update(LocalTrainer(model, X, y), np.zeros(7), dp.client_config(0),
                                  Generator(0))
        raw = inner.delta(X, y)
        assert np.linalg.norm(update.delta) == pytest.approx(0.5)
        np.testing.assert_allclose(update.delta, raw * 0.5 / np.linalg.norm(raw))
        assert update.weight == 1.0


def test_central_noise_has_the_stated_scale():
    # with zero updates the new parameters are pure noise: N(0, (z C / (qN))^2) per entry
    dp = DPFedAvg(FedAvg(), noise_multiplier=1.3, clip_norm=2.0)
    dp.sample(0, list(range(20)), Generator(0))
    total = Aggregate(np.zeros(20000), 20.0, {}, tuple(range(20)))
    out = dp.aggregate(0, np.zeros(20000), total, Generator(1))
    # sample std of 20000 normals: relative error ~ 1/sqrt(2 * 20000) = 0.5%; allow 3%
    assert np.std(out) == pytest.approx(1.3 * 2.0 / 20, rel=0.03)
    assert abs(np.mean(out)) < 4 * 0.13 / math.sqrt(20000)


def test_local_noise_is_added_by_each_client(clients, known_updates):
    data = clients(1, d=5000, rows=10)
    dp = DPFedAvg(known_updates(scale=0.0), noise_multiplier=2.0, clip_norm=0.1, noise="local")
    config = dp.client_config(0)
    assert config["noise_std"] == pytest.approx(0.2)
    model = LogisticRegression().initialize(5000, [0, 1])
    from veil.fl.trainer import LocalTrainer

    update = dp.client_update(LocalTrainer(model, *data[0]), np.zeros(5001), config,
                              Generator(3))
    assert np.std(update.delta) == pytest.approx(0.2, rel=0.05)


@pytest.mark.parametrize("epsilon,rounds,q", [(4.0, 100, 0.1), (1.0, 50, 0.05)])
def test_local_noise_is_certified_against_the_server_that_samples(epsilon, rounds, q):
    """The server picks the clients, so against it a client sampled in every one of the T
    rounds releases T Gaussian(z) answers: no amplification by sampling may be claimed.
    (The certified epsilon was 3.995 where the truth is 14.6 at T=100, q=0.1, target 4.)"""
    dp = DPFedAvg.from_budget(FedAvg(fraction=q), PrivacyBudget(epsilon, 1e-5),
                              rounds=rounds, noise="local")
    ledger = Ledger(1e9, 1e-3, accountant="pld")
    plan = ledger.plan(dp.round_event(0, np.zeros(3), [0], 10), steps=rounds, delta=1e-5)
    for r in range(rounds):
        plan.charge(dp.round_event(r, np.zeros(3), [0], 10))
    worst = dp_accounting.pld.PLDAccountant().compose(  # replace-one: sensitivity 2C
        dp_accounting.GaussianDpEvent(dp.noise_multiplier / 2), rounds).get_epsilon(1e-5)
    assert ledger.spent(1e-5)[0] >= worst - 1e-3
    assert worst <= epsilon * 1.001


@pytest.mark.parametrize("target", [1.0, 4.0, 8.0])
def test_local_noise_is_certified_for_any_two_inputs_of_a_client(clients, known_updates,
                                                                  target):
    """The attack (issue #28, item 3): local noise protects each client's update against
    the server, for any two inputs of that client (replace-one, local DP's convention). Two
    clipped updates differ by up to 2C, so noise of std z C is a Gaussian mechanism of
    multiplier z / 2 only. The rounds were charged as Gaussian(z) (add/remove, a shift of
    C): from_budget for epsilon 4, delta 1e-5 certified 3.998 where the replace-one
    epsilon against the server is 9.08 (1 -> 2.16, 8 -> 19.1). Now a run is charged at
    least the replace-one epsilon of the noise each client adds, and that meets the
    target; the certificate names the relation."""
    rounds, clip = 3, 0.5
    budget = PrivacyBudget(target, 1e-5)
    dp = DPFedAvg.from_budget(known_updates(), budget, rounds=rounds, noise="local",
                              clip_norm=clip)
    ledger = Ledger.for_budget(budget)
    Federation(clients(3), LogisticRegression(), dp, rounds, rng=0, ledger=ledger).run()
    std = dp.client_config(0)["noise_std"]  # what each client adds to its clipped update
    replace_one = epsilon_for(std / (2 * clip), 1e-5, steps=rounds)
    assert ledger.spent()[0] >= replace_one - 1e-3
    assert replace_one <= target * 1.001
    assert dp.privacy.relation.startswith("replace-one")
    assert DPFedAvg(known_updates(), noise_multiplier=1.0).privacy.relation.startswith(
        "add/remove")
    assert SecAgg(DPFedAvg(known_updates(), noise_multiplier=1.0, noise="distributed")
                  ).privacy.relation.startswith("add/remove")   # wrappers name their inner's
    assert FedAvg().privacy.relation is None


def test_the_ledger_must_cap_the_budget_the_noise_was_calibrated_for(clients, known_updates):
    """Epsilon given twice could disagree (issue #31): z calibrated for epsilon 1 and a
    ledger of epsilon 4 certified a run for 4 that was planned for 1, and a ledger of
    another accountant prices the plan differently than its calibration. The strategy
    carries its PrivacyBudget; the federation refuses a ledger of any other, before any
    round runs or anything is charged."""
    budget = PrivacyBudget(1.0, 1e-5)
    dp = DPFedAvg.from_budget(known_updates(), budget, rounds=2)
    assert dp.privacy.budget == budget
    for other in (Ledger(4.0, 1e-5), Ledger(1.0, 1e-6), Ledger(1.0, 1e-5, accountant="rdp")):
        with pytest.raises(ConfigError, match="calibrated for epsilon=1, delta=1e-05"):
            Federation(clients(2), LogisticRegression(), dp, 2, ledger=other)
        assert not other.history()
    ledger = Ledger.for_budget(budget)
    Federation(clients(2), LogisticRegression(), dp, 2, rng=0, ledger=ledger).run()
    assert 0 < ledger.spent()[0] <= 1.0 * (1 + 1e-9)
    # noise given directly names no budget: any ledger caps it
    plain = DPFedAvg(known_updates(), noise_multiplier=5.0)
    assert plain.privacy.budget is None
    Federation(clients(2), LogisticRegression(), plain, 1, rng=0, ledger=Ledger(4.0, 1e-5))


def test_a_local_noise_client_refuses_the_servers_numbers(clients, known_updates):
    from veil.errors import ProtocolError
    from veil.fl.trainer import LocalTrainer

    data = clients(1, d=20, rows=10)
    dp = DPFedAvg(known_updates(scale=1.0), noise_multiplier=2.0, clip_norm=0.1,
                  noise="local")
    model = LogisticRegression().initialize(20, [0, 1])
    for forged in ({"noise_std": 1e-9}, {"clip_norm": 100.0}):
        config = {**dp.client_config(0), **forged}
        with pytest.raises(ProtocolError, match="own plan"):
            dp.client_update(LocalTrainer(model, *data[0]), np.zeros(21), config, Generator(3))


def test_rounds_are_charged_before_they_run(clients, known_updates):
    data = clients(10)
    z, q, rounds = 1.1, 0.5, 4
    ledger = Ledger(50.0, 1e-5, accountant="rdp")
    strategy = DPFedAvg(known_updates(fraction=q), noise_multiplier=z, clip_norm=1.0)
    history = Federation(data, LogisticRegression(), strategy, rounds, rng=0,
                         ledger=ledger).run()
    step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    plan, *charged = ledger.history()
    assert plan.kind == "plan" and plan.event == dp_accounting.SelfComposedDpEvent(step, rounds)
    assert [c.event for c in charged] == [step] * rounds
    assert [c.label for c in charged] == [f"fl round {t}" for t in range(rounds)]
    expected = epsilon_for(z, 1e-5, sample_rate=q, steps=rounds, accountant="rdp")
    assert history.rounds[-1]["epsilon"] == pytest.approx(expected, rel=1e-9)
    # Poisson sampling: the number of clients varies from round to round
    assert len({r["sampled"] for r in history.rounds}) > 1


def test_budget_exhaustion_stops_before_any_client_works(clients, known_updates):
    data = clients(4)
    budget = epsilon_for(1.0, 1e-5, steps=2, accountant="rdp") * 1.001
    ledger = Ledger(budget, 1e-5, accountant="rdp")
    strategy = DPFedAvg(known_updates(), noise_multiplier=1.0)
    fed = Federation(data, LogisticRegression(), strategy, 3, rng=0, ledger=ledger)
    with pytest.raises(BudgetExceededError, match="nothing was charged"):
        fed.run()
    # the plan holds the two rounds that fit; the third is refused before it runs
    assert len(fed.history.rounds) == 2
    assert [c.kind for c in ledger.history()] == ["plan", "step", "step"]
    assert ledger.spent()[0] <= budget
    with pytest.raises(ConfigError, match="ledger="):
        Federation(data, LogisticRegression(), strategy, 1, rng=0).run()


def test_adaptive_clipping_tracks_the_quantile(clients, known_updates):
    # Andrew et al. 2021: C moves geometrically towards the target quantile of the norms
    data = clients(40)
    inner = known_updates(scale=1.0)
    norms = sorted(np.linalg.norm(inner.delta(X, y)) for X, y in data)
    strategy = DPFedAvg(inner, noise_multiplier=0.5, clip_norm=0.05, adaptive=True,
                        target_quantile=0.5, clip_learning_rate=0.5,
                        clipped_count_stddev=0.5)
    fed = Federation(data, LogisticRegression(), strategy, 30, rng=0,
                     ledger=Ledger(1e6, 1e-5, accountant="rdp"))
    fed.run()
    median = np.median(norms)
    assert 0.7 * median < strategy.clip_norm_ < 1.4 * median
    # z_Delta from their Theorem 1, and a too small sigma_b is refused
    assert strategy._delta_multiplier() == pytest.approx((0.5 ** -2 - 1.0 ** -2) ** -0.5)
    bad = DPFedAvg(inner, noise_multiplier=1.1, adaptive=True)  # sigma_b = qN/20 = 0.5
    with pytest.raises(ConfigError, match="clipped_count_stddev"):
        bad.sample(0, list(range(10)), Generator(0))
    with pytest.raises(ConfigError, match="noise='local'"):
        DPFedAvg(inner, noise_multiplier=1.0, adaptive=True, noise="local")


def test_distributed_noise_needs_secure_aggregation(clients):
    with pytest.raises(ConfigError, match="SecAgg"):
        Federation(clients(2), LogisticRegression(),
                   DPFedAvg(FedAvg(), noise_multiplier=1.0, noise="distributed"), 1)


def test_dp_training_still_learns(clients):
    data = clients(20, rows=80)
    X_test = np.vstack([X for X, _ in data])
    y_test = np.concatenate([y for _, y in data])
    strategy = DPFedAvg(FedAvg(local_epochs=2, learning_rate=0.5, batch_size=16),
                        noise_multiplier=0.5, clip_norm=1.0)
    history = Federation(data, LogisticRegression(), strategy, 5, rng=0,
                         test=(X_test, y_test), ledger=Ledger(100.0, 1e-5)).run()
    assert history.rounds[-1]["accuracy"] > 0.8  # the label is x_0 > 0 plus noise


def test_one_privacy_descriptor_says_what_each_strategy_protects(known_updates):
    """Six capability flags on every strategy (private, relation, noise_at_clients,
    fixed_round_event, requires_secure_aggregation, secure), each delegated by every
    wrapper, are one frozen Privacy that the federation branches on."""
    from veil.fl.strategies.base import Privacy

    central = DPFedAvg(known_updates(), noise_multiplier=1.0).privacy
    local = DPFedAvg(known_updates(), noise_multiplier=1.0, noise="local").privacy
    shared = SecAgg(DPFedAvg(known_updates(weighted=False), noise_multiplier=1.0,
                             noise="distributed", sample_rate=1.0)).privacy
    assert FedAvg().privacy == Privacy() and not Privacy().private
    assert (central.noise, central.noise_at_clients, central.fixed_event) == \
        ("central", False, True)
    assert (local.noise, local.noise_at_clients, local.secure_aggregation) == \
        ("local", True, False)
    assert shared.secure_aggregation and shared.needs_secure_aggregation and shared.fixed_event
    assert SecAgg(known_updates(weighted=False)).privacy == Privacy(secure_aggregation=True)
    with pytest.raises(ConfigError, match="noise='somewhere' is not allowed"):
        Privacy(noise="somewhere")
    with pytest.raises(ConfigError, match="Privacy\\(noise=None\\) is not allowed"):
        Privacy(budget=PrivacyBudget(1.0))
