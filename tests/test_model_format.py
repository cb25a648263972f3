"""veil.learn.model_format: every kind of trained model saves without pickle and loads back;
``veil fl run`` writes its model and ``veil predict`` applies it (issue 19, item 6)."""

from __future__ import annotations

import ast
import inspect
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer

from veil.cli.main import main
from veil.datasets import public_bounds
from veil.dp import Ledger
from veil.errors import ConfigError, DataError, VeilError
from veil.learn import ID3Classifier, LogisticRegression, SoftmaxRegression, private
from veil.learn.model_format import (
    VERSION,
    encode_table,
    load_model,
    register_model_class,
    save_model,
)

from .test_codec import _mutated  # one mutation strategy for every decoder fuzzed


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    return X[:400], y[:400], X[400:], y[400:]


def _round_trip(tmp_path, model, X, **metadata):
    path = save_model(tmp_path / "m.npz", model, **metadata)
    with zipfile.ZipFile(path) as archive:  # arrays and JSON only
        assert all(name.endswith(".npy") for name in archive.namelist())
    loaded = load_model(path)
    assert type(loaded.model) is type(model)
    np.testing.assert_array_equal(loaded.model.predict(X), model.predict(X))
    return loaded


def test_federated_numpy_models_round_trip(tmp_path, data):
    X, y, X_test, _ = data
    for model in (LogisticRegression(alpha=1e-3).fit(X, y), SoftmaxRegression().fit(X, y)):
        loaded = _round_trip(tmp_path, model, X_test, feature_names=[f"f{i}" for i in
                                                                     range(X.shape[1])])
        assert loaded.metadata["classes"] == [0, 1]
        assert loaded.metadata["feature_names"][:2] == ["f0", "f1"]
        np.testing.assert_array_equal(loaded.model.get_params_vector(),
                                      model.get_params_vector())


def test_private_models_record_their_ledger(tmp_path, data):
    X, y, X_test, _ = data
    ledger = Ledger(10.0, 1e-5, path=tmp_path / "budget.sqlite")
    models = [private.LogisticRegression(epsilon=1.0, data_norm=np.sqrt(X.shape[1]),
                                         classes=[0, 1]),
              private.GaussianNB(epsilon=1.0, bounds=(0, 1), classes=[0, 1]),
              private.LinearRegression(epsilon=1.0, bounds_X=(0, 1), bounds_y=(0, 1)),
              private.KMeans(2, epsilon=1.0, bounds=(0, 1))]
    for i, model in enumerate(models):
        model.set_params(ledger=ledger.child(f"m{i}", 1.0, None))
        model.fit(X, y) if not isinstance(model, private.KMeans) else model.fit(X)
        loaded = _round_trip(tmp_path, model, X_test)
        meta = loaded.metadata
        assert 0 < meta["epsilon"] <= 1.0 + 1e-9
        assert meta["ledger"] == str(tmp_path / "budget.sqlite")
        assert loaded.model.epsilon == 1.0 and loaded.model.ledger is None
    ledger.close()


def test_hybrid_tree_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(200, 4))
    y = (X[:, 0] + X[:, 1] > 2).astype(int)
    tree = ID3Classifier(max_depth=3).fit(X, y)
    loaded = _round_trip(tmp_path, tree, X)
    assert len(loaded.model.tree_) == len(tree.tree_)


def test_torch_weights_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = save_model(tmp_path / "net.npz", net, epsilon=3.0, delta=1e-5)
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with pytest.raises(ConfigError, match="module="):
        load_model(path)
    loaded = load_model(path, module=other)
    x = torch.randn(5, 4)
    assert torch.equal(loaded.model(x), net(x))
    assert loaded.metadata == {"epsilon": 3.0, "delta": 1e-5}


def test_hostile_files_are_refused(tmp_path, data):
    X, y, _, _ = data
    path = save_model(tmp_path / "m.npz", LogisticRegression().fit(X, y))
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    header = json.loads(arrays["veil.json"].tobytes())
    for change, message in ((lambda h: h.update({"class": "os.system"}), "not a registered veil"),
                            (lambda h: h.update({"version": VERSION + 1}), "upgrade veil"),
                            (lambda h: h.update({"format": "other"}), "not a veil model")):
        bad = json.loads(json.dumps(header))
        change(bad)
        np.savez(tmp_path / "bad.npz", **{**arrays, "veil.json": np.frombuffer(
            json.dumps(bad).encode(), dtype=np.uint8)})
        with pytest.raises(DataError, match=message):
            load_model(tmp_path / "bad.npz")
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError):
        load_model(tmp_path / "pickled.npy")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(DataError):
        load_model(tmp_path / "text.npz")
    with pytest.raises(ConfigError, match="not fitted"):
        save_model(tmp_path / "x.npz", LogisticRegression())


def test_encode_table_follows_the_encoding():
    table = pd.DataFrame({"age": [17, 90, 200], "sex": ["F", "M", "F"], "gain": [0, 10, 99]})
    encoding = [{"column": "age", "kind": "range", "low": 17, "high": 90},
                {"column": "sex", "kind": "onehot", "categories": ["F", "M"]},
                {"column": "gain", "kind": "log", "high": 99}]
    X = encode_table(table, encoding)
    np.testing.assert_allclose(X[:, 0], [0, 1, 1])
    np.testing.assert_array_equal(X[:, 1:3], [[1, 0], [0, 1], [1, 0]])
    assert X[2, 3] == pytest.approx(1.0)
    with pytest.raises(DataError, match="never saw"):
        encode_table(table.assign(sex=["F", "X", "M"]), encoding)
    with pytest.raises(DataError, match="no column 'age'"):
        encode_table(table.drop(columns="age"), encoding)


FL_CONFIG = """
[data]
dataset = "breast_cancer"
clients = 3

[model]
type = "logistic_regression"

[training]
rounds = 3
batch_size = 64

[privacy]
epsilon = 2.0
delta = 1e-5
clip_norm = 1.0

[run]
seed = 1
"""


def test_fl_run_writes_a_model_that_veil_predict_applies(tmp_path, capsys):
    config = tmp_path / "bc.toml"
    config.write_text(FL_CONFIG)
    out = tmp_path / "run"
    assert main(["fl", "run", str(config), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == str(out / "model.npz")
    loaded = load_model(out / "model.npz")
    meta = loaded.metadata
    assert meta["ledger"] == "ledger.sqlite" and 0 < meta["epsilon"] <= 2.0 + 1e-9
    assert meta["labels"] == ["malignant", "benign"] and meta["dataset"] == "breast_cancer"
    assert meta["feature_names"][0] == "mean radius" and len(meta["encoding"]) == 30
    np.testing.assert_allclose(loaded.model.get_params_vector(), np.asarray(
        json.loads((out / "results.json").read_text())["params"]))

    bunch = load_breast_cancer(as_frame=True)
    table = tmp_path / "new [records].csv"
    bunch.frame.drop(columns="target").head(40).to_csv(table, index=False)
    preds = tmp_path / "preds.csv"
    assert main(["predict", str(out / "model.npz"), str(table), "--out", str(preds)]) == 0
    text = capsys.readouterr().out
    assert "new [records].csv" in " ".join(text.split())
    written = pd.read_csv(preds)
    assert set(written["prediction"]) <= {"malignant", "benign"} and len(written) == 40
    # the run scaled the raw features by the data set's public bounds; so does predict
    raw = bunch.frame.drop(columns="target").head(40).to_numpy()
    expected = loaded.model.predict(public_bounds("breast_cancer").scale(raw))
    assert list(written["prediction"]) == [meta["labels"][i] for i in expected]
    # the same again: the output exists, so it is refused and left as it is
    before = preds.read_bytes()
    assert main(["predict", str(out / "model.npz"), str(table), "--out", str(preds)]) == 2
    assert preds.read_bytes() == before
    assert main(["predict", str(table), str(table)]) == 2
    assert "not a veil model file" in capsys.readouterr().err


def test_veil_audit_reads_a_model_file_without_pickle(tmp_path, data, capsys):
    X, y, X_out, y_out = data
    ledger = Ledger(2.0, 0.0)
    model = private.LogisticRegression(epsilon=1.5, data_norm=np.sqrt(X.shape[1]),
                                       ledger=ledger, classes=[0, 1]).fit(X, y)
    path = save_model(tmp_path / "model.npz", model)
    np.savez(tmp_path / "in.npz", X=X, y=y)
    np.savez(tmp_path / "out.npz", X=X_out, y=y_out)
    assert main(["audit", "--model", str(path), "--members", str(tmp_path / "in.npz"),
                 "--nonmembers", str(tmp_path / "out.npz"), "--out", str(tmp_path / "r"),
                 "--seed", "1", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["runs"][0]
    assert entry["certified"]["epsilon"] == pytest.approx(1.5)  # from the file's metadata
    assert entry["certified"]["source"] == "declared"
    # the spend is given once: a declared epsilon beside a ledger file is refused
    (tmp_path / "ledger.sqlite").write_bytes(b"")
    assert main(["audit", "--model", str(path), "--members", str(tmp_path / "in.npz"),
                 "--nonmembers", str(tmp_path / "out.npz"), "--out", str(tmp_path / "r2"),
                 "--ledger", str(tmp_path / "ledger.sqlite"), "--epsilon", "1"]) != 0
    assert "not allowed with --ledger" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "r2").exists()


def test_mpc_models_save_once_revealed(tmp_path, data):
    from veil.mpc import Session
    from veil.mpc.models import LogisticRegression as SecureLogisticRegression
    from veil.mpc.models import RevealedModel, share_rows

    X, y, X_test, _ = data
    with Session(parties=3) as s:
        model = SecureLogisticRegression(learning_rate=1.0, max_iter=5).fit(
            share_rows(s, [X[:100], X[100:200]]), share_rows(s, [y[:100], y[100:200]]))
        with pytest.raises(ConfigError, match="reveal"):
            save_model(tmp_path / "shared.npz", model)   # the weights are still shares
        opened = model.reveal()
        shared_labels = model.predict(s.share(X_test, owner=0)).reveal()
    assert isinstance(opened, RevealedModel)
    assert np.mean(opened.predict(X_test) == shared_labels) > 0.95  # fixed-point vs exact
    _round_trip(tmp_path, opened, X_test)


# -- hostile files (issue 29, item 5) -------------------------------------------------------
def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {m: archive.read(m) for m in archive.namelist()}


def _zip(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=True)
    return out.getvalue()


def _header_bytes(header: dict) -> bytes:
    return _npy(np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))


def test_a_file_names_only_registered_classes(tmp_path, data):
    """Attack: the old loader imported any ``veil.*`` class a file named and called it with the
    file's arguments; naming ``veil.dp.ledger.Ledger`` with a ``path`` created a file at a
    chosen place (a class with side effects can spawn processes the same way). Only the
    closed registry's classes are rebuilt now, by estimator or as a dataclass, and nothing is
    imported by name."""
    X, y, _, _ = data
    members = _members(save_model(tmp_path / "m.npz", LogisticRegression().fit(X, y)))
    header = json.loads(np.load(io.BytesIO(members["veil.json.npy"])).tobytes())
    planted = tmp_path / "planted.sqlite"
    ledger = {"epsilon": 1.0, "delta": 0.0, "path": str(planted)}
    attacks = [{**header, "class": "veil.dp.ledger.Ledger", "params": ledger, "state": {}},
               {**header, "state": {"coef_": {"__dataclass__": "veil.dp.ledger.Ledger",
                                              "fields": ledger}}}]
    for bad in attacks:
        _zip(tmp_path / "bad.npz", {**members, "veil.json.npy": _header_bytes(bad)})
        with pytest.raises(DataError, match="not a registered veil model class"):
            load_model(tmp_path / "bad.npz")
        assert not planted.exists()


def test_the_spend_is_given_once(tmp_path, data):
    """A Ledger (given, or the model's own ``ledger_``) records the spend; an epsilon or
    delta beside it could disagree with it, so it is refused before anything is written."""
    X, y, _, _ = data
    ledger = Ledger(1.0, 1e-5)
    model = private.LogisticRegression(epsilon=1.0, data_norm=6.0, classes=[0, 1],
                                       ledger=ledger).fit(X, y)
    for kw in ({"ledger": ledger, "epsilon": 1.0}, {"delta": 1e-5}):
        with pytest.raises(ConfigError, match="not allowed beside a Ledger"):
            save_model(tmp_path / "m.npz", model, **kw)
        assert not (tmp_path / "m.npz").exists()
    meta = load_model(save_model(tmp_path / "m.npz", model)).metadata
    assert meta["epsilon"] == pytest.approx(ledger.spent()[0])


def test_the_registry_refuses_duplicates_and_outsiders():
    with pytest.raises(ConfigError, match="already registered"):
        register_model_class(LogisticRegression)
    with pytest.raises(ConfigError, match="not a class defined in veil"):
        register_model_class(zipfile.ZipFile)


def _registering_modules() -> set[str]:
    """The veil modules that register a model class (``@register_model_class``)."""
    src = Path(__file__).resolve().parents[1] / "src"
    return {".".join(p.relative_to(src).with_suffix("").parts)
            for p in (src / "veil").rglob("*.py")
            if "@register_model_class" in p.read_text() and p.name != "model_format.py"}


def test_veil_predict_registers_every_model_class():
    """``veil predict`` loads any model veil saves: the format imports nothing by a name read
    from a file, so ``load_model_file`` imports each module that registers a class (a new one
    left out would make its files unreadable by ``veil predict`` and ``veil audit``)."""
    from veil.cli import predict

    tree = ast.parse(inspect.getsource(predict.load_model_file))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert _registering_modules() >= {"veil.learn.linear", "veil.mpc.models"}
    assert _registering_modules() <= imported


def test_sizes_are_checked_before_anything_is_allocated(tmp_path, data):
    """Attacks: an array header declaring a huge shape (numpy's MemoryError escaped), and a
    small deflated archive that inflates to a large array (0.8 MiB pushed memory to 1 GiB).
    Declared shapes must match the bytes present, and members must be stored uncompressed
    with sizes summing to at most the file's, so memory stays linear in the file's size."""
    X, y, _, _ = data
    members = _members(save_model(tmp_path / "m.npz", LogisticRegression().fit(X, y)))
    huge = _npy(np.zeros(4)).replace(b"(4,)", b"(1099511627776,)")   # 8 TiB declared
    _zip(tmp_path / "huge.npz", {**members, "a0.npy": huge})
    with pytest.raises(DataError, match="declares shape"):
        load_model(tmp_path / "huge.npz")
    bomb = _zip(tmp_path / "bomb.npz", {**members, "a0.npy": _npy(np.zeros(6_000_000))},
                zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 200_000
    with pytest.raises(DataError, match="more bytes than the file"):
        load_model(bomb)


def test_a_non_veil_file_gets_veils_own_message(tmp_path):
    """numpy's advice (``allow_pickle``) must not reach a user: a pickled array is refused
    with veil's words, whatever the file."""
    np.savez(tmp_path / "objects.npz", a=np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    for name in ("objects.npz", "objects.npy"):
        with pytest.raises(DataError, match="not a veil model file") as caught:
            load_model(tmp_path / name)
        assert "pickle" not in str(caught.value)




@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """Valid files of three kinds: a linear model, a tree (registered dataclasses, int-keyed
    dicts) and a private model (parameters, metadata)."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(60, 3))
    y = (X[:, 0] > 1).astype(int)
    folder = tmp_path_factory.mktemp("samples")
    models = [LogisticRegression().fit(X, y), ID3Classifier(max_depth=2).fit(X, y),
              private.GaussianNB(epsilon=1.0, bounds=(0, 2), classes=[0, 1]).fit(X, y)]
    return folder, [_members(save_model(folder / f"{i}.npz", m)) for i, m in enumerate(models)]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_model_files_raise_only_veil_errors(samples, data):
    """Fuzzing as tests/test_codec.py fuzzes the codec: a valid file with its bytes mutated
    (the zip itself, the JSON header re-packed, or one array's .npy header re-packed)
    either loads or raises a veil error, never anything else."""
    folder, files = samples
    members = dict(data.draw(st.sampled_from(files)))
    target = folder / "fuzz.npz"
    where = data.draw(st.sampled_from(["zip", "header", "array"]))
    if where == "zip":
        _zip(target, members)
        target.write_bytes(data.draw(_mutated(target.read_bytes())))
    elif where == "header":
        text = np.load(io.BytesIO(members["veil.json.npy"])).tobytes()
        members["veil.json.npy"] = _npy(np.frombuffer(data.draw(_mutated(text)), np.uint8))
        _zip(target, members)
    else:
        name = data.draw(st.sampled_from(sorted(members)))
        members[name] = data.draw(_mutated(members[name][:128])) + members[name][128:]
        _zip(target, members)
    try:
        load_model(target)
    except VeilError:
        pass
