"""``run_federated``: the application service under ``veil fl run``, usable without the CLI."""

from __future__ import annotations

import json

import pytest

from veil.dp import Ledger
from veil.errors import ConfigError
from veil.experiments.fl_config import FLConfig, load_config
from veil.experiments.fl_run import FLRun, run_federated

CONFIG = """
[data]
dataset = "wine"
clients = 3

[model]
type = "softmax_regression"

[training]
rounds = 2
learning_rate = 0.3

[privacy]
epsilon = 4.0
delta = 1e-5

[run]
seed = 5
simulate_noise = true
"""


def _config(tmp_path):
    path = tmp_path / "wine.toml"
    path.write_text(CONFIG)
    return load_config(path)


def test_a_run_returns_its_result_and_leaves_its_folder(tmp_path):
    cfg = _config(tmp_path)
    seen = []
    result = run_federated(cfg, tmp_path / "out", on_round=seen.append)
    assert isinstance(result, FLRun) and [r["round"] for r in seen] == [0, 1]
    assert len(result.history.rounds) == 2 and result.model_file.exists()
    assert 0 < result.certified.epsilon <= 4.0 * (1 + 1e-9) and result.audit is None
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["summary"] == result.history.to_dict()["summary"]
    ledger = Ledger.open(tmp_path / "out" / "ledger.sqlite")
    assert ledger.budget == cfg.budget() and ledger.spent() == result.certified
    # the same seed, again: the same model (seeded simulation)
    again = run_federated(_config(tmp_path), tmp_path / "again")
    assert (again.history.params == result.history.params).all()


def test_a_config_the_federation_refuses_leaves_no_ledger(tmp_path, monkeypatch):
    """The ledger is passed to Federation(ledger=...), so it exists before the federation
    can refuse the config; a refused config must leave no ledger file that would block
    the next attempt (``already holds a run``)."""
    def refuse(self, federation, rng=None):
        raise ConfigError("refused for the test")

    monkeypatch.setattr(FLConfig, "canaries", refuse)
    with pytest.raises(ConfigError, match="refused for the test"):
        run_federated(_config(tmp_path), tmp_path / "out")
    assert not list((tmp_path / "out").glob("ledger.sqlite*"))
    with pytest.raises(ConfigError, match="runtime='grpc' is not allowed"):
        run_federated(_config(tmp_path), tmp_path / "other", runtime="grpc")
