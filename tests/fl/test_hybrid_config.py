"""``veil fl run`` with ``strategy = "hybrid"``: a tiny run with a small (explicitly
insecure) key in worker processes, the same model as in one process, and refused configs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veil.cli.main import main
from veil.errors import ConfigError
from veil.experiments.fl_config import load_config
from veil.fl.checkpoint import Checkpoint

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY = """
[data]
dataset = "wine"
clients = 4

[model]
type = "softmax_regression"

[training]
strategy = "hybrid"
rounds = 3

[privacy]
epsilon = 4.0
delta = 1e-5
clip_norm = 1.0

[hybrid]
honest = 2
key_bits = 256
insecure_ok = true
max_records = 256

[faults]
dropout = 0.25
dropout_exact = true
dropout_stage = "decrypt"

[run]
seed = 5
simulate_noise = true
workers = {workers}
"""


def _config(tmp_path: Path, text: str, name: str = "tiny.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_hybrid_run_in_worker_processes_matches_one_process(tmp_path, capsys):
    finals = []
    for workers in (1, 2):
        config = _config(tmp_path, TINY.format(workers=workers), f"tiny{workers}.toml")
        out = tmp_path / f"out{workers}"
        assert main(["fl", "run", str(config), "--out", str(out), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        rounds = printed["rounds"]
        assert [r["status"] for r in rounds] == ["ok"] * 3
        # threshold = 4 - 2 + 1 = 3 partial decryptions, though 1 party drops out each round
        assert all(r["decryptions"] == 3 and r["dropped"] == 1 for r in rounds)
        assert 0 < printed["summary"]["epsilon"] <= 4.0 + 1e-9
        assert json.loads((out / "run.json").read_text())["kind"] == "hybrid"
        finals.append(Checkpoint(out / "checkpoint.veil").load()["params"])
    # the key differs between the runs (drawn securely), the noisy sums do not (the run is
    # a labelled simulation: its noise comes from the seed)
    np.testing.assert_array_equal(finals[0], finals[1])


def _refused(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_config(tmp_path, text))


def test_hybrid_configs_are_checked_before_anything_runs(tmp_path):
    good = TINY.format(workers=2)
    _refused(tmp_path, good.replace("insecure_ok = true\n", ""),
             r"key_bits=256 is not allowed.*insecure_ok = true")
    _refused(tmp_path, good.replace("honest = 2\n", ""), r"\[hybrid\] needs honest")
    _refused(tmp_path, good.replace("honest = 2", "honest = 2\nhonset = 1"),
             r"unknown key 'honset' in \[hybrid\]")
    # t is named once, as in every command: the old key is refused with the allowed ones
    _refused(tmp_path, good.replace("honest = 2", "trust = 2"),
             r"unknown key 'trust' in \[hybrid\]; allowed: honest")
    _refused(tmp_path, good.replace("honest = 2", "honest = 9"),
             r"\[hybrid\] honest \(t\)=9 is not allowed")
    _refused(tmp_path, good.replace('strategy = "hybrid"', 'strategy = "fedavg"'),
             r"\[hybrid\] section needs \[training\] strategy = \"hybrid\"")
    _refused(tmp_path, good.replace("rounds = 3", "rounds = 3\nbatch_size = 16"),
             r"\[training\] batch_size do\(es\) not apply to strategy 'hybrid'")
    _refused(tmp_path, good.replace("clip_norm = 1.0", "clip_norm = 1.0\nnoise = 'local'"),
             r"\[privacy\] noise do\(es\) not apply")
    _refused(tmp_path, good + "\n[secagg]\nbits = 32\n", r"\[secagg\] does not apply")
    _refused(tmp_path, good.replace("[privacy]\nepsilon = 4.0\ndelta = 1e-5\nclip_norm = 1.0\n",
                                    ""), r"strategy 'hybrid' needs a \[privacy\] section")
    _refused(tmp_path, good.replace("honest = 2", "honest = 2\nnoise = 'cauchy'"),
             r"noise='cauchy' is not allowed")
    _refused(tmp_path, good.replace("workers = 2", "workers = 2\ntimeout = 'soon'"),
             r"\[run\] timeout='soon'.*expected int or float")


def test_the_hybrid_adult_example_is_a_secure_hybrid_run_in_two_processes():
    cfg = load_config(EXAMPLES / "fl_adult_hybrid.toml")
    assert cfg.kind == "hybrid"
    assert cfg["hybrid"]["key_bits"] == 2048 and not cfg["hybrid"]["insecure_ok"]
    assert cfg["run"]["workers"] == 2
    assert cfg["hybrid"]["honest"] < cfg["data"]["clients"]
    assert cfg.trust().threshold == cfg["data"]["clients"] - cfg["hybrid"]["honest"] + 1


RAW_BREAST_CANCER = """
[data]
dataset = "breast_cancer"
clients = 4
{bounds}

[model]
type = "logistic_regression"

[training]
strategy = "hybrid"
rounds = 10

[privacy]
epsilon = 4.0
delta = 1e-5

[hybrid]
honest = 2
key_bits = 256
insecure_ok = true
max_records = 256

[run]
seed = 5
simulate_noise = true
"""


def test_hybrid_logistic_regression_on_raw_breast_cancer_beats_the_majority_class(tmp_path,
                                                                                   capsys):
    """Issue 32: breast cancer's raw features (areas in the thousands beside smoothness in
    hundredths) made every clipped gradient point along the area columns, and the hybrid
    run predicted one class (accuracy 0.64, then 0.36: the majority rate or its complement).
    By default each party now scales its features from the data set's documented bounds."""
    config = _config(tmp_path, RAW_BREAST_CANCER.format(bounds=""))
    cfg = load_config(config)
    _, (_, y_test), _ = cfg.data(5)
    majority = max(np.mean(y_test), 1 - np.mean(y_test))
    assert main(["fl", "run", str(config), "--out", str(tmp_path / "out"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["summary"]["accuracy"] > majority + 0.1


def test_data_bounds_are_declared_in_the_config_and_each_party_scales_its_own(tmp_path):
    from veil.datasets import load_xy
    from veil.experiments.flower_app import write_party_data

    raw = load_xy("breast_cancer").X
    declared = "bounds = [" + ", ".join(f"[{lo}, {hi}]" for lo, hi in zip(
        np.floor(raw.min(0)) - 1, np.ceil(raw.max(0)) + 1)) + "]"
    cfg = load_config(_config(tmp_path, RAW_BREAST_CANCER.format(bounds=declared)))
    clients, (X_test, _), _ = cfg.data(5)
    assert all(X.min() >= -1 and X.max() <= 1 for X, _ in clients)
    unscaled = load_config(_config(tmp_path, RAW_BREAST_CANCER.format(bounds='bounds = "none"'),
                                   "none.toml"))
    np.testing.assert_array_equal(unscaled.data(5)[1][0], cfg.data(5, scaled=False)[1][0])
    # a deployment's party files hold raw records; the party scales them by the plan
    files = write_party_data(tmp_path / "tiny.toml", tmp_path / "split")
    with np.load(files[0]) as party:
        np.testing.assert_allclose(cfg.scale(party["X"]), clients[0][0])
    far = "bounds = [" + ", ".join(["[-3, 3]"] * 30) + "]"
    for bad, match in (("bounds = [[0, 1]]", r"bounds has 1 \[low, high\] pairs for 30 "
                        "named features"),
                       (far, r"\[data\] bounds: feature 'mean radius' \(and \d+ other"),
                       ("bounds = 'data'", r"bounds='data' is not allowed")):
        with pytest.raises(ConfigError, match=match):
            load_config(_config(tmp_path, RAW_BREAST_CANCER.format(bounds=bad), "bad.toml")
                        ).data(5)
