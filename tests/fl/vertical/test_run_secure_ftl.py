"""run_transfer with protocol "he" / "ss": the secure FTL of Liu et al. from a [transfer]
section (CSV tables aligned by PSI, or Adult), and bad settings refused by name before
anything is aligned or trained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from veil.errors import ConfigError, DataError
from veil.experiments import vertical_run as run_module
from veil.experiments.vertical_run import run_transfer


@pytest.fixture()
def tables(tmp_path):
    """Breast cancer: the source has 15 columns and labels of rows 0-349, the target 15
    other columns of rows 150-568 (150-349 shared, shuffled); the test: rows 350-568."""
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]
    ids = np.array([f"p{i:04d}" for i in range(len(y))])
    source = pd.DataFrame(X[:350, :15], columns=[f"a{j}" for j in range(15)])
    source.insert(0, "id", ids[:350])
    source["y"] = y[:350]
    target = pd.DataFrame(X[150:, 15:], columns=[f"b{j}" for j in range(15)])
    target.insert(0, "id", ids[150:])
    target.sample(frac=1.0, random_state=0).to_csv(tmp_path / "target.csv", index=False)
    source.to_csv(tmp_path / "source.csv", index=False)
    target.iloc[200:].drop(columns="id").assign(y=y[350:]).to_csv(tmp_path / "test.csv",
                                                                  index=False)
    return tmp_path


CSV = {"source": "source.csv", "target": "target.csv", "test": "test.csv", "seed": 0}


def test_the_secret_shared_run_scores_the_targets_own_people(tables):
    out = run_transfer({**CSV, "protocol": "ss", "iterations": 10, "batch_size": 100,
                        "dim": 4, "layers": [6]}, base=tables)
    assert out["aligned"] == 200 and out["protocol"] == "ss"
    assert len(out["seconds_per_iteration"]) == 10 and out["bytes"][0]["source"] > 0
    assert out["accuracy"] > 0.85 and out["auc"] > 0.9


def test_the_paillier_run_goes_through_the_he_parties(tables, monkeypatch):
    from veil.fl.vertical import secure_ftl

    seen = {}
    real = secure_ftl.train_secure_ftl

    def spy(source, target, iterations, **kw):
        seen["bits"] = source.pk.bits
        return real(source, target, iterations, **kw)

    monkeypatch.setattr(secure_ftl, "train_secure_ftl", spy)
    out = run_transfer({**CSV, "protocol": "he", "iterations": 1, "batch_size": 8, "dim": 2},
                       base=tables)
    assert seen["bits"] == 2048 and out["protocol"] == "he"
    assert len(out["bytes"]) == 1 and 0.0 <= out["auc"] <= 1.0


@pytest.mark.parametrize(("extra", "error", "match"), [
    ({"protocol": "fhe"}, ConfigError, "protocol"),
    ({"protocol": "ss", "rounds": 3}, ConfigError, r"\['rounds'\] do not apply"),
    ({"protocol": "he", "correlation": "dealer"}, ConfigError, "correlation"),
    ({"protocol": "he", "layers": [4]}, ConfigError, r"\['layers'\] do not apply"),
    ({"protocol": "ss", "layers": [4, 0]}, ConfigError, "layers"),
    ({"protocol": "ss", "layers": 4}, ConfigError, "layers=4"),
    ({"protocol": "ss", "iterations": 0}, ConfigError, "iterations"),
    ({"protocol": "ss", "gamma": -1.0}, ConfigError, "gamma"),
    ({"protocol": "ss", "correlation": "ot"}, ConfigError, "correlation"),
    ({"protocol": "ss", "key_bits": 2048}, ConfigError, "key_bits applies"),
    ({"protocol": "ss", "correlation": "paillier", "key_bits": 1024}, ConfigError, "1024"),
    ({"protocol": "ss", "overlap": 0.3}, ConfigError, "overlap applies to dataset"),
    ({"protocol": "ss", "dataset": "adult"}, ConfigError, "source is not allowed"),
    ({"protocol": "ss", "target": "source.csv"}, ConfigError, "target holds the label"),
    ({"protocol": "ss", "id": "key"}, DataError, "no id column 'key'"),
    ({"protocol": "ss", "label": "z"}, DataError, "no label column 'z'"),
])
def test_bad_settings_are_refused_before_anything_is_trained(tables, monkeypatch, extra,
                                                              error, match):
    from veil.fl.vertical import secure_ftl, secure_ftl_ss

    def never(*args, **kw):
        raise AssertionError("training started")

    monkeypatch.setattr(secure_ftl_ss, "train_ss_ftl", never)
    monkeypatch.setattr(secure_ftl, "train_secure_ftl", never)
    with pytest.raises(error, match=match):
        run_transfer({**CSV, **extra}, base=tables)


def test_text_features_are_refused(tables):
    source = pd.read_csv(tables / "source.csv")
    source.assign(a3="x").to_csv(tables / "text.csv", index=False)
    with pytest.raises(DataError, match=r"source: the feature columns \['a3'\]"):
        run_transfer({**CSV, "protocol": "ss", "source": "text.csv"}, base=tables)


def test_no_shared_people_is_refused(tables):
    target = pd.read_csv(tables / "target.csv")
    target.assign(id="q" + target["id"]).to_csv(tables / "other.csv", index=False)
    with pytest.raises(DataError, match="intersection of all parties' ids is empty"):
        run_transfer({**CSV, "protocol": "ss", "target": "other.csv"}, base=tables)


def test_the_example_config_runs():
    from veil.datasets import locate
    from veil.experiments.fl_config import load_config

    if locate("adult/adult.data") is None:
        pytest.skip("UCI Adult is not in ../shared/datasets/adult")
    example = Path(__file__).resolve().parents[3] / "examples" / "fl_transfer_adult.toml"
    cfg = load_config(example)
    assert cfg.kind == "transfer"
    section = {**cfg["transfer"], "iterations": 3}
    out = run_module.run_transfer(section, base=example.parent)
    assert out["aligned"] > 500 and 0.0 <= out["accuracy"] <= 1.0 and out["auc"] > 0.5
