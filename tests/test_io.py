"""Atomic writes: the target holds the old content or the new, never a part."""

from __future__ import annotations

import pytest

from veil._io import atomic_open, atomic_write


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "run.json"
    atomic_write(target, "old")
    atomic_write(target, b"new bytes")
    assert target.read_bytes() == b"new bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_an_error_while_writing_keeps_the_old_file(tmp_path):
    target = tmp_path / "results.json"
    atomic_write(target, "complete")
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as fh:
            fh.write("half of the new con")
            raise RuntimeError("crash")
    assert target.read_text() == "complete"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]
    with pytest.raises(ValueError, match="whole files"):
        with atomic_open(target, "a"):
            pass
