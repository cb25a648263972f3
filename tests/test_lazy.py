"""veil._lazy: a package's exports are imported on first use, and are the same objects as
the imports its ``if TYPE_CHECKING:`` block names (issue 30, start-up)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from veil._lazy import _type_checking_imports

SRC = Path(__file__).resolve().parents[1] / "src"

#: every package whose __init__ exports lazily
LAZY = sorted(".".join(p.parent.relative_to(SRC).parts) for p in (SRC / "veil").rglob("__init__.py")
              if "lazy_exports(__name__, __all__)" in p.read_text())


def test_the_start_up_packages_export_lazily():
    assert {"veil.crypto", "veil.dp", "veil.dp.accounting", "veil.experiments", "veil.fl",
            "veil.fl.hybrid", "veil.fl.strategies"} <= set(LAZY)


@pytest.mark.parametrize("name", LAZY)
def test_every_export_is_the_object_its_import_names(name):
    package = importlib.import_module(name)
    sources = _type_checking_imports(name, package.__file__)
    assert set(package.__all__) == set(sources), "__all__ and the TYPE_CHECKING imports differ"
    assert set(package.__all__) <= set(dir(package))
    for export in package.__all__:
        source, attribute = sources[export]
        expected = importlib.import_module(source)
        if attribute is not None:
            expected = getattr(expected, attribute)
        assert getattr(package, export) is expected, export
    star: dict = {}
    exec(f"from {name} import *", star)  # noqa: S102 - the names `import *` binds
    assert set(star) - {"__builtins__"} == set(package.__all__)


def _package(tmp_path: Path, init: str, **modules: str) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent(init))
    for module, text in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(text))
    return tmp_path


def _run(path: Path, code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=path,
                          capture_output=True, text=True,
                          env={"PYTHONPATH": f"{path}:{SRC}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


INIT = """
    from typing import TYPE_CHECKING

    from veil._lazy import lazy_exports

    if TYPE_CHECKING:
        from pkg import heavy
        from pkg.heavy import Big, make as build
        from .light import small

    __all__ = ["Big", "build", "heavy", "small"]

    __getattr__, __dir__ = lazy_exports(__name__, __all__)
"""


def test_a_submodule_is_imported_on_first_use_and_cached(tmp_path):
    path = _package(tmp_path, INIT, heavy="""
        import sys
        sys.modules.setdefault("loads", []).append("heavy")
        class Big: ...
        def make(): return Big()
    """, light="small = 3\n")
    out = _run(path, """
        import sys
        import pkg
        print("pkg.heavy" in sys.modules, sorted(set(pkg.__all__) - set(vars(pkg))),
              set(pkg.__all__) <= set(dir(pkg)))
        from pkg import Big, build, small
        print(build().__class__ is Big, small, pkg.heavy.Big is Big, sys.modules["loads"])
        print("Big" in vars(pkg), "Big" in dir(pkg))
    """)
    assert out.splitlines() == [
        "False ['Big', 'build', 'heavy', 'small'] True",
        "True 3 True ['heavy']",    # imported once, on first use
        "True True",
    ]


def test_an_unknown_name_is_an_attribute_error_and_a_submodule_is_found(tmp_path):
    path = _package(tmp_path, INIT, heavy="class Big: ...\nmake = Big\n", light="small = 3\n")
    out = _run(path, """
        import pkg
        try:
            pkg.missing
        except AttributeError as exc:
            print(exc)
        print(hasattr(pkg, "Big"), hasattr(pkg, "nothing"), pkg.light.small)
    """)
    # a submodule not exported is still an attribute, imported on first access
    assert out.splitlines() == ["module 'pkg' has no attribute 'missing'", "True False 3"]


def test_an_export_its_block_does_not_import_is_an_import_error(tmp_path):
    path = _package(tmp_path, INIT.replace('"small"]', '"small", "stray"]'),
                    heavy="class Big: ...\nmake = Big\n", light="small = 3\n")
    out = _run(path, """
        import pkg
        try:
            pkg.stray
        except ImportError as exc:
            print(exc)
    """)
    assert "lists 'stray', which its 'if TYPE_CHECKING:' block does not import" in out


def test_a_name_its_module_shares_stays_the_exported_object(tmp_path):
    """``from veil.fl.vertical import align`` is the function, even after ``import
    veil.fl.vertical.align`` (which binds the module as the package's attribute ``align``:
    the lazy export had left the module there)."""
    init = INIT.replace("from .light import small", "from .light import light").replace(
        '"small"]', '"light"]')
    path = _package(tmp_path, init, heavy="class Big: ...\nmake = Big\n",
                    light="def light(): return 3\n")
    out = _run(path, """
        import pkg.light
        import pkg
        print(pkg.light(), callable(pkg.light))
    """)
    assert out.splitlines() == ["3 True"]
