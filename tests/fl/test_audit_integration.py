"""Canary clients in real federated runs, and ``veil fl run`` writing what ``veil audit`` reads.

The one-run audit (Steinke, Nasr & Jagielski 2023) holds with probability >= its confidence
(0.95) for a correctly accounted run; with fixed seeds each test below is deterministic, and a
correct implementation passes each "never above the certified epsilon" check except with
probability <= 5% per audited run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veil.audit import read_run
from veil.cli.main import main
from veil.datasets import load_xy, partition
from veil.dp import Ledger, PrivacyBudget
from veil.errors import ConfigError
from veil.experiments.canary_audit import add_canary_clients
from veil.experiments.fl_config import load_config
from veil.fl import Faults, Federation, LocalRuntime
from veil.fl.canary import CanaryClient
from veil.fl.messages import SERVER, Message
from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg
from veil.learn import SoftmaxRegression
from veil.random import default_rng

N_REAL, DELTA = 5, 1e-5


class Crash(Exception):
    """Stands for the process dying after a round was checkpointed."""


@pytest.fixture(scope="module")
def digits_clients():
    """scikit-learn's digits over 5 IID clients: a 650-parameter softmax model."""
    data = load_xy("digits")
    X, y = data.X / 16.0, data.y
    return [(X[p], y[p]) for p in partition.iid(len(y), N_REAL, rng=1)]


def _dp(epsilon: float, rounds: int, **kwargs) -> DPFedAvg:
    return DPFedAvg.from_budget(FedAvg(learning_rate=0.3, batch_size=32),
                                PrivacyBudget(epsilon, DELTA), rounds=rounds, clip_norm=1.0,
                                **kwargs)


def _audited_run(clients, strategy, rounds, *, m=300, seed=0, ledger=None, norm=1.0, **kw):
    fed = Federation(clients, SoftmaxRegression(), strategy, rounds, ledger=ledger, rng=seed,
                     **kw)
    canaries = add_canary_clients(fed, m, norm=norm, rng=seed + 100)
    history = fed.run()
    return fed, canaries, history


# -- the canary client ------------------------------------------------------------------------
def test_a_canary_sends_its_signed_update_through_the_strategys_own_client(digits_clients):
    fed = Federation(digits_clients, SoftmaxRegression(), _dp(1.0, 4), 4,
                     ledger=Ledger(1.0, DELTA, accountant="pld"), rng=0)
    canaries = add_canary_clients(fed, 20, norm=3.0, rng=1)
    assert canaries.ids == tuple(range(N_REAL, N_REAL + 20))
    i = int(np.flatnonzero(canaries.included)[0])
    client = fed.clients[canaries.ids[i]]
    assert isinstance(client, CanaryClient) and client.protocol == "plain"
    params = np.linspace(-1, 1, fed.params.size)
    for t, sign in ((0, 1.0), (1, -1.0)):
        request = Message("plain", t, "fit", SERVER, client.client_id,
                          {"params": params, "config": fed.strategy.client_config(t)})
        (answer,) = client.handle(request, default_rng(t))
        delta = answer.array("delta", dtype=np.float64, shape=params.shape)
        # DPFedAvg clips it like any client's update: norm 3 becomes the clip norm 1
        np.testing.assert_allclose(delta, sign * canaries.canaries.update(i, 1.0), atol=1e-12)


@pytest.mark.parametrize("transport", ["plain", "secagg"])
def test_the_scores_recover_the_coins_exactly_without_noise(transport):
    """Real clients that do not train (local_epochs=0) send zero updates, so the released
    changes are exactly the canaries' sum: with q = 1 and unit weights the signed sum is
    T * norm / (N + m) on every included canary's coordinate and 0 elsewhere."""
    gen = np.random.default_rng(0)
    X = gen.normal(size=(60, 30))
    y = (X[:, 0] > 0).astype(int)
    clients = [(X[k::3], y[k::3]) for k in range(3)]
    strategy = FedAvg(local_epochs=0, weighted=False)
    if transport == "secagg":
        strategy = SecAgg(strategy, bits=32, clip_range=1.0, neighbours=6)
    rounds, m, norm = 3, 12, 0.8
    _, canaries, _ = _audited_run(clients, strategy, rounds, m=m, norm=norm, seed=5,
                                  runtime=LocalRuntime(Faults()))
    expected = rounds * norm / (3 + m) * canaries.included
    # secure aggregation quantizes each coordinate to 2 clip_range / 2^32 per client
    tol = 1e-12 if transport == "plain" else rounds * (3 + m) * 2.0 / 2 ** 32
    np.testing.assert_allclose(canaries.scores(), expected, atol=tol)


def test_canaries_leave_the_ledgers_accounting_unchanged(digits_clients):
    spent = []
    for m in (0, 50):
        ledger = Ledger(2.0, DELTA, accountant="pld")
        fed = Federation(digits_clients, SoftmaxRegression(), _dp(2.0, 3), 3, ledger=ledger,
                         rng=0)
        if m:
            add_canary_clients(fed, m, norm=1.0, rng=1)
        fed.run()
        spent.append((ledger.spent(), [(c.event, c.label) for c in ledger.history()]))
    assert spent[0] == spent[1]


# -- the audit ----------------------------------------------------------------------------------
def test_non_private_fedavg_is_exposed(digits_clients):
    _, canaries, _ = _audited_run(digits_clients, FedAvg(learning_rate=0.3, batch_size=32), 4)
    bound = canaries.audit(rng=0)
    # without clipping or noise a canary's alternating push (4 rounds x norm / (N + m) in the
    # average) towers over the real clients' smooth drift: (nearly) every guess is right
    assert bound.correct >= bound.guesses - 1
    assert bound.epsilon > 0.8 * bound.max_certifiable > 2.5


@pytest.mark.parametrize("epsilon", [1.0, 16.0])
def test_dp_fedavg_audit_stays_below_the_certified_epsilon(digits_clients, epsilon):
    bounds = []
    for seed in range(3):
        ledger = Ledger(epsilon, DELTA, accountant="pld")
        _, canaries, _ = _audited_run(digits_clients, _dp(epsilon, 4), 4, seed=seed,
                                      ledger=ledger)
        certified, delta = ledger.spent()
        bounds.append(canaries.audit(delta=delta, rng=seed).epsilon)
        assert bounds[-1] <= certified
    if epsilon == 16.0:
        # the DP noise's projection is 1 / z_eff ~ 3 canary signals wide at epsilon 16:
        # the audit sees the leak the budget allows, up to its ceiling (3.85 with 300)
        assert min(bounds) > 2.0


@pytest.mark.parametrize("epsilon", [4.0, 400.0])
def test_local_noise_audit_stays_below_the_certified_epsilon(digits_clients, epsilon):
    """Local noise (each client, canaries included, noises its own update; no amplification
    by sampling is claimed against the server that samples): the audit of the released
    models never exceeds what the ledger certifies for the run."""
    ledger = Ledger(epsilon, DELTA)
    strategy = _dp(epsilon, 4, noise="local", sample_rate=0.5)
    _, canaries, _ = _audited_run(digits_clients, strategy, 4, seed=3, ledger=ledger)
    certified, delta = ledger.spent()
    bound = canaries.audit(delta=delta, rng=3)
    print(f"local noise, target epsilon {epsilon:g}: certified {certified:.4g}, one-run "
          f"audit lower bound {bound.epsilon:.4g} ({bound.correct}/{bound.guesses} right)")
    assert certified <= epsilon * (1 + 1e-9)
    assert bound.epsilon <= certified


def test_the_audit_catches_a_run_that_claims_more_privacy_than_its_noise_gives(
        digits_clients):
    # noise for epsilon ~ 16, but claimed to be (1, 1e-5)-DP: a broken accounting
    z = _dp(16.0, 4).noise_multiplier
    strategy = DPFedAvg(FedAvg(learning_rate=0.3, batch_size=32), noise_multiplier=z,
                        clip_norm=1.0)
    _, canaries, _ = _audited_run(digits_clients, strategy, 4,
                                  ledger=Ledger(1e9, DELTA, accountant="pld"))
    assert canaries.audit(delta=DELTA, rng=0).epsilon > 1.0


def test_resume_after_a_crash_gives_the_same_scores(digits_clients, tmp_path):
    def run(path, **kw):
        # the same scores need the same noise: a labelled simulation (seeded noise)
        fed = Federation(digits_clients, SoftmaxRegression(), _dp(4.0, 5), 5, rng=2,
                         ledger=Ledger(4.0, DELTA, accountant="pld", path=path / "l.sqlite"),
                         checkpoint=path / "ck.veil", simulate_noise=True, **kw)
        return fed, add_canary_clients(fed, 100, norm=1.0, rng=7)

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full_fed, full = run(tmp_path / "a")
    full_fed.run()

    def die_after_round_2(record):
        if record["round"] == 1:
            raise Crash

    with pytest.raises(Crash):
        run(tmp_path / "b", on_progress=die_after_round_2)[0].run()
    fed, resumed = run(tmp_path / "b")
    fed.run(resume=True)
    np.testing.assert_array_equal(fed.params, full_fed.params)
    np.testing.assert_array_equal(resumed.scores(), full.scores())
    # other canaries (another seed) do not fit this checkpoint
    other = Federation(digits_clients, SoftmaxRegression(), _dp(4.0, 5), 5, rng=2,
                       ledger=Ledger(4.0, DELTA, accountant="pld"),
                       checkpoint=tmp_path / "b" / "ck.veil")
    add_canary_clients(other, 100, norm=1.0, rng=8)
    with pytest.raises(ConfigError, match="different federation"):
        other.run(resume=True)


def test_canary_configuration_errors(digits_clients):
    fed = Federation(digits_clients, SoftmaxRegression(), FedAvg(), 2, rng=0)
    with pytest.raises(ConfigError, match="Dirac canaries need m distinct coordinates"):
        add_canary_clients(fed, 651, norm=1.0, rng=0)
    with pytest.raises(ConfigError, match="norm"):
        add_canary_clients(fed, 10, norm=0.0, rng=0)
    fed.run()
    with pytest.raises(ConfigError, match="before the first round"):
        add_canary_clients(fed, 10, norm=1.0, rng=0)


# -- veil fl run ------------------------------------------------------------------------------
TINY = """
[data]
dataset = "digits"
clients = 4

[model]
type = "softmax_regression"

[training]
rounds = 3
learning_rate = 0.3
batch_size = 32
{privacy}
[audit]
canaries = {canaries}
{run}
"""
PRIVACY = "[privacy]\nepsilon = 2.0\nclip_norm = 1.0\naccountant = \"pld\"\n"


def _config(tmp_path: Path, *, privacy: bool = True, canaries: int = 200,
            seed: int | None = 3) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(privacy=PRIVACY if privacy else "", canaries=canaries,
                                run="" if seed is None else f"[run]\nseed = {seed}"))
    return path


def test_fl_run_report_writes_the_run_directory_and_the_privacy_report(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fl", "run", str(_config(tmp_path)), "--out", str(out), "--report",
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    run = read_run(out)
    assert run.kind == "dpfedavg" and run.records[0].ledger == "ledger.sqlite"
    record = run.records[0]
    assert record.cost["rounds"] == 3 and record.cost["bytes"] > 0
    assert record.accuracy == printed["summary"]["accuracy"]
    assert record.arrays["client_canary_scores"].shape == (200,)
    assert (out / "audit" / "report.html").read_text().startswith("<!DOCTYPE html>")
    report = json.loads((out / "audit" / "report.json").read_text())
    (entry,) = report["runs"]
    assert entry["certified"]["source"] == "ledger"
    assert entry["certified"]["epsilon"] == pytest.approx(printed["audit"]["certified_epsilon"])
    canary = entry["empirical_epsilon"]["canary clients (one-run)"]
    assert canary["epsilon"] == pytest.approx(printed["audit"]["epsilon"])
    assert canary["epsilon"] <= entry["certified"]["epsilon"]
    assert "value_nats" in entry["mi"]["party_aggregate"]
    # the resume state moved out of run.json's way, and veil audit reads the directory
    assert json.loads((out / "state.json").read_text())["partition_seed"] == 3
    assert main(["audit", str(out), "--out", str(tmp_path / "again")]) == 0


def test_fl_run_without_privacy_records_a_fedavg_run(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["fl", "run", str(_config(tmp_path, privacy=False)), "--out", str(out),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    run = read_run(out)
    assert run.kind == "fedavg" and run.records[0].ledger is None
    assert printed["audit"]["certified_epsilon"] is None
    assert printed["audit"]["epsilon"] > 2.0  # nothing hides a canary in plain FedAvg
    assert not (out / "audit").exists()  # no --report


def test_resume_with_secure_randomness_keeps_the_clients_and_canaries(tmp_path):
    config = _config(tmp_path, privacy=False, canaries=30, seed=None)
    out = tmp_path / "out"
    assert main(["fl", "run", str(config), "--out", str(out)]) == 0
    first = read_run(out).records[0].arrays
    # resuming draws nothing new: the data split and the canaries come from state.json
    # (redrawn canaries would change the federation's fingerprint and be refused)
    assert main(["fl", "run", str(config), "--out", str(out), "--resume"]) == 0
    again = read_run(out).records[0].arrays
    np.testing.assert_array_equal(again["client_canary_scores"], first["client_canary_scores"])
    (out / "state.json").unlink()
    assert main(["fl", "run", str(config), "--out", str(out), "--resume"]) == 2


def test_audit_config_errors_leave_nothing_behind(tmp_path, capsys):
    with pytest.raises(ConfigError, match="at least 8 canaries"):
        load_config(_config(tmp_path, canaries=3))
    bad_kind = _config(tmp_path).read_text().replace("canaries = 200",
                                                     "canaries = 20\nkind = \"uniform\"")
    (tmp_path / "kind.toml").write_text(bad_kind)
    with pytest.raises(ConfigError, match="kind"):
        load_config(tmp_path / "kind.toml")
    # more Dirac canaries than the model's 650 parameters: refused before the ledger exists
    out = tmp_path / "out"
    assert main(["fl", "run", str(_config(tmp_path, canaries=700)), "--out", str(out)]) == 2
    assert "kind='gaussian'" in capsys.readouterr().err
    assert not (out / "ledger.sqlite").exists()
