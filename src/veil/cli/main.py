"""Entry point of the ``veil`` command: ``veil <area> <verb>``.

Every sub-command raises :class:`~veil.errors.VeilError` for bad input; :func:`main`
prints its message as one line (no traceback) and exits with status 2, as it does for usage
errors (an unknown option, a value of the wrong type) and for files the system refuses.
Help is plain text: nothing in it is read as console markup.
"""

from __future__ import annotations

import logging
import sys

import typer

try:  # typer >= 0.21 vendors click as typer._click; older typer (flwr pins it) uses click
    from typer._click import exceptions as click_exceptions
except ImportError:
    from click import exceptions as click_exceptions
from typer.core import TyperArgument

import veil
from veil.cli import anon, audit, budget, datasets, demo, dp, experiment, fl, he, mpc, net, predict
from veil.cli import synth as synth_cli
from veil.cli._output import print_error
from veil.errors import VeilError

app = typer.Typer(name="veil", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="veil: privacy-preserving machine learning.")
app.add_typer(datasets.app, name="datasets")
app.add_typer(budget.app, name="budget")
app.command("audit")(audit.audit)
app.add_typer(anon.app, name="anonymize")
app.add_typer(fl.app, name="fl")
app.add_typer(dp.app, name="dp")
app.command("demo")(demo.demo)
app.add_typer(experiment.app, name="experiment")
app.add_typer(he.app, name="he")
app.command("predict")(predict.predict)
app.add_typer(net.app, name="net")
app.add_typer(mpc.app, name="mpc")
app.command("psi")(net.psi)
app.command("keygen")(net.keygen)
app.add_typer(synth_cli.app, name="synth")


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
