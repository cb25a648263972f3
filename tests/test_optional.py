"""veil._optional: one helper, one message for every optional dependency (issue #31: five
lazy torch loaders had five messages)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from veil._optional import require
from veil.errors import MissingDependencyError

SRC = Path(__file__).resolve().parents[1] / "src" / "veil"


def test_a_missing_package_names_what_needs_it_and_its_extra(monkeypatch):
    for name in ("tenseal", "tenseal.sealapi"):   # `import` fails, even if loaded before
        monkeypatch.setitem(__import__("sys").modules, name, None)
    with pytest.raises(MissingDependencyError) as info:
        require("tenseal.sealapi", "fhe", "CKKS")
    assert str(info.value) == ("CKKS needs tenseal, which is not installed: "
                               "pip install 'veil[fhe]'")


def test_an_installed_package_is_returned():
    import numpy.linalg

    assert require("numpy.linalg", "core", "this test") is numpy.linalg


def test_no_module_writes_its_own_missing_dependency_message():
    """Every MissingDependencyError for a package comes from require (Spark's Java, a
    system program, is the one other)."""
    raised = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None and \
                    "MissingDependencyError" in ast.unparse(node.exc) and \
                    "pip install" in ast.unparse(node.exc):
                raised.append(str(path.relative_to(SRC)))
    assert raised == ["_optional.py"]
