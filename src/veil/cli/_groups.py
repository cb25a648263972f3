"""A command group with a default sub-command: ``veil anonymize IN.csv`` runs
``veil anonymize run IN.csv`` and ``veil audit RUN_DIR`` runs ``veil audit run RUN_DIR``,
while ``veil anonymize check ...`` and ``veil audit conformance`` name their own."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup


class DefaultGroup(TyperGroup):
    """Runs the ``run`` sub-command when the first argument names no sub-command (options
    included: ``veil audit --model M.npz``), or when there is none and the group does not
    show its help then; ``--help`` alone is the group's help."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if (args and args[0] not in self.commands and args[0] not in ctx.help_option_names
                or not args and not self.no_args_is_help):
            args = ["run", *args]
        return super().parse_args(ctx, args)
