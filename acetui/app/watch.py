"""Store polling loops, run in Textual thread workers: each reads the store at an interval and posts
a message only when what it reads has changed. They stop when the worker is cancelled (the screen
that owns them goes away, or starts following another run)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from textual.message import Message

from acetui.app.messages import LogLines, RunProgress, RunsListed, StoreFailed
from acetui_core.basics.errors import UserError
from acetui_core.execution import jobfolder
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord

RUN_INTERVAL = 0.3  # seconds between reads of a followed run (a cheap query without layers)
LIST_INTERVAL = 1.0  # seconds between reads of the run list
LOG_INTERVAL = 0.5  # seconds between looks at a run's log file
LOG_TAIL_BYTES = 64 * 1024  # how much of an existing log is shown at first: its end

# read() returns the message to post (None when nothing changed) and whether polling is over.
Reader = Callable[[], tuple[Message | None, bool]]


def _poll(read: Reader, post: Callable[[Message], object], stop: threading.Event, interval: float) -> None:
    last_error = None
    while not stop.is_set():
        try:
            message, done = read()
        except UserError as error:  # e.g. the store file became unreadable, or the run was deleted
            message, done = (StoreFailed(str(error)) if str(error) != last_error else None), False
            last_error = str(error)
        if message is not None:
            post(message)
        if done:
            return
        stop.wait(interval)


def _run_key(run: RunRecord) -> tuple:
    return (
        run.status,
        run.layers_done,
        run.current_layer,
        repr(run.stage),
        run.error,
        bool(run.results),
        run.cancel_requested,
        run.num_layers,
        (run.resources or {}).get("taken"),
    )


def follow_run(store: Store, run_id: str, post, stop: threading.Event, interval: float = RUN_INTERVAL) -> None:
    """Post ``RunProgress`` whenever the run changes, with the layers recorded since the previous post;
    return once the run has ended and everything it recorded has been posted."""
    seen = {"key": None, "last_layer": -1}

    def read():
        jobfolder.sync(store)  # a cluster run reports through its job folder
        run = store.get_run(run_id, layers=False)
        key = _run_key(run)
        if key == seen["key"]:
            return None, False
        seen["key"] = key
        layers = store.layers_since(run_id, after=seen["last_layer"])
        if layers:
            seen["last_layer"] = layers[-1].index
        return RunProgress(run, layers), not run.active

    _poll(read, post, stop, interval)


def watch_runs(store: Store, post, stop: threading.Event, interval: float = LIST_INTERVAL) -> None:
    """Post ``RunsListed`` whenever the set of runs or any run's status or progress changes."""
    seen = {"key": None}

    def read():
        jobfolder.sync(store)
        runs = store.list_runs()
        key = tuple((run.id, run.status, run.layers_done, run.error, run.cancel_requested) for run in runs)
        if key == seen["key"]:
            return None, False
        seen["key"] = key
        return RunsListed(runs), False

    _poll(read, post, stop, interval)


def _lines(data: bytes) -> list[str]:
    """Log bytes as display lines; a line rewritten with carriage returns (a progress bar) shows its
    last state, as a terminal would."""
    return [line.rstrip(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", "replace") for line in data.split(b"\n")]


def tail_log(
    run_id: str, path: Path, post, stop: threading.Event, ended: threading.Event, interval: float = LOG_INTERVAL
) -> None:
    """Post ``LogLines`` with what the run's log file gains, starting with its last ``LOG_TAIL_BYTES``.
    Once ``ended`` is set (the run ended), read what is left and return."""
    offset, partial, told_missing = None, b"", False
    while not stop.is_set():
        last_look = ended.is_set()
        try:
            with open(path, "rb") as log:
                size = log.seek(0, 2)
                cut = offset is None and size > LOG_TAIL_BYTES
                offset = max(0, size - LOG_TAIL_BYTES) if offset is None or size < offset else offset
                log.seek(offset)
                data = log.read()
                offset += len(data)
        except FileNotFoundError:
            if not told_missing:
                post(LogLines(run_id, [], missing=True))
                told_missing = True
            data, cut = b"", False
        except OSError as error:
            post(LogLines(run_id, [f"The log file {path} cannot be read: {error.strerror or error}."]))
            return
        lines = (partial + data).split(b"\n")
        partial = lines.pop()
        if cut:
            lines = lines[1:]  # the first line was cut in the middle
        if lines:
            post(LogLines(run_id, _lines(b"\n".join(lines))))
        if last_look:
            if partial:
                post(LogLines(run_id, _lines(partial)))
            return
        stop.wait(interval)
