"""Optional dependencies (the extras of ``pyproject.toml``), imported where they are used.

A module that needs one calls :func:`require` when it first needs it, so importing the
module costs nothing and a missing package is one :class:`~veil.errors.MissingDependencyError`
with one message: what needs it and the ``pip install`` command of its extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from veil.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module`` (e.g. ``"torch"``, ``"tenseal.sealapi"``) imported; if it is not
    installed, MissingDependencyError saying that ``what`` needs it and how to install the
    extra ``extra`` (``pip install 'veil[extra]'``)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{what} needs {module.partition('.')[0]}, which is not installed: "
            f"pip install 'veil[{extra}]'") from None
