"""The command starts fast and its help reads as plain text.

``veil --help`` and ``veil --version`` import no sub-command (each is loaded when it runs),
every help page shows ``[default: ...]`` / ``[required]`` as written (typer escaped the
brackets for rich markup: ``\\[default: ...]``), and shell completion is offered.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from veil.cli.main import COMMANDS, load_command, main

HEAVY = ("pandas", "scipy", "sklearn", "torch", "dp_accounting", "pyarrow", "flwr", "matplotlib")


def _loaded_after(argv: list[str]) -> list[str]:
    """The modules a fresh interpreter holds after ``veil ARGV``."""
    code = (f"import json, sys; from veil.cli.main import main; main({argv!r}); "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_load_no_sub_command_and_no_heavy_library(argv):
    loaded = _loaded_after(argv)
    commands = sorted({f"veil.cli.{module}" for module, _, _ in COMMANDS.values()})
    assert [m for m in commands if m in loaded] == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_the_root_help_line_of_each_command_is_its_own_first_words():
    for name, (_, _, line) in COMMANDS.items():
        own = load_command(name).get_short_help_str(limit=300)
        assert own.startswith(line.rstrip(".")), (name, line, own)


def _pages(command, path):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _pages(sub, [*path, name])


def test_no_help_page_shows_an_escaped_bracket(capsys):
    pages = [page for name in COMMANDS for page in _pages(load_command(name), [name])]
    assert len(pages) >= 40
    for path, _ in pages:
        assert main([*path, "--help"]) == 0
        text = capsys.readouterr().out
        assert "\\[" not in text, (path, text)
    assert main(["dp", "stats", "--help"]) == 0
    assert "[default: mean]" in capsys.readouterr().out


def test_an_unknown_command_is_a_usage_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err


def test_shell_completion_is_offered(capsys):
    assert main(["--show-completion", "bash"]) == 0
    assert "complete" in capsys.readouterr().out
