"""``veil fl run CONFIG.toml`` with a [vertical] or [transfer] section: results.json, run.json
and the guest's ledger in --out; a bad config is a ConfigError naming the key, raised
before anything is read, trained or spent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from veil.audit import read_run
from veil.cli.main import main
from veil.dp import Ledger
from veil.errors import ConfigError
from veil.experiments.fl_config import load_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture()
def folder(tmp_path):
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    ids = [f"p{i:04d}" for i in range(len(y))]
    guest = pd.DataFrame(X[:, :8], columns=[f"g{j}" for j in range(8)]).assign(y=y)
    guest.insert(0, "id", ids)
    host = pd.DataFrame(X[:, 8:], columns=[f"h{j}" for j in range(22)])
    host.insert(0, "id", ids)
    guest.to_csv(tmp_path / "guest.csv", index=False)
    host.iloc[30:].to_csv(tmp_path / "host.csv", index=False)
    return tmp_path


def _write(folder: Path, body: str) -> Path:
    path = folder / "run.toml"
    path.write_text(body)
    return path


SS = """
[vertical]
model = "logistic"
protocol = "ss"
parties = {{ guest = "guest.csv", host = "host.csv" }}
epochs = 4
batch_size = 128
learning_rate = 0.3
test_fraction = 0.3
{extra}
[run]
seed = 1
"""


def test_a_vertical_toml_runs_from_the_cli(folder, capsys):
    out = folder / "out"
    config = _write(folder, SS.format(extra=""))
    assert main(["fl", "run", str(config), "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    results = json.loads((out / "results.json").read_text())
    assert results["aligned"] == printed["aligned"] == 539
    assert results["auc"] > 0.95 and len(results["seconds_per_epoch"]) == 4
    run = read_run(out)
    assert run.kind == "other" and run.records[0].accuracy == results["accuracy"]
    assert run.records[0].cost["bytes"] > 0 and run.records[0].ledger is None
    assert main(["fl", "run", str(config), "--out", str(out)]) == 2       # not empty
    assert main(["fl", "run", str(config), "--out", str(out), "--resume"]) == 2


def test_label_dp_leaves_the_guests_ledger_in_out(folder):
    pytest.importorskip("torch")
    out = folder / "out"
    text = SS.format(extra='model = "split"\nlabel_epsilon = 1.5\n').replace(
        'model = "logistic"\n', "").replace("epochs = 4", "epochs = 1")
    # the number of classes is declared under label DP; refused before any ledger exists
    config = _write(folder, text)
    assert main(["fl", "run", str(config), "--out", str(out)]) == 2
    assert not (out / "ledger.sqlite").exists()
    config = _write(folder, text.replace("label_epsilon = 1.5\n",
                                         "label_epsilon = 1.5\nclasses = 2\n"))
    assert main(["fl", "run", str(config), "--out", str(out)]) == 0
    ledger = Ledger.open(out / "ledger.sqlite", read_only=True)
    assert 0 < ledger.spent()[0] <= 1.5 + 1e-9
    assert read_run(out).records[0].ledger == "ledger.sqlite"
    # a ledger is never overwritten, even with --force
    assert main(["fl", "run", str(config), "--out", str(out), "--force"]) == 2


@pytest.mark.parametrize("extra, match", [
    ("alpha = \"0.1\"\n", r"\[vertical\] alpha='0.1' is not allowed: expected int or float"),
    ("epoch = 4\n", r"unknown settings \['epoch'\]"),
    ("prefix_columns = 1\n", r"prefix_columns=1 is not allowed: expected bool"),
    ("seed = 3\n", r"seed is given in both \[run\] and \[vertical\]"),
])
def test_bad_vertical_configs_name_the_key(folder, extra, match):
    config = _write(folder, SS.format(extra=extra))
    with pytest.raises(ConfigError, match=match):
        load_config(config)
    assert main(["fl", "run", str(config), "--out", str(folder / "out")]) == 2
    assert not (folder / "out").exists()


def test_sections_that_do_not_apply_are_refused(folder):
    config = _write(folder, SS.format(extra="") + "\n[training]\nrounds = 3\n")
    with pytest.raises(ConfigError, match=r"\[training\] do\(es\) not apply to a \[vertical\]"):
        load_config(config)
    config = _write(folder, SS.format(extra="").replace("seed = 1", "workers = 2"))
    with pytest.raises(ConfigError, match=r"\[run\] workers do\(es\) not apply"):
        load_config(config)
    config = _write(folder, SS.format(extra="") + '\n[transfer]\nsource = "s.csv"\n')
    with pytest.raises(ConfigError, match="two runs"):
        load_config(config)
    config = _write(folder, SS.format(extra='parties = 2\n').replace(
        'parties = { guest = "guest.csv", host = "host.csv" }\n', "", 1))
    assert main(["fl", "run", str(config), "--out", str(folder / "o")]) == 2  # no dataset


def test_adult_split_by_attributes(adult_available):
    from veil.fl.vertical.data import vertical_adult

    tables = vertical_adult(3, overlap=0.9, rows=2000, rng=0)
    assert list(tables) == ["guest", "host1", "host2"]
    assert "y" in tables["guest"] and all("y" not in t for t in list(tables.values())[1:])
    columns = [set(t.columns) - {"id", "y"} for t in tables.values()]
    assert not (columns[0] & columns[1]) and not (columns[1] & columns[2])
    # one-hot columns of an attribute stay together
    owner = {c.split("=")[0]: k for k, cols in enumerate(columns) for c in cols}
    assert all(owner[c.split("=")[0]] == k for k, cols in enumerate(columns) for c in cols)
    common = set(tables["guest"]["id"]) & set(tables["host1"]["id"]) & set(tables["host2"]["id"])
    assert 0.85 * 2000 < len(common) < 2000
    assert tables["guest"]["id"].map(type).eq(str).all()


def test_the_fate_example_runs_from_the_cli(fate_or_skip, tmp_path, capsys):
    config = EXAMPLES / "fl_vertical_breast.toml"
    text = config.read_text().replace('protocol = "paillier"', 'protocol = "ss"')
    local = tmp_path / "breast.toml"
    local.write_text(text.replace("../../shared/datasets/fate",
                                  str(fate_or_skip.parent)))
    assert main(["fl", "run", str(local), "--out", str(tmp_path / "o"), "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["aligned"] == 569 and results["auc"] > 0.98
    assert np.isfinite(results["seconds"])


def test_noisy_gradients_charge_every_partys_ledger_in_out(folder, capsys):
    out = folder / "out"
    config = _write(folder, SS.format(extra="epsilon = 3.0\nclip = [1.0, 2.0]\n"))
    assert main(["fl", "run", str(config), "--out", str(out), "--json"]) == 0
    spent = json.loads(capsys.readouterr().out)["epsilon_spent"]
    assert set(spent) == {"guest", "host"} and all(2.9 < e <= 3.0 + 1e-9
                                                   for e in spent.values())
    for name in ("ledger.sqlite", "ledger_host.sqlite"):
        assert Ledger.open(out / name, read_only=True).spent()[0] == pytest.approx(
            spent["guest"])
    both = _write(folder, SS.format(extra="epsilon = 3.0\nlabel_epsilon = 1.0\n"))
    with pytest.raises(ConfigError, match="exclude each other"):
        from veil.experiments.vertical_run import run_vertical

        run_vertical(load_config(both)["vertical"], base=folder)
