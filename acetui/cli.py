"""The ``acetui`` command: every subcommand is registered here, in one place, and the app opens when no
subcommand is given. Command modules define plain functions; none of them imports this module."""

from __future__ import annotations

import signal
import sys

import typer

from acetui import options
from acetui.commands import app as workbench
from acetui.commands import evaluate, export, figure, grid, methods, overlap, plan, prune, runs, study
from acetui_core.basics.errors import Cancelled, UserError, os_sentence
from acetui_core.execution.heartbeat import TERMINATED

app = typer.Typer(
    cls=options.Group,
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    help="A terminal workbench for post-training pruning of LLMs (ACE, Wanda, RIA, SparseGPT, magnitude).",
)
app.callback(invoke_without_command=True)(workbench.workbench)
app.command(cls=options.Command)(prune.prune)
app.command(cls=options.Command)(grid.compare)
app.command(cls=options.Command)(grid.sweep)
app.command("export", cls=options.Command)(export.export_runs)
app.command(cls=options.Command)(export.verdict)
app.command(cls=options.Command)(figure.figure)
app.command("eval", cls=options.Command)(evaluate.eval_command)
app.command(cls=options.Command)(methods.methods)
app.command(cls=options.Command)(overlap.overlap)
app.command(cls=options.Command)(plan.plan)
app.command(cls=options.Command)(workbench.attach)
app.add_typer(runs.runs_app, name="runs")
app.add_typer(study.study_app, name="study")


def fail(message: str) -> None:
    """Print one sentence on stderr and exit 2: the contract for every bad input. A path's bytes that are
    not UTF-8 print as "�" (a stderr that refuses them would turn the sentence into a traceback)."""
    readable = message.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    print(f"acetui: {readable}", file=sys.stderr)
    raise SystemExit(2)


def _usage_sentence(error: typer.TyperException) -> str:
    """Typer's usage errors (unknown option, missing value...) as one sentence, without its boxed help."""
    message = " ".join(error.format_message().split())
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "acetui"
    return f"{message.rstrip('.')}; see {command} --help."


def _interrupted(message: str, signum: int = signal.SIGINT) -> None:
    """Exit as a process ended by ``signum`` says it was: 130 for Ctrl-C, 143 for SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # one more Ctrl-C must not turn this into a traceback
    print(f"acetui: {message}", file=sys.stderr)
    raise SystemExit(128 + signum)


def _stopped_sentence(stopped: Cancelled) -> str:
    """What a stop left: one run, or a queue of them (a grid's, a study's), recorded as cancelled."""
    if stopped.cancelled == 1:
        return "stopped; the run is recorded as cancelled (acetui runs lists it)."
    if stopped.cancelled == 0:  # a stop of a command that was checking or waiting: where says what goes on
        return f"stopped{f' {stopped.where}' if stopped.where else ''}; no run is recorded as cancelled."
    return (
        f"stopped; {stopped.cancelled} runs are recorded as cancelled: those under way and those still queued "
        "(acetui runs lists them)."
    )


def main() -> None:
    try:
        code = app(prog_name="acetui", standalone_mode=False)
    except Cancelled as stopped:  # the first Ctrl-C or SIGTERM (or a cancel request): the run stopped at a check
        _interrupted(_stopped_sentence(stopped), stopped.signum or signal.SIGINT)
    except typer.TyperException as error:
        fail(_usage_sentence(error))
    except typer.Abort:
        fail("interrupted.")
    except UserError as error:
        fail(str(error))
    except OSError as error:
        fail(os_sentence(error))
    if code == 130:  # Typer's answer to KeyboardInterrupt: a second Ctrl-C, or one (or a SIGTERM) outside a run
        signum = signal.SIGTERM if TERMINATED.is_set() else signal.SIGINT
        _interrupted("interrupted; any run under way is recorded as cancelled.", signum)  # true outside a run too
    raise SystemExit(code if isinstance(code, int) else 0)
