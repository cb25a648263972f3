"""The registry of release paths: one :func:`register` call per path, duplicates refused.

A *case* is everything the black-box tester (:mod:`~veil.audit.conformance.tester`) needs to
check one public release path against its certificate:

* ``relation``: the neighbour relation the certificate names (:data:`ADD_REMOVE`,
  :data:`REPLACE`, ...): the pairs must be neighbours under it;
* ``epsilon``, ``delta``: the certificate of one run of the path;
* ``run(data, rng)``: the release through the public API, charging a throwaway
  :class:`~veil.dp.Ledger` where the path charges one; ``rng`` is the generator the tester
  passes (seeded in the test suite, secure from the command line);
* ``pairs()``: named neighbouring datasets (:class:`Pair`), adversarial ones included;
* ``reduce(output)``: the scalar (or 0/1 event) of an output that the tester compares;
  ``threshold``: for a 0/1 event, the threshold fixed in advance (0.5), so that every trial
  certifies (None: the tester picks one on half of the trials);
* ``structure(output)``: what must be identical between neighbours (shapes, keys, column
  names, lengths: everything not chosen by DP); None where every part is DP-selected;
* ``fast``: False for a path too slow for ``make test`` (seconds per release): it runs in
  the deep tier and from the command line only;
* ``covers``: the code the case exercises (``module:qualname`` of the functions that charge
  a ledger, of the Mechanism classes): the completeness test asks that every release site
  of veil is covered by some case.

Registration is "open doors, checked at the door" (DESIGN.md): a new path is one call, in
the module that knows it, and a name registered twice is a ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from veil._validation import check_delta, check_epsilon, check_int
from veil.errors import ConfigError

__all__ = ["ADD_REMOVE", "REPLACE", "ADD_REMOVE_CLIENT", "REPLACE_CLIENT", "Case", "Pair",
           "register", "cases", "case"]

#: one privacy unit (record, person, label) added or removed
ADD_REMOVE = "add/remove one unit"
#: one privacy unit's data replaced by anything (the dataset size is public)
REPLACE = "replace one unit"
#: one client's whole contribution added or removed (central DP of a federation)
ADD_REMOVE_CLIENT = "add/remove one client"
#: one client's data replaced by anything (local DP: what the server sees of one client)
REPLACE_CLIENT = "replace one client's data"


@dataclass(frozen=True)
class Pair:
    """Two neighbouring inputs."""

    name: str
    left: Any
    right: Any


def _no_structure(output: Any) -> None:
    return None


@dataclass(frozen=True)
class Case:
    """One registered release path (see the module docstring)."""

    name: str
    relation: str
    epsilon: float
    delta: float
    run: Callable[[Any, Any], Any]
    pairs: Callable[[], Sequence[Pair]]
    reduce: Callable[[Any], float]
    structure: Callable[[Any], Any] = _no_structure
    covers: tuple[str, ...] = ()
    trials: int = 300
    needs: tuple[str, ...] = field(default=())
    threshold: float | None = None
    fast: bool = True

    def available(self) -> str | None:
        """None when the case can run here, else why not (a missing optional module)."""
        import importlib.util

        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        if "pyspark" in self.needs:
            import shutil

            if shutil.which("java") is None:
                return "Java is not installed (Spark needs it)"
        return None


_REGISTRY: dict[str, Case] = {}


def register(name: str, *, relation: str, epsilon: float, delta: float = 0.0,
             pairs: Callable[[], Sequence[Pair]], reduce: Callable[[Any], float],
             structure: Callable[[Any], Any] = _no_structure, covers: Sequence[str] = (),
             trials: int = 300, needs: Sequence[str] = (), threshold: float | None = None,
             fast: bool = True) -> Callable[[Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
    """Register the decorated ``run(data, rng)`` as release path ``name`` (the module
    docstring); ConfigError for a name already registered."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"name={name!r} is not allowed: a non-empty string")
    if name in _REGISTRY:
        raise ConfigError(f"name={name!r} is not allowed: that release path is already "
                          "registered")
    if not isinstance(relation, str) or not relation:
        raise ConfigError(f"relation={relation!r} is not allowed: name the neighbour relation")
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    trials = check_int(trials, "trials", low=2)

    def add(run: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        _REGISTRY[name] = Case(name, relation, epsilon, delta, run, pairs, reduce, structure,
                               tuple(covers), trials, tuple(needs), threshold, fast)
        return run

    return add


def cases() -> list[Case]:
    """Every registered case, in registration order."""
    return list(_REGISTRY.values())


def case(name: str) -> Case:
    """The case registered as ``name`` (ConfigError naming the registered ones)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"name={name!r} is not a registered release path; registered: "
                          f"{', '.join(_REGISTRY)}") from None
