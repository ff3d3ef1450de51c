"""The ``acetui`` command: headless subcommands, and the app when run with no subcommand."""

from __future__ import annotations

import sys

import typer

from acetui_core.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    help="A terminal workbench for post-training pruning of LLMs (ACE, Wanda, RIA, SparseGPT, magnitude).",
)


def fail(message: str) -> None:
    """Print one sentence on stderr and exit 2: the contract for every bad input."""
    print(f"acetui: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    from acetui import commands  # noqa: F401  (registers the subcommands on ``app``)

    try:
        app(prog_name="acetui")
    except UserError as error:
        fail(str(error))
    except KeyboardInterrupt:
        print("acetui: interrupted.", file=sys.stderr)
        raise SystemExit(130)
