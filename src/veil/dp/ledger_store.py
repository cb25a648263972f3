"""The SQLite file behind a persisted :class:`~veil.dp.Ledger`.

Layout (:data:`FORMAT_VERSION`): ``meta`` (format version, accountant policy, creation
time), ``budgets`` (one row per ledger of the hierarchy: scope, epsilon, delta; the root's
scope is ``''``, a child's ``parent/name``) and ``charges`` (one row per charge, the event as
JSON, :mod:`veil.dp.accounting.serialize`; kind ``release``/``charge``, a planned block
``plan`` holding the whole schedule, or a ``step`` of the plan whose id is in ``block``).
Format 1 (no plans, no ``block`` column) is migrated to 2 when opened for writing (the
column is added in one transaction; nothing else changes); read-only it is read as is.
The file is in WAL mode with ``synchronous=FULL``; each write is one ``BEGIN IMMEDIATE``
transaction, so other threads and processes wait for it and a committed charge survives
``kill -9``. Every row read back is validated (:func:`parse_charge`): a corrupt file is a
:class:`~veil.errors.DataError`, never silently repaired or replaced.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_accounting import dp_event as de

from veil._validation import check_delta, check_epsilon
from veil.dp.accounting.serialize import event_from_json
from veil.errors import ConfigError, DataError

__all__ = ["FORMAT_VERSION", "Charge", "LedgerStore", "parse_charge"]

logger = logging.getLogger("veil.dp.ledger")

#: version of the SQLite layout written by this veil
FORMAT_VERSION = 2
KINDS = ("release", "charge", "plan", "step")

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE budgets (scope TEXT PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    scope TEXT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT,
    event TEXT NOT NULL,
    event_delta REAL,
    epsilon REAL NOT NULL,
    block INTEGER
);
"""


@dataclass(frozen=True)
class Charge:
    """One recorded charge.

    ``delta`` is the delta of the event's own guarantee (a mechanism's ``.delta``, None if
    not given); ``epsilon`` the root ledger's spend at its delta after this charge;
    ``block`` the id of the plan a ``step`` belongs to (None otherwise).
    """

    index: int
    time: float
    scope: str
    kind: str
    label: str | None
    event: de.DpEvent
    delta: float | None
    epsilon: float
    block: int | None = None


class LedgerStore:
    """The SQLite file behind a persisted ledger (all calls under the book's lock)."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._blocks: bool | None = None
        if os.path.isdir(path):
            raise DataError(f"path={path!r} is a directory; expected a ledger file")
        try:
            if read_only:
                # SQLite's read-only mode never writes the file; without a -wal file beside it
                # no writer has it open, and immutable=1 keeps SQLite from creating -wal/-shm
                live = os.path.exists(path + "-wal")
                uri = Path(os.path.abspath(path)).as_uri() + (
                    "?mode=ro" if live else "?mode=ro&immutable=1")
                self.conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                                            check_same_thread=False, timeout=30.0)
                self._check_integrity()
                return
            self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                        timeout=30.0)
            self._check_sqlite()
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{path} is not a usable veil ledger (corrupt or not an SQLite "
                            f"file: {exc}); it was left untouched") from None

    def _check_integrity(self) -> None:
        status = self.conn.execute("PRAGMA quick_check").fetchone()[0]
        if status != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {status}")

    def _check_sqlite(self) -> None:
        self._check_integrity()
        mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            logger.warning("%s: SQLite refused WAL mode (%s); charges are still committed "
                           "before each release", self.path, mode)
        self.conn.execute("PRAGMA synchronous=FULL")

    def tables(self) -> set[str]:
        rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        return {r[0] for r in rows} - {"sqlite_sequence"}

    def create(self, accountant: str, epsilon: float, delta: float) -> None:
        with self.transaction():
            if self.tables():  # another process created it meanwhile
                return
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            self.conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("format_version", str(FORMAT_VERSION)), ("accountant", accountant),
                ("created", repr(time.time()))])
            self.conn.execute("INSERT INTO budgets VALUES ('', ?, ?)", (epsilon, delta))

    def transaction(self) -> Transaction:
        return Transaction(self.conn)

    def meta(self) -> dict[str, str]:
        if not {"meta", "budgets", "charges"} <= self.tables():
            raise DataError(f"{self.path} is not a veil ledger: it lacks the ledger tables "
                            f"(found {sorted(self.tables())}); it was left untouched")
        try:
            return {k: v for k, v in self.conn.execute("SELECT key, value FROM meta")}
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{self.path}: unreadable ledger metadata ({exc})") from None

    def budgets(self) -> dict[str, tuple[float, float]]:
        rows = self.conn.execute("SELECT scope, epsilon, delta FROM budgets").fetchall()
        out = {}
        for scope, eps, delta in rows:
            try:
                out[str(scope)] = (check_epsilon(eps, f"budget[{scope!r}].epsilon"),
                                   check_delta(delta, f"budget[{scope!r}].delta"))
            except ConfigError as exc:
                raise DataError(f"{self.path}: corrupt budget record: {exc}") from None
        return out

    def insert_charge(self, charge: Charge, event_json: str) -> int:
        """Record ``charge`` (its event as ``event_json``; inside :meth:`transaction`);
        returns its row id."""
        return int(self.conn.execute(
            "INSERT INTO charges (time, scope, kind, label, event, event_delta, epsilon, block) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (charge.time, charge.scope, charge.kind, charge.label, event_json,
             charge.delta, charge.epsilon, charge.block)).lastrowid)

    def child_budget(self, scope: str, epsilon: float,
                     delta: float) -> tuple[float, float] | None:
        """The budget stored for ``scope``, or None after storing (epsilon, delta) for it."""
        with self.transaction() as conn:
            stored = conn.execute("SELECT epsilon, delta FROM budgets WHERE scope = ?",
                                  (scope,)).fetchone()
            if stored is None:
                conn.execute("INSERT INTO budgets VALUES (?, ?, ?)", (scope, epsilon, delta))
        return None if stored is None else (check_epsilon(stored[0]), check_delta(stored[1]))

    def has_blocks(self) -> bool:
        """Whether the charges table has the ``block`` column (format 2; cached)."""
        if self._blocks is None:
            self._blocks = any(row[1] == "block" for row in
                               self.conn.execute("PRAGMA table_info(charges)"))
        return self._blocks

    def migrate(self, version: int) -> None:
        """Bring a format-``version`` file to :data:`FORMAT_VERSION` (one transaction)."""
        if version == FORMAT_VERSION or self.read_only:
            return
        with self.transaction() as conn:
            if not self.has_blocks():
                conn.execute("ALTER TABLE charges ADD COLUMN block INTEGER")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'",
                         (str(FORMAT_VERSION),))
        self._blocks = True
        logger.info("%s: ledger format %d migrated to %d", self.path, version, FORMAT_VERSION)

    def charges_after(self, last_id: int) -> list[tuple]:
        block = "block" if self.has_blocks() else "NULL"
        return self.conn.execute(
            "SELECT id, time, scope, kind, label, event, event_delta, epsilon, "
            f"{block} FROM charges WHERE id > ? ORDER BY id", (last_id,)).fetchall()

    def close(self) -> None:
        self.conn.close()


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")


def parse_charge(row: tuple, path: str) -> Charge:
    """A stored charge, validated (DataError names the row)."""
    cid, t, scope, kind, label, event_json, event_delta, eps, block = row
    where = f"{path}: charge #{cid}"
    if kind not in KINDS or not isinstance(scope, str) or not (
            label is None or isinstance(label, str)) or (kind == "step") != (
            isinstance(block, int) and 0 < block < cid):
        raise DataError(f"{where} is corrupt (kind={kind!r}, scope={scope!r}, "
                        f"block={block!r})")
    if not isinstance(t, float) or not isinstance(eps, float) or not (
            event_delta is None or (isinstance(event_delta, float) and 0 <= event_delta < 1)):
        raise DataError(f"{where} is corrupt (time={t!r}, epsilon={eps!r}, "
                        f"event_delta={event_delta!r})")
    try:
        event = event_from_json(event_json)
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from None
    return Charge(cid, t, scope, kind, label, event, event_delta, eps, block)
