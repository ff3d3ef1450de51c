"""``acetui study run|status|report STUDY.toml``: a comparison declared in one file (``acetui_core.studies.study``),
run until every cell has a finished run (resuming from the store after any interruption), listed by
state, and reported as one folder of tables, figures and sentences (``acetui_core.studies.studyreport``)."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from acetui import options
from acetui.commands.runs import run_summary
from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import Cancelled, UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.paths import user_path
from acetui_core.execution import jobfolder
from acetui_core.execution.launch import LocalProcesses, gpus_for, launch, run_and_wait
from acetui_core.run.config import RunConfig
from acetui_core.run.events import RunStarted
from acetui_core.storage.store import Store
from acetui_core.storage.store_db import store_path
from acetui_core.studies.study import (
    DONE,
    FAILED,
    INTERRUPTED,
    MISSING,
    RUNNING,
    STATES,
    Study,
    cell_states,
    cell_text,
    load_study,
    shown_run,
)
from acetui_core.studies.studylock import study_lock

study_app = typer.Typer(
    cls=options.Group,
    help="Studies: a comparison declared in one TOML file of run settings (a list is an axis), run, resumed "
    "and reported as one folder.",
    no_args_is_help=True,
)

StudyFile = Annotated[Path, typer.Argument(help="The study: a TOML file of run settings; a list is an axis.")]
POLL_SECONDS = 2.0  # how often a study waits on runs of another process


class StudyProgress:
    """One bar for the whole study (cells ended, elapsed, ETA), the current run named beside it, and a line
    for each cell as it ends (what a log of a `study run` left under nohup shows, where no bar is drawn).
    Runs in this process report through their events; runs of workers on several GPUs, of cluster jobs or
    of another `study run` are followed through the store (``watch``, ``wait_for``)."""

    def __init__(self, total: int, ended: int, store: Store, axes=()):
        self.store, self.axes, self.total, self.ended_before = store, axes, total, ended
        self.bar = Progress(
            TextColumn("[bold]study[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),  # stdout is for what scripts read (--detach's run ids)
            transient=False,
        )
        self.task = self.bar.add_task("", total=total, completed=ended)
        self.ended_runs: set[str] = set()
        self.current: str | None = None

    def __enter__(self) -> StudyProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def cell_ended(self, run_id: str) -> None:
        """Count the cell of ``run_id`` as ended (once) and say how its run ended."""
        if run_id in self.ended_runs:
            return
        self.ended_runs.add(run_id)
        done = self.ended_before + len(self.ended_runs)
        self.bar.update(self.task, completed=done)
        run = self.store.get_run(run_id, layers=False)
        line = f"[{done}/{self.total}] {cell_text(run.config, self.axes)}: {run_summary(run)}"
        self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line, greppable

    def __call__(self, run_id: str, event) -> None:
        """An in-process run's event: a new run ends the previous one on the bar."""
        if run_id != self.current:
            if self.current is not None:
                self.cell_ended(self.current)
            self.current = run_id
        if isinstance(event, RunStarted):
            config = self.store.get_run(run_id, layers=False).config
            self.bar.update(self.task, description=cell_text(config, self.axes))

    def poll(self, run_ids: list[str], *, stopped: bool = False) -> bool:
        """Count the runs of ``run_ids`` that have ended; True once none is active. After a stop
        (``stopped``), the runs it cancelled are not cells that ended (the stop says how many), but one that
        finished as it came is."""
        active = False
        for run in self.store.list_runs(ids=run_ids):
            if run.active:
                active = True
            elif not (stopped and run.status == RunStatus.CANCELLED):
                self.cell_ended(run.id)
        return not active

    def watch(self, run_ids: list[str], workers: list):
        """How ``run_and_wait`` follows the workers of several GPUs: through the store."""
        self.bar.console.print(f"{len(run_ids)} runs on {len(workers)} GPUs (logs in {self.store.folder / 'logs'}).")
        return lambda: self.poll(run_ids)

    def wait_for(self, run_ids: list[str]) -> None:
        """Wait until none of ``run_ids`` is active (runs of another process, or cluster jobs)."""
        while True:
            jobfolder.sync(self.store)  # cluster runs report through their job folders
            if self.poll(run_ids):
                return
            time.sleep(POLL_SECONDS)


@contextmanager
def _stopped_at_once(where: Callable[[], str]) -> Iterator[None]:
    """While this process only checks or waits (nothing of its own under way, nothing recorded), Ctrl-C or
    SIGTERM end it at once: ``Cancelled`` with no run cancelled, and ``where()`` saying what it was doing and
    what goes on (as the stop finds it), for the CLI's sentence and its exit code (130, 143). SIGTERM's default would end the
    process without a word, and Ctrl-C's KeyboardInterrupt would be told as a run recorded cancelled.
    Only the main thread can own signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals: list[int] = []

    def stop(signum, frame):
        signals.append(signum)
        # not Cancelled itself: the checks of a model or a file turn any Exception into their own sentence
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        if not signals:
            raise
        raise Cancelled(where(), signum=signals[0], cancelled=0) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _going_on(store: Store, run_ids: list[str], study_file: Path) -> str:
    """Where a stop found a study that waited for ``run_ids`` (of other processes, or cluster jobs): the
    ones still under way, which the stop leaves going."""
    going = sum(1 for run in store.list_runs(ids=run_ids) if run.active)
    runs = f"{going} run{'s' if going != 1 else ''}"
    return f"while waiting for {runs} under way elsewhere, which go on (acetui study status {study_file})"


def _load(study_file: Path) -> Study:
    """The study a command names; a folder is not one (it was called a study file that does not exist)."""
    if study_file.is_dir():
        raise UserError(f"{study_file} is a folder, not a study file; name the study's TOML file.")
    return load_study(study_file)


def _recorded_cells(study: Study, opened: Store | None) -> list[RunConfig]:
    """The study's cells as status and report read them (``Study.recorded_cells``); a model that is gone is
    said, as what was not checked."""
    cells, gone = study.recorded_cells(opened)
    for model in gone:
        print(
            f"The model {model} does not exist any more: its cells are matched to the store's runs by their "
            f"settings alone, its files not compared with those the runs read (acetui study run needs it back).",
            file=sys.stderr,
        )
    return cells


@study_app.command("run", cls=options.Command)
@options.with_executor
def run(
    study_file: StudyFile,
    *,
    detach: bool = False,
    cluster=None,
    store: options.StoreOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="When another `study run` is under way on the store, wait for it to end.")
    ] = False,
) -> None:
    """Run the study's cells that have no finished run in the store (and rerun those that failed or were
    interrupted); wait for a cell another process is still running; return when every cell has ended
    (with --detach: once the runs are queued). One `study run` on a store at a time: a second is refused,
    naming the first (or, with --wait, waits for it)."""
    with ExitStack() as held:
        with _stopped_at_once(lambda: "before it started a run"):
            study = _load(study_file)
            path = store_path(store)
            cells = study.cells(path, local_device=cluster is None)  # checked before a store is made
            opened = Store(path)
            on_wait = lambda sentence: print(sentence, file=sys.stderr)  # noqa: E731
            held.enter_context(study_lock(opened.path, study_file, wait=wait, on_wait=on_wait))
            states = cell_states(cells, opened)
        _run(study, cells, states, study_file, opened, detach, cluster)


def _run(
    study: Study, cells: list[RunConfig], states: list, study_file: Path, opened: Store, detach: bool, cluster
) -> None:
    counts = {state: sum(1 for _, s, _ in states if s == state) for state in STATES}
    if counts[DONE] == len(cells):
        print(f"All {len(cells)} cells of {study.name} have a finished run; nothing to run.", file=sys.stderr)
        return
    todo = [cell for cell, state, _ in states if state not in (DONE, RUNNING)]  # missing, failed, interrupted
    others = [runs[-1].id for _, state, runs in states if state == RUNNING]
    print(
        f"{study.name}: {len(cells)} cells, {counts[DONE]} done, {len(todo)} to run "
        f"({counts[FAILED]} again after a failure, {counts[INTERRUPTED]} after an interruption), "
        f"{len(others)} running elsewhere (waited for).",
        file=sys.stderr,
    )
    executor = cluster or LocalProcesses(detach=True, gpus=gpus_for(cells[0].device))
    if detach:
        print("\n".join(launch(todo, executor, opened, checked=True)))
        print(f"Queued; follow with: acetui study status {study_file}", file=sys.stderr)
        return
    stopped: Cancelled | None = None
    with StudyProgress(len(cells), counts[DONE], opened, tuple(study.axes)) as progress:
        if cluster is not None:  # a job array: followed through the store and its job folders
            others += launch(todo, cluster, opened, checked=True)
        elif todo:
            run_ids, stopped = run_and_wait(
                todo, opened, executor, on_event=progress, watch=progress.watch, checked=True
            )
            # the last run (its end is told by the next run's first event, which a stop never sends), and
            # any that ended before its first event
            progress.poll(run_ids, stopped=stopped is not None)
        if stopped is None:
            with _stopped_at_once(lambda: _going_on(opened, others, study_file)):
                progress.wait_for(others)
    if stopped is not None:  # its signal sets the exit code (143 for SIGTERM, 130 for Ctrl-C)
        stopped.cancelled = sum(1 for r in opened.list_runs(ids=run_ids) if r.status == RunStatus.CANCELLED)
        raise stopped
    final = cell_states(cells, opened)
    for _, state, runs in final:
        if state != DONE and runs:
            print(run_summary(runs[-1]), file=sys.stderr)
    ended = {state: sum(1 for _, s, _ in final if s == state) for state in STATES}
    print(
        f"{study.name}: {ended[DONE]} of {len(cells)} cells done, {ended[FAILED]} failed, "
        f"{ended[INTERRUPTED]} interrupted.",
        file=sys.stderr,
    )
    if ended[DONE] != len(cells):
        raise typer.Exit(1)


@study_app.command("status", cls=options.Command)
def status(study_file: StudyFile, store: options.StoreOption = None, as_json: options.JsonOption = False) -> None:
    """List the study's cells: done, running, failed, interrupted or missing, with their run (a done cell's
    newest finished one, the report's; another cell's newest)."""
    study = _load(study_file)
    path = store_path(store)
    opened = Store(path, create=False) if path.exists() else None
    cells = _recorded_cells(study, opened)
    if opened is not None:
        states = cell_states(cells, opened)
    else:  # before the first `study run`: every cell is missing, and a status makes no store
        print(f"No run store at {path} yet: no cell has a run.", file=sys.stderr)
        states = [(cell, MISSING, []) for cell in cells]
    if as_json:
        rows = [
            {"state": state, "run": run.id if (run := shown_run(state, runs)) else None, "config": cell.to_dict()}
            for cell, state, runs in states
        ]
        print(json_text(rows))
        return
    if study.common:  # said once, as the Results screen's "Every run:"
        shared = ", ".join(f"{name} = {value}" for name, value in study.common.items())
        print(f"Every cell of {study.name}: {shared}", file=sys.stderr)
    for cell, state, runs in states:
        shown = shown_run(state, runs)
        error = f": {shown.error}" if shown is not None and shown.status != RunStatus.FINISHED and shown.error else ""
        print(f"{state:<11} {shown.id if shown else '-':<8}  {cell_text(cell, tuple(study.axes))}{error}")
    counts = {state: sum(1 for _, s, _ in states if s == state) for state in STATES}
    print(", ".join(f"{counts[state]} {state}" for state in STATES) + f" of {len(states)} cells.", file=sys.stderr)


@study_app.command("report", cls=options.Command)
def report(
    study_file: StudyFile,
    output: Annotated[str, typer.Option("--output", "-o", help="The report's folder (made if missing).")],
    store: options.StoreOption = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace files already in the folder under the report's names (an earlier report's)."
        ),
    ] = False,
) -> None:
    """Write the study's report from the store alone: tables (LaTeX, Markdown, CSV) with verdicts, figures,
    the environment and summary.md."""
    from acetui_core.studies.studyreport import write_report

    if not output.strip():  # an unset variable: never the working folder
        raise UserError("-o is empty; give the report's folder.")
    study = _load(study_file)
    opened = Store(store, create=False)
    written = write_report(study, _recorded_cells(study, opened), opened, user_path(output), overwrite)
    print("\n".join(str(path) for path in written.files))
    if written.unfinished:  # also atop summary.md: the report is not the whole study
        print(written.unfinished, file=sys.stderr)
