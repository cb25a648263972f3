"""The black-box tester: does a release path keep its certificate on neighbouring inputs?

**Privacy test.** For each neighbouring pair (D, D') of a case, the path runs ``n`` times on
each side; each output is reduced to a scalar s. For any threshold t, the events
``{s >= t}`` and ``{s < t}`` obey the (epsilon, delta)-DP inequalities
``P[M(D) in S] <= e^eps P[M(D') in S] + delta`` in both directions, so with exact
Clopper-Pearson bounds on the two rates :func:`veil.audit.epsilon_lower_bound` gives a
lower bound on the true epsilon at the certified delta that holds with probability at least
its confidence (the threshold is fixed in advance for a 0/1 event, else chosen on one half
of the trials and certified on the other: a binned hockey-stick test with one bin edge;
Jagielski, Ullman & Oprea 2020; Ding et al. 2018, StatDP; Google's DP-Auditorium runs the
same kind of property test on neighbouring datasets). Both orientations (D as "member",
then D') are tested, and every pair of a case, with a Bonferroni split of
``1 - confidence`` over the 2 x pairs tests, so a correct path fails a whole case with
probability at most ``1 - confidence``. The case
*fails* when a lower bound exceeds the certified epsilon. A bound can never exceed what a
perfect attack would show with ``n`` trials (``max_certifiable``): few trials catch gross
violations only, ``deep`` runs more.

**Structure test.** Nothing about an output's structure may come from private data:
``case.structure(output)`` (shapes, keys, column names, lengths that DP did not select)
must be the same for every output on both sides of every pair. One differing output is a
certain leak (an unbounded privacy loss), whatever the noise.

**Completeness.** :func:`release_sites` walks veil's source for every function that charges
a ledger (a call to ``.release(``, ``.charge(``, ``.longest_plan(``, or ``.plan(`` on a
ledger) and :func:`mechanism_classes` imports veil for every concrete
:class:`~veil.dp.mechanism.Mechanism`; :func:`uncovered` lists those no case covers.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import logging
import pkgutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veil._validation import check_int, check_probability
from veil.audit.conformance.registry import Case, Pair, cases
from veil.audit.epsilon import epsilon_lower_bound
from veil.errors import DataError
from veil.random import check_rng

__all__ = ["PairResult", "Verdict", "audit", "audit_pair", "release_sites",
           "mechanism_classes", "uncovered"]

#: the deep tier runs this many times the fast tier's trials
DEEP = 8


@dataclass(frozen=True)
class PairResult:
    """The tester's finding on one neighbouring pair."""

    pair: str
    lower_bound: float          #: epsilon >= this, at the certified delta, w.p. confidence
    max_certifiable: float      #: the most these trials could ever show
    trials: int                 #: runs per side
    structure_ok: bool
    structure_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    """A case's result over all its pairs."""

    name: str
    relation: str
    epsilon: float
    delta: float
    confidence: float
    pairs: list[PairResult] = field(default_factory=list)
    skipped: str | None = None

    @property
    def lower_bound(self) -> float:
        return max((p.lower_bound for p in self.pairs), default=0.0)

    @property
    def passed(self) -> bool:
        return self.skipped is not None or all(
            p.structure_ok and p.lower_bound <= self.epsilon * (1 + 1e-9) for p in self.pairs)

    @property
    def verdict(self) -> str:
        if self.skipped is not None:
            return "skipped"
        if self.passed:
            return "pass"
        return "FAIL"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "relation": self.relation, "epsilon": self.epsilon,
                "delta": self.delta, "confidence": self.confidence,
                "lower_bound": self.lower_bound, "verdict": self.verdict,
                "skipped": self.skipped, "pairs": [p.to_dict() for p in self.pairs]}


@contextlib.contextmanager
def _curator_warnings_off() -> Iterator[None]:
    """Hold veil's loggers at ERROR while a case runs: the adversarial inputs exist to
    trigger the curator's warnings (values clipped into their bounds, rows dropped by
    contribution bounding), and hundreds of trials would print each one hundreds of times,
    burying the verdicts."""
    veil_logger = logging.getLogger("veil")
    level = veil_logger.level
    veil_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        veil_logger.setLevel(level)


def _scores(case: Case, data: Any, n: int, rng: Any) -> tuple[np.ndarray, list[Any]]:
    outs = [case.run(data, rng) for _ in range(n)]
    scores = np.array([float(case.reduce(o)) for o in outs], dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        raise DataError(f"case {case.name!r}: reduce() gave a non-finite score")
    return scores, [case.structure(o) for o in outs]


def _bound(a: np.ndarray, b: np.ndarray, delta: float, confidence: float,
           threshold: float | None, rng: Any) -> tuple[float, float]:
    """(lower bound, max certifiable) for one orientation; (0, 0) with too few trials."""
    try:
        found = epsilon_lower_bound(a, b, delta=delta, confidence=confidence, rng=rng,
                                    threshold="split" if threshold is None else threshold)
    except DataError:
        return 0.0, 0.0
    return found.epsilon, found.max_certifiable


def audit_pair(case: Case, pair: Pair, *, trials: int | None = None,
               confidence: float = 0.99, tests: int = 1, rng: Any = None) -> PairResult:
    """Run ``case`` on both sides of ``pair`` and bound epsilon (the module docstring).

    ``tests``: how many pairs share ``1 - confidence`` (Bonferroni); ``rng``: the generator
    the releases and the threshold split draw from (None: the CSPRNG).
    """
    n = case.trials if trials is None else check_int(trials, "trials", low=2)
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    tests = check_int(tests, "tests", low=1)
    each = 1.0 - (1.0 - c) / (2 * tests)
    generator = check_rng(rng)
    left, left_shape = _scores(case, pair.left, n, generator)
    right, right_shape = _scores(case, pair.right, n, generator)
    shapes = left_shape + right_shape
    odd = next((s for s in shapes if s != shapes[0]), None)
    ok = odd is None
    note = "" if ok else f"{shapes[0]!r} != {odd!r}"
    forward = _bound(left, right, case.delta, each, case.threshold, generator)
    backward = _bound(right, left, case.delta, each, case.threshold, generator)
    return PairResult(pair.name, max(forward[0], backward[0]), max(forward[1], backward[1]),
                      n, ok, note[:300])


def audit(case: Case, *, deep: bool = False, confidence: float = 0.99,
          rng: Any = None) -> Verdict:
    """All pairs of ``case`` (``deep``: :data:`DEEP` times more trials); a case whose
    optional dependency is missing is skipped, with the reason."""
    missing = case.available()
    if missing is not None:
        return Verdict(case.name, case.relation, case.epsilon, case.delta, confidence,
                       skipped=missing)
    pairs = list(case.pairs())
    n = case.trials * (DEEP if deep else 1)
    with _curator_warnings_off():
        found = [audit_pair(case, p, trials=n, confidence=confidence, tests=len(pairs),
                            rng=rng) for p in pairs]
    return Verdict(case.name, case.relation, case.epsilon, case.delta, confidence, found)


# -- completeness -----------------------------------------------------------------------
_SRC = Path(__file__).resolve().parents[2]        # .../src/veil
_CHARGING = {"release", "charge", "longest_plan"}
#: the ledger itself, and this suite
_EXEMPT = ("veil.dp.ledger", "veil.audit.conformance")


def _is_release(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _CHARGING:   # a lock's or semaphore's release() takes no argument
        return bool(call.args or call.keywords) or func.attr != "release"
    return func.attr == "plan" and "ledger" in ast.unparse(func.value).lower()


def release_sites(root: Path = _SRC) -> set[str]:
    """``module:qualname`` of every function in veil that charges a ledger."""
    found: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if module.startswith(_EXEMPT):
            continue

        def walk(node: ast.AST, scope: list[str], module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(child, [*scope, child.name])
                    continue
                if isinstance(child, ast.Call) and _is_release(child) and scope:
                    found.add(f"{module}:{'.'.join(scope)}")
                walk(child, scope)

        walk(ast.parse(path.read_text(), str(path)), [])
    return found


def mechanism_classes() -> set[str]:
    """``module:qualname`` of every concrete Mechanism subclass in veil's modules."""
    import veil
    from veil.dp.mechanism import Mechanism

    for info in pkgutil.walk_packages(veil.__path__, "veil."):
        if not info.name.startswith(_EXEMPT):
            try:
                importlib.import_module(info.name)
            except ImportError:  # an optional dependency is missing: its paths skip too
                continue
    found, todo = set(), [Mechanism]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if not inspect.isabstract(sub) and sub.__module__.startswith("veil."):
                found.add(f"{sub.__module__}:{sub.__qualname__}")
    return found


def uncovered() -> list[str]:
    """Release sites and Mechanism classes that no registered case covers."""
    covered = {c for case in cases() for c in case.covers}
    return sorted((release_sites() | mechanism_classes()) - covered)

