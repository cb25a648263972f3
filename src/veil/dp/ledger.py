"""The Ledger: every differentially private release in veil is charged here first.

``Ledger(epsilon, delta, accountant="pld", path=None)`` holds a privacy budget and the
history of what was spent; ``Ledger.for_budget(budget, path)`` builds it from the
:class:`~veil.dp.PrivacyBudget` that also calibrated the noise. :meth:`Ledger.release`
composes the history with the new mechanism's event (the accountant's math,
:mod:`veil.dp.accounting`), checks that the composed epsilon at the ledger's delta stays
within the budget, records the charge, and only then lets the mechanism draw its noise.
A release that does not fit raises :class:`~veil.errors.BudgetExceededError` before any
noise is drawn, with nothing recorded. :meth:`Ledger.charge` does the same for callers
that draw their own noise (DP-SGD steps, federated rounds).

The ledger is a *privacy filter*: it admits an event only if the composition of all
admitted events, including it, fits the budget, and this holds even when later charges
(their mechanisms and privacy parameters) are chosen from earlier outputs. The default
policy ``"pld"`` (:mod:`veil.dp.accounting.filter`) makes each charge a *block* priced
tightly by PLD at its own delta and composes blocks by basic composition (Rogers, Roth,
Ullman & Vadhan 2016); ``"rdp"`` (a Renyi filter at one order fixed by the first
charge, Feldman & Zrnic 2021, :class:`~veil.dp.accounting.rdp.RDPFilter`), ``"basic"`` and
``"advanced"`` are filters too (Whitehouse, Ramdas, Rogers & Wu 2023). ``"pld-nonadaptive"``
composes all charges by PLD as if they were fixed in advance: tight, and *not* a filter
(opt-in). The table of guarantees is in :mod:`veil.dp.accounting.registry`.

Planned schedules (:meth:`Ledger.plan`): a sequence of steps fixed before it starts (a
DP-SGD run, the rounds of a federation) is one block. Its whole cost (PLD of the schedule,
at the delta it was calibrated for) is reserved when the plan opens, so a step never fails
for lack of budget and stopping early still pays the full plan. Each step is then charged
to the plan (:meth:`Block.charge`: a recorded, write-ahead row like any charge) and must be
the plan's next event; a step past the end of the plan is refused.

Persistence (``path=``, :mod:`veil.dp.ledger_store`): a SQLite file in WAL mode with
``synchronous=FULL``. Each charge is one transaction (``BEGIN IMMEDIATE``: other threads
and processes wait), committed before the value is returned, so a crash or ``kill -9``
never loses a charge whose value left the process. Before each charge the ledger reads
charges that other processes committed, so several processes can share one file. Reopening
continues from the recorded spend; the budget stored in the file wins over a different one
passed to the constructor (logged as a warning). A file that is not a ledger, is corrupt,
or was written by a newer format is a :class:`~veil.errors.DataError` and is never
replaced.

Hierarchies: :meth:`Ledger.child` gives a sub-ledger with its own budget that draws from
its parent: a charge must fit the child *and* every ancestor, and is recorded once, so a
child can never spend more than its parent allows (e.g. per-sensitivity-level budgets,
:mod:`veil.dp.budget`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
import time
from typing import Any, NamedTuple

from dp_accounting import dp_event as de

from veil._validation import check_delta, check_epsilon, check_int
from veil.dp.accounting.base import Accountant
from veil.dp.accounting.events import check_event
from veil.dp.accounting.filter import PLDFilter
from veil.dp.accounting.guarantees import pure_epsilon
from veil.dp.accounting.registry import DEFAULT_ACCOUNTANT, POLICIES, make_policy
from veil.dp.accounting.serialize import event_to_json
from veil.dp.ledger_store import FORMAT_VERSION, Charge, LedgerStore, parse_charge
from veil.dp.mechanism import Mechanism
from veil.dp.privacy_budget import PrivacyBudget, check_budget
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import check_rng

__all__ = ["Ledger", "Block", "Charge", "FORMAT_VERSION", "Spent", "check_ledger", "open_ledger"]

logger = logging.getLogger(__name__)

#: relative slack on the budget check, for floating-point round-off (1/3 + 1/3 + 1/3, a
#: sigma found by a root finder): immaterial for privacy, and never more than this
_RTOL = 1e-9


class _Book:
    """What all ledgers of one hierarchy share: lock, nodes, rows, and the store."""

    def __init__(self, accountant: str, store: LedgerStore | None) -> None:
        self.lock = threading.RLock()
        self.accountant = accountant
        self.store = store
        self.nodes: dict[str, Ledger] = {}
        self.charges: list[Charge] = []
        self.last_id = 0
        self.closed = False

    def sync(self) -> None:
        """Apply charges committed by other processes (call under the lock)."""
        if self.store is None or self.closed:
            return
        for row in self.store.charges_after(self.last_id):
            charge = parse_charge(row, self.store.path)
            for node in self.nodes.values():
                if _covers(node._scope, charge.scope) and charge.kind != "step":
                    node._accountant.compose(charge.event, delta=charge.delta)
            self.charges.append(charge)
            self.last_id = charge.index

    def add_node(self, scope: str, epsilon: float, delta: float) -> Ledger:
        """A new ledger at ``scope`` that has paid for the charges recorded under it."""
        node = Ledger.__new__(Ledger)
        node._attach(self, scope, epsilon, delta)
        for charge in self.charges:
            if _covers(scope, charge.scope) and charge.kind != "step":  # the plan paid
                node._accountant.compose(charge.event, delta=charge.delta)
        return node


def _covers(scope: str, charged: str) -> bool:
    """Whether a ledger at ``scope`` pays for a charge made at ``charged``."""
    return scope == "" or charged == scope or charged.startswith(scope + "/")



class Spent(NamedTuple):
    """What a ledger has spent: ``epsilon``, certified at ``at_delta`` (a pair like every
    (epsilon, delta) in veil, named so that the delta does not read as "delta spent")."""

    epsilon: float
    at_delta: float

class Ledger:
    """A privacy budget that every release is charged against (see the module docstring).

    Parameters
    ----------
    epsilon, delta:
        The budget: the composition of everything charged must be (epsilon, delta)-DP.
    accountant:
        The policy (:data:`veil.dp.accounting.POLICIES`): "pld" (default: a filter of
        PLD-priced blocks), "rdp", "basic", "advanced", or "pld-nonadaptive" (not a filter).
    path:
        A SQLite file to persist to (created if absent); None keeps the ledger in memory.
    """

    def __init__(self, epsilon: float, delta: float = 0.0,
                 accountant: str = DEFAULT_ACCOUNTANT,
                 path: str | os.PathLike | None = None) -> None:
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        make_policy(accountant, delta)  # validates the name
        if path is None:
            self._attach(_Book(accountant, None), "", epsilon, delta)
            return
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ConfigError(f"path={path!r} is not allowed: the folder {folder} does not exist")
        store = LedgerStore(path)
        try:
            if not store.tables():
                store.create(accountant, epsilon, delta)
        except sqlite3.DatabaseError as exc:
            store.close()
            raise DataError(f"{store.path} is not a usable veil ledger ({exc}); it was left "
                            "untouched") from None
        self._open(store, (epsilon, delta, accountant))

    @classmethod
    def for_budget(cls, budget: PrivacyBudget, path: str | os.PathLike | None = None) -> Ledger:
        """The ledger that caps ``budget`` (:class:`~veil.dp.PrivacyBudget`): the same
        object that calibrated the noise it will be charged for."""
        budget = check_budget(budget)
        return cls(budget.epsilon, budget.delta, budget.accountant, path=path)

    @classmethod
    def open(cls, path: str | os.PathLike, *, read_only: bool = False) -> Ledger:
        """Reopen an existing ledger file with the budget stored in it; ``read_only``: for
        inspection (SQLite ``mode=ro``: the file stays byte-identical; charges are refused)."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise DataError(f"path={path!r} is not an existing ledger file")
        ledger = cls.__new__(cls)
        ledger._open(LedgerStore(path, read_only), None)
        return ledger

    def _open(self, store: LedgerStore, given: tuple[float, float, str] | None) -> None:
        try:
            meta = store.meta()
            version = meta.get("format_version", "")
            if not version.isdigit():
                raise DataError(f"{store.path}: corrupt format version {version!r}")
            if int(version) > FORMAT_VERSION:
                raise DataError(f"{store.path} was written by a newer veil (ledger format "
                                f"{version}, this veil reads up to {FORMAT_VERSION}); upgrade "
                                "veil to open it")
            accountant = meta.get("accountant")
            if accountant not in POLICIES:
                raise DataError(f"{store.path}: corrupt accountant name {accountant!r}")
            # format 1 had no plans; its "pld" charges are re-priced by today's filter
            store.migrate(int(version))
            budgets = store.budgets()
            if "" not in budgets:
                raise DataError(f"{store.path}: the root budget record is missing")
            epsilon, delta = budgets[""]
            if given is not None and given != (epsilon, delta, accountant):
                logger.warning(
                    "%s already holds a ledger with budget epsilon=%g, delta=%g, "
                    "accountant=%r; the stored budget wins over the one passed "
                    "(epsilon=%g, delta=%g, accountant=%r)", store.path, epsilon, delta,
                    accountant, *given)
            book = _Book(accountant, store)
            self._attach(book, "", epsilon, delta)
            book.sync()
            for scope in sorted(budgets, key=lambda s: s.count("/")):
                parent = scope.rpartition("/")[0]
                if scope and parent not in book.nodes:
                    raise DataError(f"{store.path}: child ledger {scope!r} has no parent")
                if scope:
                    book.add_node(scope, *budgets[scope])
            orphans = {c.scope for c in book.charges} - set(book.nodes)
            if orphans:
                raise DataError(f"{store.path}: charges recorded for unknown ledgers "
                                f"{sorted(orphans)}")
        except (DataError, sqlite3.DatabaseError) as exc:
            store.close()
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{store.path} is not a usable veil ledger ({exc}); it was left "
                            "untouched") from None

    def _attach(self, book: _Book, scope: str, epsilon: float, delta: float) -> None:
        self._book = book
        self._scope = scope
        self._epsilon = epsilon
        self._delta = delta
        self._accountant: Accountant = make_policy(book.accountant, delta)
        book.nodes[scope] = self

    # -- the budget ----------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """The epsilon budget."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The delta budget (epsilon is measured at this delta)."""
        return self._delta

    @property
    def accountant(self) -> str:
        """The accountant's name."""
        return self._book.accountant

    @property
    def budget(self) -> PrivacyBudget:
        """(epsilon, delta, accountant) as one :class:`~veil.dp.PrivacyBudget`."""
        return PrivacyBudget(self._epsilon, self._delta, self._book.accountant)

    @property
    def path(self) -> str | None:
        """The SQLite file, or None for an in-memory ledger."""
        return None if self._book.store is None else self._book.store.path

    @property
    def name(self) -> str:
        """'' for a root ledger, 'parent/child' for a child."""
        return self._scope

    def __repr__(self) -> str:
        where = f", path={self.path!r}" if self.path else ""
        name = f"name={self._scope!r}, " if self._scope else ""
        return (f"Ledger({name}epsilon={self._epsilon:g}, delta={self._delta:g}, "
                f"accountant={self.accountant!r}{where})")

    # -- charging ------------------------------------------------------------------
    def release(self, mechanism: Mechanism, value: Any, *, label: str | None = None,
                rng: Any = None) -> Any:
        """Charge ``mechanism.event``, then return ``mechanism._randomize(value, rng)``.

        Raises BudgetExceededError (before any noise is drawn, nothing recorded) if the
        composition would exceed the budget of this ledger or of any ancestor.
        """
        if not isinstance(mechanism, Mechanism):
            raise ConfigError(f"mechanism={mechanism!r} is not allowed: expected a "
                              "veil.dp.mechanism.Mechanism")
        generator = check_rng(rng)
        mechanism.check(value)  # bad data is refused before anything is charged
        mech_delta = getattr(mechanism, "delta", None)
        self._charge(mechanism.event, label, mech_delta or None, "release")
        return mechanism._randomize(value, generator)

    def charge(self, event: de.DpEvent, *, label: str | None = None,
               delta: float | None = None) -> Charge:
        """Record ``event`` for noise drawn by the caller (after this returns).

        ``delta``: the delta of the event's own (epsilon, delta) guarantee, i.e. the delta
        its noise was calibrated for: the default policy prices the charge as one block at
        this delta (None: 0 for a pure event, else all the delta the ledger has left;
        :mod:`veil.dp.accounting.filter`); basic and advanced composition need it for
        non-pure events. A charge is one adaptively chosen block: charge a schedule fixed in
        advance with :meth:`plan`. Raises BudgetExceededError if the event does not fit
        (nothing recorded).
        """
        return self._charge(event, label, delta, "charge")

    def plan(self, events: de.DpEvent | list[de.DpEvent], *, steps: int = 1,
             delta: float | None = None, label: str | None = None) -> Block:
        """Reserve a planned schedule as one block; returns the :class:`Block` to charge
        its steps to.

        ``events``: the step event repeated ``steps`` times, or the list of step events in
        order, fixed before the first step runs. The whole schedule (their composition) is
        charged now, at ``delta`` (the delta its noise was calibrated for; see
        :mod:`veil.dp.accounting.filter`), so later steps never fail for lack of budget and
        an early stop still pays the full plan. BudgetExceededError if it does not fit.
        """
        return Block(self, self._charge(_schedule(events, steps), label, delta, "plan"))

    def longest_plan(self, events: de.DpEvent | list[de.DpEvent], *, steps: int = 1,
                     delta: float | None = None, label: str | None = None) -> Block | None:
        """:meth:`plan` of the longest prefix of the schedule that fits the budget now
        (bisection on its length; the prefix is fixed before its first step), or None if
        not even the first step fits. Steps past the prefix are then refused by the block
        (e.g. the rounds of a run longer than its budget allows)."""
        full = _schedule(events, steps)
        uniform = isinstance(full, de.SelfComposedDpEvent)

        def prefix(k: int) -> de.DpEvent:
            return de.SelfComposedDpEvent(full.event, k) if uniform else \
                de.ComposedDpEvent(full.events[:k])

        lo, hi = 0, full.count if uniform else len(full.events)  # the answer is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.fits(prefix(mid), delta=delta) else (lo, mid - 1)
        if lo == 0:
            return None
        return Block(self, self._charge(prefix(lo), label, delta, "plan"))

    def block(self, index: int) -> Block:
        """The plan recorded as charge ``index`` (to go on charging its steps after a
        restart); ConfigError if there is none at this ledger."""
        with self._book.lock:
            self._book.sync()
            for charge in self._book.charges:
                if charge.index == index and charge.kind == "plan":
                    if charge.scope != self._scope:
                        break
                    return Block(self, charge)
        raise ConfigError(f"index={index!r} is not allowed: no plan #{index} was charged to "
                          f"{self!r}")

    def _charge(self, event: de.DpEvent, label: str | None, delta: float | None,
                kind: str, block: Block | None = None) -> Charge:
        check_event(event)
        if label is not None and not isinstance(label, str):
            raise ConfigError(f"label={label!r} is not allowed: expected a string or None")
        if delta is not None:
            delta = check_delta(delta, "delta")
        stored_event = event_to_json(event)
        book = self._book
        with book.lock:
            if book.closed:
                raise ConfigError(f"the ledger {book.store.path} is closed: reopen it to charge")
            now = time.time()

            def check() -> tuple[Charge, list[tuple[Ledger, Accountant, float]]]:
                if block is not None:  # a step: the plan has paid for it
                    block._check_step(event, label)
                    trials = []
                    charge = Charge(0, now, self._scope, kind, label, event, None,
                                    self._book.nodes[""]._accountant.get_epsilon(
                                        self._book.nodes[""]._delta), block.index)
                else:
                    used, trials = self._trials(event, delta, kind, label)
                    charge = Charge(0, now, self._scope, kind, label, event, used,
                                    trials[0][2])
                return charge, trials

            if book.store is None:
                charge, trials = check()
                index = book.last_id + 1
            else:
                with book.store.transaction():  # commits at the end of the block
                    book.sync()
                    charge, trials = check()  # may raise: rolled back
                    index = book.store.insert_charge(charge, stored_event)
            # recorded (and committed): only now does the in-memory state move
            charge = dataclasses.replace(charge, index=index)
            book.charges.append(charge)
            book.last_id = index
            for node, trial, _ in trials:
                node._accountant = trial
            return charge

    def _chain(self) -> list[Ledger]:
        """This ledger and its ancestors, root first."""
        parts = self._scope.split("/") if self._scope else []
        return [self._book.nodes["/".join(parts[:i])] for i in range(len(parts) + 1)]

    def _block_delta(self, event: de.DpEvent, delta: float | None) -> float | None:
        """The delta of a block (:mod:`veil.dp.accounting.filter`): ``delta`` if given or
        the event is pure, else (the default policy) all the delta the ledger and every
        ancestor has left (call under the lock, after sync)."""
        if delta is not None or not isinstance(self._accountant, PLDFilter) or (
                pure_epsilon(event) is not None):
            return delta
        return max(0.0, min(node._delta - node._accountant.reserved_delta()
                            for node in self._chain()))

    def _trials(self, event: de.DpEvent, delta: float | None, kind: str | None,
                label: str | None = None
                ) -> tuple[float | None, list[tuple[Ledger, Accountant, float]]]:
        """(the block's delta, [(ledger, accountant with ``event`` added, its spend)] for
        this ledger and every ancestor, root first); BudgetExceededError (``kind`` given)
        or an empty list if one overflows."""
        delta = self._block_delta(event, delta)
        trials = []
        for node in self._chain():
            trial = node._accountant.copy()
            trial.compose(event, delta=delta)
            spent = trial.get_epsilon(node._delta)
            if not spent <= node._epsilon * (1.0 + _RTOL):
                if kind is None:
                    return delta, []
                who = f"ledger {node._scope!r}" if node._scope else "the ledger"
                before = node._accountant.get_epsilon(node._delta)
                left = max(node._epsilon - before, 0.0)
                raise BudgetExceededError(
                    f"{label or kind} needs epsilon ~{spent - before:.2g} but {left:.2g} of "
                    f"{who}'s budget epsilon={node._epsilon:g} remains (at delta="
                    f"{node._delta:g}); nothing was charged and no noise was drawn")
            trials.append((node, trial, spent))
        return delta, trials

    # -- reading -------------------------------------------------------------------
    def _fresh(self) -> Accountant:
        with self._book.lock:
            self._book.sync()
            return self._accountant

    def spent(self, delta: float | None = None) -> Spent:
        """The epsilon spent so far, certified at ``delta`` (default: the ledger's delta):
        ``Spent(epsilon, at_delta)``. ``at_delta`` is the delta the epsilon is stated at,
        not an amount of delta used (the releases' own deltas are composed into it)."""
        delta = self._delta if delta is None else check_delta(delta)
        return Spent(self._fresh().get_epsilon(delta), delta)

    def remaining(self) -> tuple[float, float]:
        """(epsilon left, delta): the budget minus the spend at the ledger's delta, for this
        ledger and every ancestor (the smallest). Composition is not additive: whether a
        given event fits is answered by :meth:`fits`."""
        with self._book.lock:
            self._book.sync()
            left = min(node._epsilon - node._accountant.get_epsilon(node._delta)
                       for node in self._chain())
        return max(0.0, left), self._delta

    def would_spend(self, event: de.DpEvent, *, delta: float | None = None) -> float:
        """This ledger's epsilon (at its delta) if ``event`` were charged now."""
        check_event(event)
        with self._book.lock:
            trial = self._fresh().copy()
            trial.compose(event, delta=self._block_delta(event, delta))
        return trial.get_epsilon(self._delta)

    def fits(self, event: de.DpEvent, *, delta: float | None = None) -> bool:
        """Whether ``event`` could be charged now (this ledger and all ancestors)."""
        check_event(event)
        with self._book.lock:
            self._book.sync()
            return bool(self._trials(event, delta, None)[1])

    def history(self) -> tuple[Charge, ...]:
        """The charges this ledger paid for (its own and its children's), oldest first."""
        with self._book.lock:
            self._book.sync()
            return tuple(c for c in self._book.charges if _covers(self._scope, c.scope))

    # -- hierarchy -----------------------------------------------------------------
    def child(self, name: str, epsilon: float, delta: float | None = None) -> Ledger:
        """A sub-ledger with budget (epsilon, delta) that draws from this one.

        Its charges must fit its own budget and every ancestor's. The child's budget may
        not exceed this ledger's. Asking again for the same name returns the same child
        (from a file: the stored budget wins, with a warning if it differs).
        """
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError(f"name={name!r} is not allowed: expected a non-empty string "
                              "without '/'")
        epsilon = check_epsilon(epsilon)
        delta = self._delta if delta is None else check_delta(delta)
        if epsilon > self._epsilon or delta > self._delta:
            raise ConfigError(f"child budget (epsilon={epsilon:g}, delta={delta:g}) is not "
                              f"allowed: it exceeds its parent's (epsilon={self._epsilon:g}, "
                              f"delta={self._delta:g})")
        scope = f"{self._scope}/{name}" if self._scope else name
        book = self._book
        with book.lock:
            existing = book.nodes.get(scope)
            if existing is not None:
                self._warn_if_different(existing, epsilon, delta)
                return existing
            if book.closed:
                raise ConfigError(f"the ledger {book.store.path} is closed: reopen it")
            if book.store is not None:
                stored = book.store.child_budget(scope, epsilon, delta)
                if stored is not None:
                    given = (epsilon, delta)
                    epsilon, delta = stored
                    if given != (epsilon, delta):
                        logger.warning("%s: child ledger %r already has budget epsilon=%g, "
                                       "delta=%g; the stored budget wins over the one passed "
                                       "(epsilon=%g, delta=%g)", book.store.path, scope,
                                       epsilon, delta, *given)
            book.sync()
            return book.add_node(scope, epsilon, delta)

    @staticmethod
    def _warn_if_different(node: Ledger, epsilon: float, delta: float) -> None:
        if (node._epsilon, node._delta) != (epsilon, delta):
            logger.warning("child ledger %r already has budget epsilon=%g, delta=%g; keeping "
                           "it over the one passed (epsilon=%g, delta=%g)", node._scope,
                           node._epsilon, node._delta, epsilon, delta)

    def children(self) -> dict[str, Ledger]:
        """The direct children (created here or stored in the ledger's file), by name."""
        prefix = f"{self._scope}/" if self._scope else ""
        return {s[len(prefix):]: n for s, n in self._book.nodes.items()
                if s.startswith(prefix) and s != self._scope and "/" not in s[len(prefix):]}

    # -- lifetime ------------------------------------------------------------------
    def close(self) -> None:
        """Close the file of a persisted ledger (and its children): reading still works,
        charging raises ConfigError."""
        with self._book.lock:
            if self._book.store is not None and not self._book.closed:
                self._book.sync()
                self._book.store.close()
                self._book.closed = True

    def __enter__(self) -> Ledger:
        return self

    # -- copies ----------------------------------------------------------------------
    def __copy__(self) -> Ledger:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Ledger:
        """A ledger is a budget, not a value: any copy (``copy.deepcopy``, hence
        ``sklearn.base.clone`` and ``cross_val_score``) is the ledger itself, so that every
        copy of an estimator charges the one shared budget and nothing is spent twice
        unseen. (Pickling still fails: a budget cannot be split across processes; give
        several processes one ledger file, ``path=``.)"""
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()



def _schedule(events: de.DpEvent | list[de.DpEvent], steps: int) -> de.DpEvent:
    """The event of a planned schedule, in the form :class:`Block` reads its steps from:
    ``SelfComposedDpEvent(step, steps)`` or ``ComposedDpEvent([step, ...])``."""
    if isinstance(events, de.DpEvent):
        check_event(events, "events")
        return de.SelfComposedDpEvent(events, check_int(steps, "steps", low=1))
    if isinstance(events, (list, tuple)) and events:
        for i, e in enumerate(events):
            check_event(e, f"events[{i}]")
        return de.ComposedDpEvent(list(events))
    raise ConfigError(f"events={events!r} is not allowed: expected a DpEvent (with steps=) "
                      "or a non-empty list of DpEvents")


class Block:
    """A planned schedule reserved on a ledger (:meth:`Ledger.plan`): charge its steps here.

    Each :meth:`charge` is recorded like any charge (one committed row, before the caller
    releases anything) and must be the plan's next step event: the plan was priced for
    exactly these steps, so a different event is a ConfigError and a step past the end a
    BudgetExceededError. Steps charged by other processes to the same file count too.
    """

    def __init__(self, ledger: Ledger, plan: Charge) -> None:
        self.ledger = ledger
        self.index = plan.index
        self.label = plan.label
        schedule = plan.event
        self.steps: tuple[de.DpEvent, ...] = (
            (schedule.event,) * schedule.count if isinstance(schedule, de.SelfComposedDpEvent)
            else tuple(schedule.events))

    def __repr__(self) -> str:
        return f"Block(#{self.index}, {self.label!r}, {len(self.steps)} steps)"

    @property
    def used(self) -> int:
        """Steps charged so far."""
        return len(self.charges())

    def charges(self) -> tuple[Charge, ...]:
        """The steps charged to this plan, oldest first."""
        book = self.ledger._book
        with book.lock:
            book.sync()
            return tuple(c for c in book.charges if c.block == self.index)

    def fits(self, event: de.DpEvent) -> bool:
        """Whether ``event`` is the plan's next step (so :meth:`charge` will take it)."""
        used = self.used
        return used < len(self.steps) and self.steps[used] == event

    def charge(self, event: de.DpEvent, *, label: str | None = None) -> Charge:
        """Record the next step (already paid for by the plan)."""
        return self.ledger._charge(event, label, None, "step", block=self)

    def _check_step(self, event: de.DpEvent, label: str | None) -> None:
        used = sum(1 for c in self.ledger._book.charges if c.block == self.index)
        if used >= len(self.steps):
            raise BudgetExceededError(
                f"{label or 'step'}: the plan #{self.index} ({self.label}) has charged all "
                f"its {len(self.steps)} steps; nothing was charged and no noise was drawn")
        if self.steps[used] != event:
            raise ConfigError(f"event={event!r} is not allowed: step {used} of plan "
                              f"#{self.index} ({self.label}) is {self.steps[used]!r}")


def check_ledger(ledger: Any, *, optional: bool = False) -> Ledger | None:
    """``ledger`` if it is a :class:`Ledger` (or None when ``optional``), else ConfigError."""
    if (ledger is None and optional) or isinstance(ledger, Ledger):
        return ledger
    allowed = "a veil.dp.Ledger or None" if optional else "a veil.dp.Ledger"
    raise ConfigError(f"ledger={type(ledger).__name__} is not allowed: expected {allowed}")


def open_ledger(ledger: Any, epsilon: float, delta: float) -> Ledger:
    """``ledger``, or (None) a one-off ledger holding exactly (epsilon, delta)."""
    return Ledger(epsilon, delta) if ledger is None else check_ledger(ledger)
