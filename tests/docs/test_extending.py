"""The "How to extend veil" page (docs/extending.md) names files and registries that exist:
each recipe is one file to add plus one registration, and a renamed file or registry would
leave the page pointing nowhere. Its ```python blocks run in tests/docs/test_docs_code.py;
the ```py ones (registrations a reader makes in their own module) are checked here."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"


def _blocks() -> list[str]:
    return re.findall(r"^```py(?:thon)?\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def test_the_page_has_its_three_recipes():
    headings = re.findall(r"^## (.+)$", PAGE.read_text(), re.M)
    assert headings == ["A federated strategy", "A release path (a DP mechanism)",
                        "A wire format"]
    assert "extending.md" in (ROOT / "mkdocs.yml").read_text()


def test_every_file_it_names_exists():
    named = set(re.findall(r"`((?:src|tests)/[\w/.]+\.py)`", PAGE.read_text()))
    assert len(named) >= 8
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_every_name_its_code_imports_exists():
    missing = []
    for code in _blocks():
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("veil"):
                module = importlib.import_module(node.module)
                missing += [f"{node.module}.{a.name}" for a in node.names
                            if not hasattr(module, a.name)]
    assert missing == []


def test_the_registrations_it_names_exist():
    """The registrations the recipes name: the strategies' face, the conformance registry
    (and the case module it points to), a format's tag registry."""
    from veil._codec import Format
    from veil.audit.conformance import paths_dp, registry
    from veil.fl import strategies

    assert "FedAvg" in strategies.__all__ and callable(registry.register)
    assert paths_dp.register is registry.register and callable(Format.tag)
