"""Whole runs: checkpoints, resume after a crash, the guarded global model."""

from __future__ import annotations

import numpy as np
import pytest

from veil.dp import Ledger
from veil.errors import ConfigError, DataError
from veil.fl import Faults, Federation, LocalRuntime
from veil.fl.checkpoint import Checkpoint
from veil.fl.federation import SIMULATION
from veil.fl.protocol import RoundResult
from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg
from veil.learn import LogisticRegression, SoftmaxRegression


class Crash(Exception):
    """Stands for the process dying after a round was checkpointed."""


def _strategy():
    inner = FedAvg(local_epochs=1, learning_rate=0.3, batch_size=8, fraction=0.8)
    return SecAgg(DPFedAvg(inner, noise_multiplier=1.0, clip_norm=0.5, adaptive=True,
                           clipped_count_stddev=2.0), bits=32)


def _federation(data, tmp_path, **kwargs):
    # identical models across a crash need identical noise: a labelled simulation
    return Federation(data, LogisticRegression(), _strategy(), 6, rng=4, simulate_noise=True,
                      checkpoint=tmp_path / "ck.veil",
                      ledger=Ledger(50.0, 1e-5, accountant="rdp", path=tmp_path / "l.sqlite"),
                      runtime=LocalRuntime(Faults(dropout=0.1, crash=0.05, straggler=0.05,
                                                  replay=0.3)), **kwargs)


def test_kill_and_resume_gives_the_uninterrupted_model(clients, tmp_path):
    data = clients(8, rows=40)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full_fed = _federation(data, tmp_path / "a")
    full = full_fed.run()

    def die_after_round_3(record):
        if record["round"] == 2:
            raise Crash

    with pytest.raises(Crash):
        _federation(data, tmp_path / "b", on_progress=die_after_round_3).run()
    assert Checkpoint(tmp_path / "b" / "ck.veil").load()["next_round"] == 3
    # a fresh process: new objects, same files
    resumed_fed = _federation(data, tmp_path / "b")
    resumed = resumed_fed.run(resume=True)
    np.testing.assert_array_equal(resumed.params, full.params)
    assert [r["round"] for r in resumed.rounds] == list(range(6))
    assert resumed.metric("accuracy") == full.metric("accuracy")
    # the budget was not reset: one plan and the same six rounds charged to it
    kinds = [c.kind for c in resumed_fed.ledger.history()]
    assert kinds == ["plan"] + ["step"] * 6
    assert resumed_fed.ledger.spent() == full_fed.ledger.spent()
    assert resumed.rounds[-1]["epsilon"] == pytest.approx(full.rounds[-1]["epsilon"])
    # the adaptive clip norm was restored, not restarted
    assert resumed_fed.strategy.inner.clip_norm_ != 0.5


def _dp_run(data, path, rounds=3, **kwargs):
    return Federation(data, LogisticRegression(), DPFedAvg(FedAvg(), noise_multiplier=1.0),
                      rounds, rng=0, simulate_noise=True, checkpoint=path / "ck.veil",
                      ledger=Ledger(50.0, 1e-5, accountant="rdp", path=path / "l.sqlite"),
                      **kwargs)


@pytest.mark.parametrize("dies", ["mid-round", "between the checkpoint and the charge"])
def test_a_crash_never_charges_or_releases_a_round_twice(clients, tmp_path, dies):
    data = clients(4)
    (tmp_path / "full").mkdir()
    (tmp_path / "killed").mkdir()
    full = _dp_run(data, tmp_path / "full")
    expected = full.run()

    class Dies(LocalRuntime):
        def run_round(self, server, clients, rng=None):
            if server.round == 1:
                raise Crash
            return super().run_round(server, clients, rng)

    killed = _dp_run(data, tmp_path / "killed",
                     runtime=Dies() if dies == "mid-round" else None)
    if dies != "mid-round":
        charge = killed._charge

        def dying_charge(event, label):
            if label.startswith("fl round 1 "):
                raise Crash
            return charge(event, label)

        killed._charge = dying_charge
    with pytest.raises(Crash):
        killed.run()
    killed.ledger.close()
    # a fresh process: new objects, same files
    again = _dp_run(data, tmp_path / "killed")
    resumed = again.run(resume=True)
    plan, *rounds = again.ledger.history()
    assert plan.kind == "plan" and plan.label == "fl rounds from 0" + SIMULATION
    assert [(c.kind, c.block, c.label) for c in rounds] == [
        ("step", plan.index, f"fl round {t}" + SIMULATION) for t in range(3)]
    assert again.ledger.spent() == full.ledger.spent()
    np.testing.assert_array_equal(resumed.params, expected.params)
    assert resumed.metric("epsilon") == expected.metric("epsilon")
    # resuming a finished run pays nothing more
    _dp_run(data, tmp_path / "killed").run(resume=True)
    assert len(Ledger.open(tmp_path / "killed" / "l.sqlite").history()) == 4


def test_resume_checks_the_checkpoint_belongs_to_this_run(clients, tmp_path):
    data = clients(4)
    Federation(data, LogisticRegression(), FedAvg(), 1, rng=0,
               checkpoint=tmp_path / "ck.veil").run()
    other = Federation(clients(5), LogisticRegression(), FedAvg(), 2, rng=0,
                       checkpoint=tmp_path / "ck.veil")
    with pytest.raises(ConfigError, match="different federation"):
        other.run(resume=True)
    (tmp_path / "bad.veil").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="not a readable veil checkpoint"):
        Federation(data, LogisticRegression(), FedAvg(), 1,
                   checkpoint=tmp_path / "bad.veil").run(resume=True)
    # no checkpoint yet: resume starts from round 0
    fresh = Federation(data, LogisticRegression(), FedAvg(), 2, rng=0,
                       checkpoint=tmp_path / "new.veil").run(resume=True)
    assert len(fresh.rounds) == 2


def test_the_global_model_is_never_corrupted(clients, known_updates):
    data = clients(3)
    fed = Federation(data, LogisticRegression(), known_updates(), 2, rng=0)

    class Poisoned(LocalRuntime):
        def run_round(self, server, clients, rng=None):
            report = super().run_round(server, clients, rng)
            params = report.result.params.copy()
            params[0] = np.inf
            report.result = RoundResult(params, report.result.clients)
            return report

    fed.runtime = Poisoned()
    history = fed.run()
    np.testing.assert_array_equal(history.params, fed.initial_params)
    assert all(r["status"] == "aborted" and "finite" in r["error"] for r in history.rounds)


def test_bad_client_data_is_a_data_error(clients):
    data = clients(2)
    with pytest.raises(DataError, match="feature counts"):
        Federation([data[0], (data[1][0][:, :3], data[1][1])], LogisticRegression(), FedAvg(),
                   1)
    with pytest.raises(DataError, match=r"clients\[1\]\[0\] holds 1 NaN"):
        X = data[1][0].copy()
        X[0, 0] = np.nan
        Federation([data[0], (X, data[1][1])], LogisticRegression(), FedAvg(), 1)


def test_a_seed_reproduces_everything_but_privacy_noise_and_keys(clients):
    """A seeded run fixed the SecAgg keys, self-mask seeds and DP noise shares: whoever knew
    the seed could recompute them. Now the same seed gives the same sampling and faults, but
    other noise (and so another model) unless the run is a labelled simulation."""
    from veil.fl.strategies import DPFedAvg, FedAvg, SecAgg

    data = clients(6)

    def run(**kw):
        strategy = SecAgg(DPFedAvg(FedAvg(weighted=False), noise_multiplier=1.0, clip_norm=0.5,
                                   noise="distributed"), bits=32)
        fed = Federation(data, LogisticRegression(), strategy, 2, rng=5,
                         ledger=Ledger(1e3, 1e-5, accountant="rdp"), **kw)
        return fed.run(), fed

    (a, _), (b, _) = run(), run()
    assert not np.array_equal(a.params, b.params)             # noise from the CSPRNG
    assert [r["aggregated"] for r in a.rounds] == [r["aggregated"] for r in b.rounds]
    (c, fed_c), (d, _) = run(simulate_noise=True), run(simulate_noise=True)
    np.testing.assert_array_equal(c.params, d.params)         # reproducible simulation...
    assert c.to_dict()["summary"]["epsilon_certified"] is False   # ...labelled as such
    assert "not certified" in fed_c.ledger.history()[0].label
    assert "epsilon_certified" not in a.to_dict()["summary"]
def test_the_label_set_is_declared_or_read_from_the_data_with_a_warning(clients):
    from veil.learn.public import PublicFactWarning

    data = [(X, np.zeros_like(y)) if i == 0 else (X, (y > 0).astype(int))
            for i, (X, y) in enumerate(clients(3))]
    # one client holds a single label; the model still has the declared classes
    declared = Federation(data, SoftmaxRegression(), FedAvg(), 1, rng=0, classes=[0, 1, 2])
    assert list(declared.model.classes_) == [0, 1, 2]
    with pytest.warns(PublicFactWarning, match="read from the data"):
        Federation(data, LogisticRegression(), FedAvg(), 1, rng=0)
    with pytest.raises(DataError, match="outside the declared classes"):
        Federation(data, LogisticRegression(), FedAvg(), 1, rng=0, classes=[5, 6])
