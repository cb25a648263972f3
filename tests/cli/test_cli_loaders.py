"""Issue #30: every loader of veil files (models, a run's scores, data arrays) refuses a
pickle, an object array or any other non-veil file with veil's own message: never numpy's
advice to load the file "unsafely using allow_pickle=", and nothing in the file is run."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest

from veil._arrays import NPY_ARRAY, read_arrays
from veil.cli.main import main
from veil.errors import DataError

#: a pickle whose loading would create this file: proof that nothing was unpickled
_RAN = "unpickled.txt"


class _Trap:
    def __init__(self, folder):
        self.folder = str(folder)

    def __reduce__(self):
        return (open, (f"{self.folder}/{_RAN}", "w"))


@pytest.fixture
def bad_files(tmp_path):
    """name -> path of files that are not veil files (each one a different way)."""
    objects = np.array([{"a": 1}, None], dtype=object)
    files = {"pickle": tmp_path / "model.pkl", "object.npy": tmp_path / "object.npy",
             "object.npz": tmp_path / "object.npz", "text": tmp_path / "notes.txt",
             "broken.npz": tmp_path / "broken.npz"}
    files["pickle"].write_bytes(pickle.dumps(_Trap(tmp_path)))
    np.save(files["object.npy"], objects, allow_pickle=True)
    np.savez(files["object.npz"], X=objects, y=np.array([0, 1]))
    files["text"].write_text("X,y\n1,0\n")
    files["broken.npz"].write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    return files


def _check(text: str, tmp_path) -> None:
    assert "allow_pickle" not in text and "unsafely" not in text, text
    assert "Traceback" not in text
    assert not (tmp_path / _RAN).exists()


@pytest.mark.parametrize("kind", ["pickle", "object.npy", "object.npz", "text", "broken.npz"])
def test_read_arrays_refuses_in_veils_words(bad_files, tmp_path, kind):
    with pytest.raises(DataError, match="is not a test file") as caught:
        read_arrays(bad_files[kind], what="a test file")
    _check(str(caught.value), tmp_path)
    if kind == "pickle":
        assert "pickle, which veil never loads" in str(caught.value)
    if kind.startswith("object"):
        assert "dtype object" in str(caught.value)


def test_read_arrays_reads_npy_npz_and_compressed(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(3.0))
    np.savez_compressed(tmp_path / "b.npz", X=np.eye(2), y=np.array([1, 0]))
    assert list(read_arrays(tmp_path / "a.npy")) == [NPY_ARRAY]
    np.testing.assert_array_equal(read_arrays(tmp_path / "a.npy")[NPY_ARRAY], np.arange(3.0))
    arrays = read_arrays(tmp_path / "b.npz", names=("X", "y"))
    np.testing.assert_array_equal(arrays["X"], np.eye(2))
    with pytest.raises(DataError, match="not an uncompressed"):
        read_arrays(tmp_path / "b.npz", deflated=False)     # a model file's rule
    with pytest.raises(DataError, match="has no array 'z'"):
        read_arrays(tmp_path / "b.npz", names=("X", "z"))
    with zipfile.ZipFile(tmp_path / "c.npz", "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(DataError, match="not an uncompressed .npy"):
        read_arrays(tmp_path / "c.npz")


@pytest.mark.parametrize("kind", ["pickle", "object.npy", "object.npz", "text"])
def test_predict_refuses_a_non_veil_model(bad_files, tmp_path, capsys, kind):
    data = tmp_path / "rows.csv"
    data.write_text("a,b\n1,2\n")
    assert main(["predict", str(bad_files[kind]), str(data)]) == 2
    err = capsys.readouterr().err
    assert "not a veil model file" in err
    _check(err, tmp_path)


@pytest.mark.parametrize("kind", ["pickle", "object.npz", "text", "broken.npz"])
def test_audit_refuses_non_veil_members(bad_files, tmp_path, capsys, kind):
    from veil.learn.linear import LogisticRegression
    from veil.learn.model_format import save_model

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), np.arange(40) % 2
    model = save_model(tmp_path / "model.npz", LogisticRegression().fit(X, y))
    np.savez(tmp_path / "good.npz", X=X, y=y)
    assert main(["audit", "--model", str(model), "--members", str(bad_files[kind]),
                 "--nonmembers", str(tmp_path / "good.npz"), "--out",
                 str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert "--members" in err and "X and y" in err
    _check(err, tmp_path)


@pytest.mark.parametrize("kind", ["pickle", "object.npz", "broken.npz"])
def test_audit_refuses_a_run_whose_scores_are_not_veils(bad_files, tmp_path, capsys, kind):
    from veil.audit import Run, RunRecord, write_run

    scores = {"member_scores": np.arange(5.0), "nonmember_scores": np.arange(5.0) - 1}
    write_run(tmp_path / "run", Run(name="r", kind="other",
                                    records=[RunRecord(label="a", arrays=scores)]))
    (tmp_path / "run" / "a.npz").write_bytes(bad_files[kind].read_bytes())
    assert main(["audit", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "scores file" in err
    _check(err, tmp_path)


@pytest.mark.parametrize("kind", ["pickle", "object.npy", "object.npz"])
def test_mpc_data_refuses_non_veil_arrays(bad_files, tmp_path, kind):
    from veil.cli.mpc import load_data

    target = tmp_path / "x.npy"
    target.write_bytes(bad_files[kind].read_bytes())
    with pytest.raises(DataError, match="--data") as caught:
        load_data([f"X={target}"])
    _check(str(caught.value), tmp_path)
