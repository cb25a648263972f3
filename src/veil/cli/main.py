"""Entry point of the ``veil`` command: ``veil <area> <verb>``.

Every sub-command raises :class:`~veil.errors.VeilError` for bad input; :func:`main`
prints its message as one line (no traceback) and exits with status 2, as it does for usage
errors (an unknown option, a value of the wrong type) and for files the system refuses.
Help is plain text: nothing in it is read as console markup.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import typer
import typer.core

try:  # typer >= 0.21 vendors click as typer._click; older typer (flwr pins it) uses click
    from typer._click import exceptions as click_exceptions
except ImportError:
    from click import exceptions as click_exceptions
from typer.core import TyperArgument, TyperGroup

import veil
from veil.cli._output import print_error
from veil.errors import VeilError

# typer escapes "[default: ...]" for rich markup whenever rich is installed, even with
# rich_markup_mode=None, so plain help showed a literal "\[default: ...]". Help here is plain.
typer.core.HAS_RICH = False

#: name -> (module in veil.cli, attribute: a Typer app or a command function, one-line help).
#: A sub-command's module is imported only when that sub-command runs (``veil --help`` and
#: ``veil --version`` import none of them); the help line is checked against the command's own
#: (tests/cli/test_cli_startup.py).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "audit": ("audit", "app", "Audit a training run (RUN_DIR) or a saved model (--model)."),
    "demo": ("demo", "demo", "Hybrid private federated learning: 10 parties, Nursery tree."),
    "predict": ("predict", "predict", "Predict the class of every row of DATA.csv with a saved "
                                      "model."),
    "psi": ("net", "psi", "Private set intersection with a party on another host."),
    "keygen": ("net", "keygen", "Dealer-free threshold Paillier key generation."),
    "datasets": ("datasets", "app", "Data sets veil can load."),
    "budget": ("budget", "app", "Privacy budgets: ledgers and noise calibration."),
    "anonymize": ("anon", "app", "Anonymize a table (k-anonymity, l-diversity, t-closeness)."),
    "fl": ("fl", "app", "Federated learning."),
    "dp": ("dp", "app", "Differential privacy."),
    "experiment": ("experiment", "app", "Reproduce published comparisons."),
    "he": ("he", "app", "Homomorphic encryption: encrypted linear regression (CKKS)."),
    "net": ("net", "app", "Parties on different hosts: certificates for the hosts file."),
    "mpc": ("mpc", "app", "Secure multi-party computation with parties on different hosts."),
    "synth": ("synth", "app", "DP synthetic data."),
}


def load_command(name: str) -> Any:
    """The click command of sub-command ``name``, its module imported now."""
    module, attribute, _ = COMMANDS[name]
    target = getattr(importlib.import_module(f"veil.cli.{module}"), attribute)
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    holder.callback()(lambda: None)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    return typer.main.get_command(holder).commands[name]


class _LazyGroup(TyperGroup):
    """The root group: lists :data:`COMMANDS` from the table, loads one only to run it."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return self.commands[cmd_name]

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_) for name, (_, _, help_) in COMMANDS.items()])


app = typer.Typer(name="veil", cls=_LazyGroup, no_args_is_help=True, add_completion=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="veil: privacy-preserving machine learning.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"veil {veil.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress to stderr."),
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def _usage_name(self: TyperArgument) -> str:
    """An argument in the usage line as click writes it (``CONFIG``, ``[RUN_DIR]``), not
    typer's ``{config}``."""
    name = self.display_name_raw.upper()
    return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")


TyperArgument._usage_display_name = _usage_name


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or usage, 130 interrupted)."""
    try:
        code = app(args=argv, prog_name="veil", standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except VeilError as exc:
        print_error(str(exc))
        return 2
    except click_exceptions.NoArgsIsHelpError as exc:  # `veil`, `veil fl`: the help
        exc.show()
        return 2
    except click_exceptions.UsageError as exc:
        hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        print_error(exc.format_message() + hint)
        return 2
    except click_exceptions.ClickException as exc:
        print_error(exc.format_message())
        return exc.exit_code
    except typer.Abort:
        print_error("aborted")
        return 1
    except OSError as exc:  # the file system refused (permissions, a full disk, ...)
        where = f" {exc.filename!r}" if exc.filename else ""
        print_error(f"{exc.strerror or exc}{':' if where else ''}{where}")
        return 2
    return code if isinstance(code, int) else 0

if __name__ == "__main__":
    sys.exit(main())
