"""Lazy exports for a package's ``__init__`` (PEP 562): a name is imported on first use.

Python runs ``package/__init__.py`` before any of its submodules, so a package that
re-exports names from all its submodules makes ``import package.small`` pay for every one of
them (and for what they import: scipy, scikit-learn, pandas, dp_accounting). Flower starts a
fresh process for each message a ClientApp handles, so this is paid on every message.

A package keeps its re-exports as ordinary imports, in one ``if TYPE_CHECKING:`` block (what
readers, linters, type checkers and the API reference see), and its literal ``__all__``::

    if TYPE_CHECKING:
        from veil.dp import stats
        from veil.dp.ledger import Ledger

    __all__ = ["Ledger", "stats"]
    __getattr__, __dir__ = lazy_exports(__name__, __all__)

On first access to an exported name, :func:`lazy_exports` reads that block (once), imports
the submodule the name comes from, and stores the value in the package, so later accesses
are plain attribute lookups. ``from package import Name``, ``package.Name``, ``import *``
and ``dir(package)`` behave as with eager imports, and so does ``package.submodule`` (which
the eager imports used to leave behind): it is imported on first access.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports"]


def _type_checking_imports(package: str, path: str) -> dict[str, tuple[str, str | None]]:
    """{exported name: (module, attribute or None for the module itself)} from the
    ``from ... import ...`` statements in the ``if TYPE_CHECKING:`` blocks of ``path``."""
    found: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(Path(path).read_text(encoding="utf-8"), path).body:
        if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom):
                raise ImportError(f"{path}: lazy exports are 'from ... import ...' statements, "
                                  f"not {ast.unparse(stmt)!r}")
            source = stmt.module or ""
            if stmt.level:
                base = package.rsplit(".", stmt.level - 1)[0]
                source = f"{base}.{source}" if source else base
            for alias in stmt.names:
                # `from package import sub` names a submodule: import it, never getattr(package)
                found[alias.asname or alias.name] = ((f"{source}.{alias.name}", None)
                                                     if source == package else
                                                     (source, alias.name))
    return found


def lazy_exports(package: str, exports: Iterable[str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), which exports
    ``exports`` (its ``__all__``) from the imports of its ``if TYPE_CHECKING:`` block."""
    module = sys.modules[package]
    names = frozenset(exports)
    sources: dict[str, tuple[str, str | None]] = {}

    def __getattr__(name: str) -> Any:
        if name not in names:
            if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}"):
                # `import veil.fl; veil.fl.strategies`: a submodule, as eager imports left it
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if not sources:
            sources.update(_type_checking_imports(package, module.__file__))
        if name not in sources:
            raise ImportError(f"{package}.__all__ lists {name!r}, which its "
                              "'if TYPE_CHECKING:' block does not import")
        source, attribute = sources[name]
        value = importlib.import_module(source)
        if attribute is not None:
            value = getattr(value, attribute)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(names.union(vars(module)))

    # a name its module shares (veil.fl.vertical.align's function align) is bound now:
    # importing that module later would bind the module in its place, unasked
    sources.update(_type_checking_imports(package, module.__file__))
    for name, (source, attribute) in sources.items():
        if attribute is not None and source == f"{package}.{name}":
            __getattr__(name)
    return __getattr__, __dir__
