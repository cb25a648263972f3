"""run_vertical / run_transfer: whole runs from a configuration, and bad tables refused
before anything is aligned, trained or spent."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from veil.errors import ConfigError, DataError
from veil.experiments.vertical_run import run_transfer, run_vertical
from veil.fl.vertical.data import check_tables


@pytest.fixture()
def tables(tmp_path):
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    ids = [f"p{i:04d}" for i in range(len(y))]
    guest = pd.DataFrame(X[:, :8], columns=[f"g{j}" for j in range(8)])
    guest.insert(0, "id", ids)
    guest["y"] = y
    host = pd.DataFrame(X[:, 8:], columns=[f"h{j}" for j in range(22)])
    host.insert(0, "id", ids)
    host = host.iloc[40:].sample(frac=1.0, random_state=0)      # other rows, other order
    guest.to_csv(tmp_path / "guest.csv", index=False)
    host.to_csv(tmp_path / "host.csv", index=False)
    return tmp_path, guest, host


def _config(**extra):
    return {"model": "logistic", "protocol": "ss", "parties": {"guest": "guest.csv",
                                                               "host": "host.csv"},
            "epochs": 5, "batch_size": 128, "learning_rate": 0.3, "test_fraction": 0.3,
            "seed": 0, **extra}


def test_a_run_aligns_trains_and_reports(tables):
    base, _, _ = tables
    out = run_vertical(_config(), base=base)
    assert out["aligned"] == 529 and out["guest"] == "guest"
    assert out["accuracy"] > 0.9 and out["auc"] > 0.95
    assert len(out["seconds_per_epoch"]) == 5 and out["bytes_per_epoch"][0]["guest"] > 0
    torch = pytest.importorskip("torch")
    assert torch is not None
    out = run_vertical(_config(model="split", epochs=3, learning_rate=3e-3, label_epsilon=2.0,
                               classes=2), base=base)
    assert out["accuracy"] > 0.8 and 0 < out["label_epsilon_spent"] <= 2.0 + 1e-9


def test_bad_tables_are_refused_before_anything_runs(tables):
    base, guest, host = tables
    both = host.assign(y=0)
    with pytest.raises(ConfigError, match="held by \\['guest', 'host'\\]"):
        check_tables({"guest": guest, "host": both}, "id", "y")
    with pytest.raises(ConfigError, match="column 'g1' is held by both"):
        check_tables({"guest": guest, "host": host.assign(g1=1.0)}, "id", "y")
    with pytest.raises(DataError, match="mismatched id types"):
        check_tables({"guest": guest, "host": host.assign(id=np.arange(len(host)))}, "id", "y")
    with pytest.raises(DataError, match="duplicate ids"):
        check_tables({"guest": guest, "host": pd.concat([host, host.iloc[:1]])}, "id", "y")
    with pytest.raises(DataError, match="party 'host': the feature columns \\['city'\\] are not"):
        check_tables({"guest": guest, "host": host.assign(city="Lyon")}, "id", "y")
    (base / "text.csv").write_text(host.assign(city="Lyon").to_csv(index=False))
    with pytest.raises(DataError, match="not numeric"):   # before any alignment
        run_vertical(_config(parties={"guest": "guest.csv", "host": "text.csv"}), base=base)
    (base / "other.csv").write_text(host.assign(id="q" + host["id"]).to_csv(index=False))
    with pytest.raises(DataError, match="empty"):
        run_vertical(_config(parties={"guest": "guest.csv", "host": "other.csv"}), base=base)
    with pytest.raises(ConfigError, match="unknown settings"):
        run_vertical(_config(epoch=3), base=base)
    with pytest.raises(ConfigError, match="label_epsilon"):
        run_vertical(_config(label_epsilon=-1.0), base=base)
    # FATE-style local column names: refused as an overlap unless declared local
    (base / "g2.csv").write_text(guest.rename(columns={"g0": "h0"}).to_csv(index=False))
    cfg = _config(parties={"guest": "g2.csv", "host": "host.csv"}, epochs=1)
    with pytest.raises(ConfigError, match="'h0' is held by both"):
        run_vertical(cfg, base=base)
    assert run_vertical({**cfg, "prefix_columns": True}, base=base)["aligned"] == 529


def test_run_transfer_reports_both_accuracies(tmp_path):
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)

    def domain(n, shift):
        X = rng.normal(size=(n, 4)) + shift
        return pd.DataFrame(X, columns=list("abcd")).assign(
            y=(X[:, 0] - X[:, 1] > shift * 0.3).astype(int))

    domain(2000, 0.0).to_csv(tmp_path / "source.csv", index=False)
    target = domain(1600, 0.8)
    for i in range(2):
        target.iloc[i * 20:(i + 1) * 20].to_csv(tmp_path / f"t{i}.csv", index=False)
    target.iloc[100:700].drop(columns="y").to_csv(tmp_path / "public.csv", index=False)
    target.iloc[700:].to_csv(tmp_path / "test.csv", index=False)
    out = run_transfer({"source": "source.csv", "targets": ["t0.csv", "t1.csv"],
                        "transfer": "public.csv", "test": "test.csv", "rounds": 3,
                        "classes": 2, "seed": 1}, base=tmp_path)
    assert out["accuracy_with_source"] > out["accuracy_without_source"]
    text = pd.read_csv(tmp_path / "public.csv").assign(city="Lyon")
    text.to_csv(tmp_path / "text.csv", index=False)
    with pytest.raises(DataError, match=r"\[transfer\] transfer: the feature columns \['city'\]"):
        run_transfer({"source": "source.csv", "targets": ["t0.csv", "t1.csv"],
                      "transfer": "text.csv", "test": "test.csv", "rounds": 3,
                      "classes": 2}, base=tmp_path)
    # the number of classes is declared (public), never read from the source's labels
    with pytest.raises(ConfigError, match=r"\[transfer\] classes is required"):
        run_transfer({"source": "source.csv", "targets": ["t0.csv", "t1.csv"],
                      "transfer": "public.csv", "test": "test.csv", "rounds": 3},
                     base=tmp_path)
    return out


@pytest.mark.slow
def test_transfer_fine_tuning_on_flower_gives_the_local_accuracies(tmp_path):
    """The targets' fine-tuning on Flower's simulation engine, a node per target: the same
    seeded accuracies as in this process (about 2 minutes: two simulations)."""
    pytest.importorskip("flwr", reason="the Flower runtime needs the 'flower' extra (flwr)")
    local = test_run_transfer_reports_both_accuracies(tmp_path)
    config = {"source": "source.csv", "targets": ["t0.csv", "t1.csv"],
              "transfer": "public.csv", "test": "test.csv", "rounds": 3, "classes": 2,
              "seed": 1}
    assert run_transfer(config, base=tmp_path, flower=True) == local
    with pytest.raises(ConfigError, match="local runtime only"):
        run_transfer({"protocol": "ss"}, base=tmp_path, flower=True)


def test_fate_tables_load_and_align():
    from veil.datasets import locate
    from veil.fl.vertical import align
    from veil.fl.vertical.data import load_fate

    if locate("fate/breast_hetero_guest.csv") is None:
        pytest.skip("FATE's tables are not in ../shared/datasets/fate")
    guest, host = load_fate("breast")
    assert "y" in guest.columns and "y" not in host.columns
    assert align(guest, {"host": host}, column="id", rng=0).size == 569
    with pytest.raises(ConfigError, match="name"):
        load_fate("mnist")


def test_the_example_runs_on_fates_tables(capsys):
    import importlib.util
    import json
    from pathlib import Path

    from veil.datasets import locate

    if locate("fate/breast_hetero_guest.csv") is None:
        pytest.skip("FATE's tables are not in ../shared/datasets/fate")
    script = Path(__file__).resolve().parents[3] / "examples" / "vertical_fl.py"
    spec = importlib.util.spec_from_file_location("vertical_fl_example", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--protocol", "ss"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["aligned"] == 569 and out["auc"] > 0.98
