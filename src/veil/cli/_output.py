"""Everything the ``veil`` command writes goes through here.

* Text is never read as console markup: messages, table cells and titles are rendered as
  plain :class:`rich.text.Text`, and the few styled messages escape every interpolated value
  with :func:`esc` (``rich.markup.escape``), so ``weight [kg]`` stays ``weight [kg]`` and
  ``dose [/mg]`` cannot break the output.
* An error is one line, ``error: <message>``, on stderr (:func:`print_error`).
* Tables never cut a number: numbers are never wrapped or ellipsized; headers and text wrap;
  when the numbers alone do not fit the terminal, each row is printed as ``name: value``
  lines instead (:func:`print_table`).
* One progress bar for every long run (:func:`progress`) and one parser for comma-separated
  lists (:func:`parse_list`).
* Input files are checked before anything is read or written (:func:`check_input_file`);
  output folders are refused when they already hold something (:func:`check_out_dir`), and
  output files when they exist (:func:`check_new_files`), unless ``--force``; whatever
  ``--force`` replaced is named (:func:`say_replaced`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from veil._json import to_jsonable
from veil.errors import ConfigError, DataError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

#: a number cell, maybe with a short unit: "1463", "-0.25", "1.2e-05", "3.5 s", "12 kB"
_NUMBER = re.compile(r"^[-+]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+]?\d+)?( ?[a-zA-Z%]{0,3})?$")


def esc(value: Any) -> str:
    """``value`` as text that rich prints verbatim inside a markup string."""
    return escape(str(value))


def say(text: str) -> None:
    """Print ``text`` to stdout as it is (no markup, no highlighting)."""
    console.print(Text(str(text)))


def warn(text: str) -> None:
    """``warning: text`` on stderr, one line the terminal wraps (a path in it is never cut
    by an inserted line break, so it can be copied)."""
    err_console.print(Text.assemble(("warning: ", "yellow"), str(text)), soft_wrap=True)


def one_line(message: str) -> str:
    """``message`` with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(message).split())


def print_error(message: str) -> None:
    """``error: message`` on stderr, as one line (never wrapped by the console)."""
    err_console.print(Text.assemble(("error: ", "bold red"), one_line(message)),
                      soft_wrap=True)


def print_json(data: Any) -> None:
    """Write ``data`` to stdout as JSON (no rich markup)."""
    print(json.dumps(to_jsonable(data), indent=2))


def fmt(value: Any) -> str:
    """A cell: floats to 6 significant digits, everything else as ``str``."""
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def _is_number(cell: str) -> bool:
    return bool(_NUMBER.match(cell.strip()))


def print_table(rows: Iterable[Sequence[Any]], columns: Sequence[str], *,
                title: str | None = None, out: Console | None = None) -> None:
    """A table with the given column headers; nothing in it is read as markup.

    Number cells are never wrapped or cut, and text wraps only between words (a name such as
    ``learn.private.KMeans`` stays whole). When those widths (plus two spaces between columns)
    exceed the console's width, the table is printed vertically: one ``column: value`` block
    per row.
    The title is a line of its own, as wide as the console (a title inside a narrow table
    wrapped into the table's width).
    """
    out = out or console
    cells = [[fmt(v) for v in row] for row in rows]
    headers = [str(c) for c in columns]
    widths = _column_widths(headers, cells, out.width - 2 * (len(headers) - 1))
    if title:
        out.print(Text(title, style="bold"))
    if widths is None:
        key_width = max(len(h) for h in headers)
        for i, row in enumerate(cells):
            if i:
                out.print()
            for head, cell in zip(headers, row, strict=False):
                out.print(Text.assemble((head.rjust(key_width), "bold"), "  ", cell),
                          overflow="fold")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for j, head in enumerate(headers):
        numeric = any(j < len(row) and row[j] and _is_number(row[j]) for row in cells)
        table.add_column(Text(head), width=widths[j], overflow="fold",
                         justify="right" if numeric else "left")
    for row in cells:
        table.add_row(*(Text(c, no_wrap=_is_number(c)) for c in row))
    out.print(table)


def _unbreakable(text: str) -> int:
    """The width ``text`` needs: all of it when it starts with a number, else its longest word."""
    words = text.split() or [""]
    return len(text) if _is_number(words[0]) else max(len(w) for w in words)


def _column_widths(headers: Sequence[str], cells: Sequence[Sequence[str]],
                   room: int) -> list[int] | None:
    """Each column's width within ``room`` characters, or None when the table cannot fit.

    A column needs its longest word (a measurement such as ``12.3 s`` is one word) and wants
    its longest line; each column gets what it needs, then the room left is shared in
    proportion to what each still wants, so text wraps between words and only where it must.
    """
    columns = [[head, *(row[j] for row in cells if j < len(row))]
               for j, head in enumerate(headers)]
    need = [max(_unbreakable(text) for text in column) for column in columns]
    want = [max(len(text) for text in column) for column in columns]
    if sum(want) <= room:
        return want
    if sum(need) > room:
        return None
    spare, extra = room - sum(need), [w - n for w, n in zip(want, need, strict=True)]
    widths = [n + spare * e // sum(extra) for n, e in zip(need, extra, strict=True)]
    for j in sorted(range(len(widths)), key=lambda j: widths[j] - want[j])[:room - sum(widths)]:
        widths[j] += 1  # what the rounding down left goes to the columns furthest from their want
    return widths


def print_mapping(data: Mapping[str, Any], *, title: str | None = None) -> None:
    """A two-column table of key/value pairs."""
    print_table(data.items(), ["", "value"], title=title)


@contextmanager
def progress(name: str, *, total: float | None = None,
             transient: bool = False) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr; yields ``update(done=None, total=None, what=None)``.
    Drawn only on a terminal: piped or captured stderr gets nothing (no stray lines)."""
    if not err_console.is_terminal:
        yield lambda done=None, total=None, what=None: None
        return
    with Progress(TextColumn(esc(name), style="bold"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err_console, transient=transient) as bar:
        task = bar.add_task("", total=total)

        def update(done: float | None = None, total: float | None = None,
                   what: str | None = None) -> None:
            kwargs: dict[str, Any] = {}
            if done is not None:
                kwargs["completed"] = done
            if total is not None:
                kwargs["total"] = total
            if what is not None:
                kwargs["description"] = esc(what)
            bar.update(task, **kwargs)

        yield update


def parse_list(text: str, option: str, kind: type = float) -> list:
    """``"1,2, 3"`` -> ``[1.0, 2.0, 3.0]`` for ``option``; ``kind``: float, int or str."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if kind is str:
        return parts
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{option}={text!r} is not allowed: expected comma-separated "
                          "numbers") from None
    if any(not math.isfinite(v) for v in values):
        raise ConfigError(f"{option}={text!r} is not allowed: numbers must be finite")
    if kind is int:
        if any(v != int(v) for v in values):
            raise ConfigError(f"{option}={text!r} is not allowed: expected comma-separated "
                              "integers")
        return [int(v) for v in values]
    return values


def check_input_file(path: Path, option: str, *, text: bool = False) -> Path:
    """``path`` must be an existing, non-empty regular file (``text``: UTF-8 text)."""
    if not path.exists():
        raise DataError(f"{option}={str(path)!r} is not an existing file")
    if not path.is_file():
        raise DataError(f"{option}={str(path)!r} is a directory; expected a file"
                        if path.is_dir() else f"{option}={str(path)!r} is not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{option}={str(path)!r} cannot be read: {exc.strerror}") from None
    if not data.strip():
        raise DataError(f"{option}={str(path)!r} is empty")
    if text:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise DataError(f"{option}={str(path)!r} is not a UTF-8 text file") from None
    return path


def check_out_dir(path: Path, option: str = "--out", *, force: bool = False,
                  keep: Sequence[str] = ()) -> Path:
    """``path`` must be a folder that does not exist or is empty; with ``force`` a non-empty
    folder is accepted (files the run writes are replaced; nothing else is removed). Files
    whose names match a ``keep`` glob (ledgers) are never replaced, forced or not."""
    if path.exists() and not path.is_dir():
        raise DataError(f"{option}={str(path)!r} is an existing file; expected a folder")
    if not path.exists() or not any(path.iterdir()):
        return path
    kept = sorted({p.relative_to(path).as_posix() for pattern in keep for p in path.glob(pattern)})
    if kept:
        raise ConfigError(f"{option}={str(path)!r} already holds a run with privacy ledgers "
                          f"({', '.join(kept[:3])}{', ...' if len(kept) > 3 else ''}); they "
                          "record budget already spent, so veil never replaces them: choose "
                          f"another {option}")
    if not force:
        raise ConfigError(f"{option}={str(path)!r} is not empty: choose another {option}, or "
                          "pass --force to write into it")
    return path


def check_new_files(paths: Iterable[str | Path], *, force: bool = False,
                    option: str = "--out") -> list[str]:
    """Refuse (ConfigError naming them) those of ``paths`` that exist (a symlink, even a
    dangling one, counts) unless ``force``; returns them, the files the command will replace,
    for :func:`say_replaced`. Called before anything is computed or written."""
    taken = [str(p) for p in paths if os.path.lexists(p)]
    if taken and not force:
        raise ConfigError(f"{', '.join(map(repr, taken))} already "
                          f"{'exists' if len(taken) == 1 else 'exist'}: choose another "
                          f"{option}, or pass --force to replace "
                          f"{'it' if len(taken) == 1 else 'them'}")
    return taken


def say_replaced(replaced: Sequence[str]) -> None:
    """Name the files ``--force`` replaced (a private key is never replaced unnamed)."""
    if replaced:
        warn(f"--force replaced {', '.join(replaced)}")


def next_free(stem: Path) -> Path:
    """The first of ``stem-1``, ``stem-2``, ... that does not exist yet."""
    n = 1
    while stem.with_name(f"{stem.name}-{n}").exists():
        n += 1
    return stem.with_name(f"{stem.name}-{n}")
