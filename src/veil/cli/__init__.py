"""The ``veil`` command line (typer + rich)."""
