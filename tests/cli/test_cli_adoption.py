"""Regression tests for issue 19 (a tool people adopt): what the ``veil`` command prints.

Each test reproduces a reported bug: text in [brackets] read as console markup, tracebacks
and misnamed parameters on bad input, user files changed before validation, tables cutting
numbers at 80 columns, help showing ``<bool>`` and ``{file}``.
"""

from __future__ import annotations

import hashlib
import io
import sqlite3
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from rich.console import Console

from veil.cli._output import print_table
from veil.cli.main import COMMANDS, load_command, main
from veil.dp import Ledger
from veil.errors import BudgetExceededError
from veil.learn import LogisticRegression
from veil.learn.model_format import save_model

BRACKETED = ("weight [kg]", "dose [/mg]")

FL_CONFIG = """
[data]
dataset = "digits"
clients = 3
min_size = 30

[model]
type = "softmax_regression"

[training]
rounds = 2
batch_size = 64

[run]
seed = 1
"""


def one_line_error(capsys) -> str:
    """stderr of a failed command: exactly one line, 'error: ...', no traceback."""
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + captured.out
    return err


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "people.csv"
    rows = [";".join(["age", *BRACKETED])]
    rows += [f"{20 + i % 50};{50 + i % 40};{i % 7}" for i in range(200)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def ledger_file(tmp_path) -> Path:
    path = tmp_path / "budget.sqlite"
    ledger = Ledger(4.0, 1e-5, path=path)
    ledger.charge(dp_accounting.LaplaceDpEvent(1.0), label="dose [/mg] mean")
    ledger.close()
    return path


# -- 1. nothing a user types is read as markup ------------------------------------------------
@pytest.mark.parametrize("column", BRACKETED)
def test_bracketed_column_names_survive_dp_stats(table, column, capsys):
    assert main(["dp", "stats", str(table), "--column", column, "--query", "mean",
                 "--bounds", "0,100", "--epsilon", "1"]) == 0
    assert column in flat(capsys.readouterr().out)
    assert main(["dp", "stats", str(table), "--column", f"no {column}", "--epsilon", "1"]) == 2
    err = one_line_error(capsys)
    assert f"no {column}" in err and all(c in err for c in BRACKETED)


def test_bracketed_names_survive_anonymize(table, capsys):
    assert main(["anonymize", "check", str(table), "--qi", "weight [kg]",
                 "--sensitive", "dose [/mg]", "--json"]) == 0
    capsys.readouterr()
    assert main(["anonymize", "check", str(table), "--qi", "height [/cm]"]) == 2
    assert "height [/cm]" in one_line_error(capsys)
    # an impossible l-diversity names the model and the bracketed column intact
    assert main(["anonymize", str(table), "--qi", "weight [kg]=intervals:10,20",
                 "--sensitive", "dose [/mg]", "--l", "9"]) == 2
    err = one_line_error(capsys)
    assert "'dose [/mg]'" in err and "9-diversity" in err


def test_bracketed_sections_and_keys_survive_fl_run(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(FL_CONFIG + '\n[bogus]\n"a [b]" = 1\n')
    assert main(["fl", "run", str(config), "--out", str(tmp_path / "o")]) == 2
    err = one_line_error(capsys)
    assert "[bogus]" in err and "[data], [model], [training]" in err
    config.write_text(FL_CONFIG.replace("[run]", '[run]\n"x [/y]" = 2'))
    assert main(["fl", "run", str(config), "--out", str(tmp_path / "o")]) == 2
    assert "'x [/y]' in [run]" in one_line_error(capsys)


def test_bracketed_labels_survive_budget_show(ledger_file, capsys, monkeypatch):
    from veil.cli import _output

    monkeypatch.setattr(_output.console, "_width", 200)  # markup, not wrapping, is checked
    assert main(["budget", "show", str(ledger_file)]) == 0
    assert "dose [/mg]" in flat(capsys.readouterr().out)


def test_bracketed_values_survive_experiment_and_audit(tmp_path, capsys):
    assert main(["experiment", "truex", "--honest", "x [/y]", "--out", str(tmp_path / "t")]) == 2
    assert "x [/y]" in one_line_error(capsys)
    missing = tmp_path / "members [/x].npz"
    assert main(["audit", "--model", str(missing), "--members", str(missing),
                 "--nonmembers", str(missing)]) == 2
    assert "members [/x].npz" in one_line_error(capsys)


# -- 2. bad input: exit 2, one line naming the parameter, nothing changed on disk -------------
def _snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(folder.rglob("*"))}


@pytest.fixture
def inputs(tmp_path, table, ledger_file) -> dict[str, Path]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "existing.txt").write_text("keep me")
    config = tmp_path / "c.toml"
    config.write_text(FL_CONFIG)
    np.savez(tmp_path / "xy.npz", X=np.zeros((4, 2)), y=np.zeros(4))
    save_model(tmp_path / "model.npz", LogisticRegression().fit(np.eye(4), [0, 1, 0, 1]))
    return {"dir": tmp_path, "csv": table, "ledger": ledger_file, "toml": config}


BAD = [
    # (argv with {dir} {csv} {ledger} {toml} placeholders, what the message must name)
    (["dp", "stats", "{dir}/folder", "--column", "age", "--epsilon", "1"], "FILE="),
    (["dp", "stats", "{dir}/empty.csv", "--column", "age", "--epsilon", "1"], "FILE="),
    (["dp", "stats", "{dir}/binary.bin", "--column", "age", "--epsilon", "1"], "FILE="),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "0"], "--epsilon"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "-1"], "--epsilon"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "nan"], "--epsilon"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "1", "--delta", "1.5"],
     "--delta"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "1", "--bounds", "a,b"],
     "--bounds"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "1", "--bounds", "9,1"],
     "--bounds"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "1", "--query", "mode"],
     "--query"),
    (["dp", "stats", "{csv}", "--column", "age", "--epsilon", "abc"], "--epsilon"),
    (["anonymize", "{dir}/folder", "--qi", "age", "--k", "2"], "folder"),
    (["anonymize", "{dir}/empty.csv", "--qi", "age", "--k", "2"], "empty.csv"),
    (["anonymize", "{csv}", "--qi", "age", "--k", "2", "--suppress", "1.5"], "--suppress"),
    (["anonymize", "{csv}", "--qi", "age", "--k", "2", "--out", "{dir}/existing.txt"],
     "--out"),
    (["anonymize", "{csv}", "--qi", "age", "--k", "2", "--out", "{csv}", "--force"], "--out"),
    (["anonymize", "{csv}", "--qi", "age=intervals:10,20", "--k", "500"],
     "500-anonymity is impossible"),
    (["fl", "run", "{dir}/folder"], "CONFIG="),
    (["fl", "run", "{dir}/binary.bin"], "CONFIG="),
    (["fl", "run", "{dir}/empty.csv"], "CONFIG="),
    (["fl", "run", "{toml}", "--out", "{dir}/existing.txt"], "--out"),
    (["fl", "run", "{toml}", "--out", "{dir}/busy"], "--out"),
    (["fl", "run", "{dir}/rounds0.toml", "--out", "{dir}/o"], "rounds=0"),
    (["fl", "run", "{dir}/clients0.toml", "--out", "{dir}/o"], "clients=0"),
    (["audit", "--model", "{dir}/xy.npz", "--members", "{dir}/xy.npz",
      "--nonmembers", "{dir}/xy.npz"], "--model"),
    (["audit", "--model", "{dir}/model.npz", "--members", "{dir}/empty.csv",
      "--nonmembers", "{dir}/xy.npz"], "--members"),      # used to print just "Aborted."
    (["predict", "{dir}/model.npz", "{dir}/folder"], "DATA="),
    (["predict", "{dir}/model.npz", "{csv}", "--out", "{dir}/existing.txt"], "--out"),
    (["predict", "{dir}/binary.bin", "{csv}"], "not a veil model file"),
    (["audit", "--model", "{dir}/binary.bin", "--members", "{dir}/xy.npz",
      "--nonmembers", "{dir}/xy.npz"], "--model"),
    (["audit", "{dir}/folder", "--out", "{dir}/existing.txt"], "--out"),
    (["audit", "{dir}/folder"], "run.json"),
    (["audit"], "RUN_DIR"),
    (["budget", "show", "{dir}/folder"], "folder"),
    (["budget", "show", "{dir}/binary.bin"], "binary.bin"),
    (["budget", "show", "{dir}/nothing.sqlite"], "nothing.sqlite"),
    (["budget", "calibrate", "--epsilon", "0", "--delta", "1e-5"], "epsilon"),
    (["budget", "calibrate", "--epsilon", "1", "--delta", "2"], "delta"),
    (["budget", "calibrate", "--epsilon", "1", "--delta", "1e-5", "--steps", "0"], "steps"),
    (["demo", "--epsilon", "-1", "--out", "{dir}/busy"], "--epsilon"),
    (["demo", "--epsilon", "nan", "--out", "{dir}/d"], "--epsilon"),
    (["demo", "--out", "{dir}/existing.txt"], "--out"),
    (["demo", "--out", "{dir}/busy"], "--out"),
    (["experiment", "truex", "--epsilon", "a,b", "--out", "{dir}/t"], "--epsilon"),
    (["experiment", "truex", "--parties", "1", "--out", "{dir}/t"], "parties"),
    (["experiment", "truex", "--repeats", "0", "--out", "{dir}/t"], "repeats"),
    (["experiment", "truex", "--dataset", "nope", "--out", "{dir}/t"], "dataset"),
    (["experiment", "truex", "--out", "{dir}/existing.txt"], "--out"),
    (["experiment", "truex", "--out", "{dir}/busy"], "--out"),
    (["fl", "run", "{toml}", "--rounds", "3"], "--rounds"),
]


@pytest.mark.parametrize("argv, names", BAD, ids=[" ".join(a[:3]) + f" [{i}]"
                                                   for i, (a, _) in enumerate(BAD)])
def test_bad_input_is_one_line_and_changes_nothing(inputs, argv, names, capsys):
    folder = inputs["dir"]
    (folder / "rounds0.toml").write_text(FL_CONFIG.replace("rounds = 2", "rounds = 0"))
    (folder / "clients0.toml").write_text(FL_CONFIG.replace("clients = 3", "clients = 0"))
    before = _snapshot(folder)
    args = [a.format(**{k: str(v) for k, v in inputs.items()}) for a in argv]
    assert main(args) == 2
    assert names in one_line_error(capsys)
    assert _snapshot(folder) == before


def test_demo_with_bad_epsilon_keeps_an_earlier_runs_ledgers(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "ledgers").mkdir(parents=True)
    ledger = Ledger(1.0, 1e-5, path=run / "ledgers" / "model.sqlite")
    ledger.charge(dp_accounting.LaplaceDpEvent(2.0))  # epsilon 0.5
    ledger.close()
    before = _snapshot(run)
    for extra in (["--epsilon", "-1"], [], ["--force"]):
        assert main(["demo", "--quick", "--out", str(run), *extra]) == 2
        one_line_error(capsys)
        assert _snapshot(run) == before


def test_budget_show_leaves_the_ledger_byte_identical(ledger_file, capsys):
    folder = ledger_file.parent
    before = _snapshot(folder)
    assert main(["budget", "show", str(ledger_file), "--json"]) == 0
    assert _snapshot(folder) == before
    # a WAL-mode ledger is not switched or checkpointed either
    con = sqlite3.connect(ledger_file)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    before = _snapshot(folder)
    assert main(["budget", "show", str(ledger_file)]) == 0
    assert _snapshot(folder) == before


def test_budget_errors_speak_in_epsilon():
    ledger = Ledger(4.0, 1e-5)
    for i in range(3):
        ledger.charge(dp_accounting.LaplaceDpEvent(1.0), label=f"round {i + 1}")  # epsilon 1
    with pytest.raises(BudgetExceededError, match=r"round 4 needs epsilon ~2 but 1 of the "
                                                  r"ledger's budget epsilon=4 remains") as info:
        ledger.charge(dp_accounting.LaplaceDpEvent(0.5), label="round 4")  # epsilon 2
    assert "Laplace" not in str(info.value) and "noise_multiplier" not in str(info.value)


# -- 3. tables and help ----------------------------------------------------------------------
def test_tables_never_cut_numbers_at_80_columns():
    rows = [(r, "ok", 0.912345, 1.2345678, 14630000 + r, 29260000 + r, 1234567.5, "12.3 s")
            for r in range(3)]
    columns = ["round", "status", "accuracy", "loss", "bytes_up", "bytes_down", "aggregated",
               "time"]
    for width in (80, 60, 40):
        out = Console(width=width, file=io.StringIO(), highlight=False)
        print_table(rows, columns, title="veil fl run [x] -> out", out=out)
        text = out.file.getvalue()
        assert "…" not in text and "..." not in text
        for row in rows:
            for cell in row[2:]:
                assert (f"{cell:.6g}" if isinstance(cell, float) else str(cell)) in text
        assert "veil fl run [x] -> out" in text
        assert max(len(line) for line in text.splitlines()) <= width


def test_a_long_title_over_a_narrow_table_stays_on_one_line():
    """The predict table's title wrapped into its 17-character column."""
    out = Console(width=80, file=io.StringIO(), highlight=False)
    title = "1000 rows of adult_test.csv (model: epsilon=1.0, delta=1e-05)"
    print_table([("<=50K", 800), (">50K", 200)], ["prediction", "rows"], title=title, out=out)
    assert title in out.file.getvalue().splitlines()[0]


def test_help_has_no_type_oddities(capsys):
    def walk(command, path):
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    paths = [[]] + [p for name in COMMANDS for p in walk(load_command(name), [name])]
    assert len(paths) > 40
    for path in paths:
        main([*path, "--help"])
        text = capsys.readouterr().out
        assert text.startswith("Usage: veil"), path
        assert "<bool>" not in text and "{" not in text, (path, text)


def test_names_stay_whole_and_every_column_shows_at_80_columns():
    """The conformance table folded "learn.private.KMea/ns" and squeezed columns out of sight."""
    rows = [("learn.private.KMeansClustering", "add/remove one row of the training set", 1.0,
             0.123, "pass"),
            ("dp.query.GroupBy", "add/remove one unit (all its rows)", 0.5, "-",
             "skipped (needs spark: pyspark not installed here)")]
    columns = ["path", "neighbours", "certified eps", "eps >= (0.95)", "verdict"]
    out = Console(width=80, file=io.StringIO(), highlight=False)
    print_table(rows, columns, out=out)
    text = out.file.getvalue()
    assert "learn.private.KMeansClustering" in text and "dp.query.GroupBy" in text
    assert "verdict" in text and "skipped" in text and "installed" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_warning_never_cuts_a_path(monkeypatch):
    """--force's warning folded a long key path ("share.ke" / "y") at 80 columns."""
    from veil.cli import _output

    err = Console(width=80, file=io.StringIO(), highlight=False)
    monkeypatch.setattr(_output, "err_console", err)
    path = "/tmp/" + "a_long_folder_name/" * 5 + "share.key"
    _output.say_replaced([path])
    assert path in err.file.getvalue()


def test_the_fl_run_table_stays_a_table_at_80_columns():
    """Nine round columns went to the one-block-per-row layout at 80 columns (3-space gaps)."""
    rows = [(r, "ok", 0.7486, 0.5584, 3.998, 10, 41330, 60470, "120 ms") for r in range(5)]
    columns = ["round", "status", "accuracy", "loss", "epsilon", "aggregated", "bytes up",
               "bytes down", "time"]
    out = Console(width=80, file=io.StringIO(), highlight=False)
    print_table(rows, columns, out=out)
    lines = out.file.getvalue().splitlines()
    assert any("round" in line and "time" in line for line in lines), lines
    assert sum("120 ms" in line for line in lines) == 5
    assert max(len(line) for line in lines) <= 80
