"""Entry point of the ``veil`` command: ``veil <area> <verb>``.

Every sub-command raises :class:`~veil.errors.VeilError` for bad input; :func:`main`
prints its message (no traceback) and exits with status 2.
"""

from __future__ import annotations

import logging
import sys

import typer

import veil
from veil.cli import anon, audit, budget, datasets, demo, dp, experiment, fl, he
from veil.cli._output import err_console
from veil.errors import VeilError

app = typer.Typer(name="veil", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False,
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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or usage)."""
    try:
        app(args=argv, prog_name="veil")
    except SystemExit as exc:  # typer ends every run, and every usage error, this way
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except VeilError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        return 2
    return 0

if __name__ == "__main__":
    sys.exit(main())
