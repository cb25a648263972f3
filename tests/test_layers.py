"""The layering of the package, enforced: a module imports only its own package and lower layers.

``LAYERS`` is the one place the order is written (README, "Architecture"). Each entry is a
layer, lowest first; within a layer the packages are independent of each other (``dp`` knows
nothing of ``crypto``, ``learn`` nothing of ``anon``). A module belongs to the longest package
prefix listed (``veil.learn.private`` and ``veil.learn.dpsgd`` sit above ``veil.learn``:
they compose the clear models with ``dp``). ``import veil`` (the version) is allowed
anywhere. Every import counts, at module level or inside a function, ``TYPE_CHECKING`` blocks
included, so a lazy import cannot hide a dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: the modules of veil.fl that everything in fl builds on; they may use each other
FL_CORE = ("veil.fl.messages", "veil.fl.protocol", "veil.fl.trainer", "veil.fl.history",
           "veil.fl.party_ledger", "veil.fl.checkpoint", "veil.fl.canary")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("veil.errors", "veil.random", "veil._validation", "veil._json", "veil._codec",
     "veil._io", "veil._arrays", "veil._plotting", "veil._native", "veil._lazy",
     "veil._optional"),  # foundation
    # data, and links between hosts (TLS, framing): below crypto, mpc and fl, which move bytes
    ("veil.datasets", "veil.net"),                                      # data, transport
    ("veil.learn", "veil.anon"),                                        # models in the clear
    ("veil.dp", "veil.crypto"),                                         # primitives
    # composed protections, and what leaks (the attacks and bounds of audit need only dp)
    ("veil.learn.dpsgd", "veil.mpc", "veil.he", "veil.anon.safepub", "veil.audit"),
    ("veil.learn.private",),                                            # private models
    # fl, inside: a lower row never imports a higher one (issue 31)
    FL_CORE,                       # fl core: messages, stage machines, trainer, ledgers, files
    ("veil.fl.secagg", "veil.fl.hybrid", "veil.fl.vertical"),           # sans-I/O protocols
    ("veil.fl.strategies",),                       # what to send, how to aggregate (+ plans)
    ("veil.fl.runtime",),                          # how messages move: local, workers, Flower
    # Federation (a strategy run by a runtime) and the package's face (its __init__); a
    # module of fl not listed above lands here, the top of fl, where nothing in fl sees it
    ("veil.fl",),
    # the conformance tester's release paths exercise every protection, fl's included
    ("veil.audit.conformance",),
    ("veil.synth",),                  # DP synthetic data, audited by veil.audit (+ conformance)
    ("veil.experiments",),                                              # applications
    ("veil.cli",),                                                      # the command
)
FOUNDATION = 0
#: rows whose modules may use each other: the foundation (errors <- random <- validation)
#: and fl's core (messages <- protocol <- canary)
SHARED = {FOUNDATION, LAYERS.index(FL_CORE)}


def _component(module: str) -> tuple[int, str] | None:
    """(layer, package) of ``module``: the longest prefix listed in LAYERS."""
    best: tuple[int, str] | None = None
    for level, packages in enumerate(LAYERS):
        for pkg in packages:
            if (module == pkg or module.startswith(pkg + ".")) and (
                    best is None or len(pkg) > len(best[1])):
                best = (level, pkg)
    return best


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every veil import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # `from veil.x import y` may name a submodule y: check the most specific one
            found += [(node.lineno, f"{target}.{a.name}" if _component(f"{target}.{a.name}")
                       != _component(target) and a.name != "*" else target)
                      for a in node.names]
    return [(line, name) for line, name in found if name == "veil" or name.startswith("veil.")]


def _modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted((SRC / "veil").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out.append((path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts)))
    return out


def forbidden(path: Path, module: str) -> list[str]:
    """Every import of ``module`` (source ``path``) that goes up a layer or to a sibling."""
    own = _component(module)
    bad = []
    for line, name in _imports(path, module) + _loaded(path, module):
        other = _component(name)
        if name == "veil" or other is not None and (other[1] == own[1] or other[0] < own[0]
                                  or other[0] == own[0] in SHARED):
            continue
        why = ("not in LAYERS" if other is None else
               f"a higher layer: {other[1]}" if other[0] > own[0] else
               f"a sibling package: {other[1]}")
        bad.append(f"{module}:{line} ({own[1]}) imports {name} ({why})")
    return bad


def test_every_module_is_in_a_layer():
    missing = [m for _, m in _modules() if m != "veil" and _component(m) is None]
    assert not missing, f"modules outside LAYERS: {missing}"


def test_no_module_imports_a_higher_layer_or_a_sibling():
    bad = [v for path, module in _modules() if module != "veil"   # veil/__init__: the version
           for v in forbidden(path, module)]
    assert not bad, "forbidden imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, module, expected", [
    ("from veil.audit.conformance import register\n", "veil.fl.canary", "a higher layer"),
    ("from veil.audit import auc\n", "veil.learn.dpsgd", "a sibling package"),
    ("from veil.datasets import load\n", "veil.net.tls", "a sibling package"),
    ("import veil.fl.protocol\n", "veil.crypto.psi", "a higher layer"),
    ("def f():\n    from veil.crypto import paillier\n", "veil.dp.stats", "a sibling package"),
    ("from ..crypto.encoding import FixedPoint\n", "veil.learn.queries", "a higher layer"),
    ("from veil.dp import Ledger\n", "veil.learn.linear", "a higher layer"),
    ("from veil.learn import private\n", "veil.learn.tree", "a higher layer"),
    # fl's inside order: core < sans-I/O protocols < strategies < runtime < fl (Federation)
    ("from veil.fl.strategies import FedAvg\n", "veil.fl.vertical.transfer", "a higher layer"),
    ("from veil.fl import Federation\n", "veil.fl.vertical.transfer", "a higher layer"),
    ("from veil.fl.runtime import LocalRuntime\n", "veil.fl.hybrid.run", "a higher layer"),
    ("from veil.fl.strategies.secagg import SecAgg\n", "veil.fl.secagg.protocol",
     "a higher layer"),
    ("from veil.fl.secagg.masks import agree\n", "veil.fl.vertical.parties",
     "a sibling package"),
    ("from veil.fl.runtime.flower import simulate\n", "veil.fl.strategies.dp",
     "a higher layer"),
    # a listed loader's strings are its imports
    ("import importlib\nimportlib.import_module('veil.cli.fl')\n", "veil.learn.dpsgd",
     "a higher layer"),
])
def test_a_forbidden_import_is_found(tmp_path, source, module, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    bad = forbidden(path, module)
    assert len(bad) == 1 and expected in bad[0]


@pytest.mark.parametrize("source, module", [
    ("from veil.dp.ledger import Ledger\n", "veil.learn.private.kmeans"),
    ("from veil.learn.base import GradientClassifier\n", "veil.fl.trainer"),
    ("from . import tensor\n", "veil.mpc.session"),
    ("from veil.errors import DataError\n", "veil.random"),
    ("from veil.fl.messages import encode\n", "veil.fl.protocol"),     # fl's core
    ("from veil.fl.vertical.parties import train\n", "veil.fl.runtime.flower_vertical"),
    ("from veil.fl.protocol import Runtime\n", "veil.fl.hybrid.run"),
    ("from veil.fl.runtime import LocalRuntime\n", "veil.fl.federation"),
    ("from veil.dp import Ledger\n", "veil.audit.report"),
    ("from veil.fl import Federation\n", "veil.audit.conformance.paths_fl"),
    ("from veil.audit import make_canaries\n", "veil.fl.canary"),
])
def test_an_allowed_import_passes(tmp_path, source, module):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert forbidden(path, module) == []


def _resolve(nodes, module: str, path: Path) -> set[str]:
    """The veil modules the import statements among ``nodes`` name, each resolved to the
    most specific module that exists."""
    known = {m for _, m in _modules()}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = (package.rsplit(".", node.level - 1)[0] if node.level else "")
            target = ".".join(x for x in (base, node.module) if x)
            found |= {f"{target}.{a.name}" if f"{target}.{a.name}" in known else target
                      for a in node.names}
    return {m for m in found if m in known and m != module}


def _runtime_imports(path: Path, module: str) -> set[str]:
    """The veil modules ``module`` imports at run time (at load or in a function; not under
    ``if TYPE_CHECKING``)."""
    return _resolve(_walk_runtime(ast.parse(path.read_text())), module, path)


def _type_only_imports(path: Path, module: str) -> set[str]:
    """The veil modules ``module`` imports under ``if TYPE_CHECKING`` (for annotations)."""
    blocks = [n for n in ast.walk(ast.parse(path.read_text()))
              if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    return _resolve([n for b in blocks for s in b.body for n in ast.walk(s)], module, path)


def _walk_runtime(node: ast.AST):
    """ast.walk without the bodies of ``if TYPE_CHECKING:`` (annotations only)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from (n for orelse in child.orelse for n in _walk_runtime(orelse))
            continue
        yield from _walk_runtime(child)


#: cycles kept on purpose, with the reason
ALLOWED_CYCLES = {
    # SharedTensor.sigmoid() / .max() delegate to the protocols built on SharedTensor, so a
    # secret-shared value behaves like a number (MPyC's convention); imported on first call
    ("veil.mpc.tensor", "veil.mpc.protocols"),
}


def test_no_import_cycles():
    """Not even through an import inside a function: a cycle is a layering smell."""
    graph = {m: _runtime_imports(p, m) for p, m in _modules()}
    for a, b in ALLOWED_CYCLES:
        graph[a].discard(b)
    state: dict[str, int] = {}   # 1: on the stack, 2: done
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [m, n]) if n in stack
                              else f"{m} -> {n}")
            elif n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


#: cycles closed only by an import under ``if TYPE_CHECKING`` (an annotation), with the
#: reason: a listed one is known and kept; a new one fails until it is fixed or listed
TYPE_ONLY_CYCLES = {
    ("veil.crypto.paillier.ciphertexts", "veil.crypto.paillier.keys"):
        "ciphertexts name their PublicKey (annotations); keys make ciphertexts",
    ("veil.crypto.paillier.ciphertexts", "veil.crypto.paillier.pool"):
        "rerandomizing may draw from a NoisePool (annotation); the pool holds keys",
    ("veil.crypto.paillier.keys", "veil.crypto.paillier.pool"):
        "encryption may draw its noise from a NoisePool (annotation); the pool holds keys",
}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for n in graph[todo.pop()]:
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return False


def test_type_only_cycles_are_listed():
    """An import under ``if TYPE_CHECKING`` that closes a cycle (the SecAgg+ round once typed
    its planner, the strategy above it, this way) is reported unless TYPE_ONLY_CYCLES gives
    its reason; a listed cycle that no longer exists is reported too."""
    modules = _modules()
    typed = {m: _type_only_imports(p, m) for p, m in modules}
    graph = {m: _runtime_imports(p, m) | typed[m] for p, m in modules}
    found = {(a, b) for a in typed for b in typed[a] if _reaches(graph, b, a)}
    assert sorted(found - set(TYPE_ONLY_CYCLES)) == [], "unlisted type-only cycles"
    assert sorted(set(TYPE_ONLY_CYCLES) - found) == [], "listed cycles that are gone"


def _loads(path: Path) -> list[int]:
    """The lines where ``path`` imports a module by name at run time
    (``importlib.import_module``, ``__import__``)."""
    return [n.lineno for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == "import_module"
                                            or getattr(n.func, "id", None) in (
                                                "import_module", "__import__"))]


#: modules that import by name at run time, with the reason; the layering test reads
#: every string in them that names a veil module as an import of it
LOADERS = {
    "veil.cli.main": "each sub-command's module (veil.cli.<name>) loads when it runs, so "
                     "`veil --help` imports none of them",
    "veil.learn.dpsgd": "its public names load their torch modules on first use (_EXPORTS)",
    "veil._lazy": "a package's lazy exports (PEP 562) import the modules its "
                  "'if TYPE_CHECKING:' block names, on first use",
    "veil._optional": "imports the optional third-party package (torch, tenseal, pyspark) "
                      "its caller names, so a missing extra gets one message",
    "veil.audit.conformance.tester": "imports every veil module to find every Mechanism "
                                     "subclass (the conformance registry's completeness)",
}


def test_every_loader_is_listed():
    """A loader hides its imports from ast: each one is listed with its reason."""
    found = {m for p, m in _modules() if _loads(p)}
    assert sorted(found - set(LOADERS)) == [], "unlisted importlib loaders"
    assert sorted(set(LOADERS) - found) == [], "listed loaders that load nothing"


def _loaded(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, module) of every string in a listed loader that names a veil module."""
    if module not in LOADERS:
        return []
    known = {m for _, m in _modules()}
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and n.value in known]


def _top(module: str) -> str:
    """The top-level package of a veil module (``veil.fl.secagg.protocol`` -> ``fl``)."""
    return module.split(".")[1] if module.count(".") else ""


def private_crossings(path: Path, module: str) -> list[str]:
    """Every name or module imported by ``module`` from another top-level package whose own
    name is private (``_frame``, ``veil.crypto._fastexp``): a package's private parts are
    its own. The foundation's modules (``veil._codec``) are private to veil, not to a
    package: anyone may import them."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        target = (f"{base}.{node.module}" if node.module else base) if node.level else (
            node.module or "")
        if not target.startswith("veil.") or _top(target).startswith("_") or \
                _top(target) == _top(module):
            continue
        for alias in node.names:
            private = [p for p in [*target.split(".")[2:], alias.name]
                       if p.startswith("_") and not p.startswith("__")]
            if private:
                bad.append(f"{module}:{node.lineno} imports {alias.name} from {target}")
    return bad


def test_no_private_name_crosses_a_top_level_package():
    bad = [v for path, module in _modules() for v in private_crossings(path, module)]
    assert not bad, "private names used outside their package:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, module, found", [
    ("from veil.crypto.serialization import _frame\n", "veil.he.ckks", True),
    ("from veil.crypto._fastexp import multi_pow\n", "veil.fl.vertical.paillier_lr", True),
    ("from veil.fl.vertical.run import _read\n", "veil.experiments.app", True),
    ("from veil.crypto._primes import x\n", "veil.crypto.dkg", False),
    ("from veil._codec import Format\n", "veil.he.ckks", False),
    ("from .._io import write\n", "veil.fl.checkpoint", False),
])
def test_a_private_crossing_is_found(tmp_path, source, module, found):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert bool(private_crossings(path, module)) is found


def _readme_diagram() -> tuple[list[str], str]:
    """The README's architecture diagram: its layer labels top to bottom (the left column)
    and the foundation's text."""
    text = (SRC.parent / "README.md").read_text()
    block = text.split("## Architecture", 1)[1].split("```", 2)[1]
    labels, foundation = [], ""
    for line in block.splitlines()[1:]:
        if line and not line[0].isspace() and line[0] != "|":
            labels.append(line.split("  ", 1)[0].strip())
        if labels and labels[-1] == "foundation":
            foundation += line + "\n"
    return labels, foundation


def test_the_readme_diagram_is_layers():
    """The README's diagram drew a hand copy of LAYERS that drifted (no ``he``; a foundation
    without ``_plotting``, ``model_format``, ``_native``)."""
    labels, foundation = _readme_diagram()
    expected = [", ".join(p.removeprefix("veil.") for p in layer)
                for layer in reversed(LAYERS[FOUNDATION + 1:])] + ["foundation"]
    assert labels == expected
    missing = [m for m in LAYERS[FOUNDATION] if not re.search(
        rf"(?<![\w.]){re.escape(m.removeprefix('veil.'))}\b", foundation)]
    assert not missing, f"the README's foundation does not list {missing}"
