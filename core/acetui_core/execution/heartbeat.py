"""A run's contact with the world around it while it executes: the recorder it reports to, a heartbeat
thread that tells the recorder the run is alive (with a sample of its resources) and hears its cancel
requests, and the stop signals. Either one stops the pipeline at its next check (between layers,
calibration windows, evaluation batches), and the store records who asked and how far the run got.

SIGINT or SIGTERM stop a run at its next check; a second SIGINT stops it at once. SIGHUP (the terminal
is gone: a dropped SSH session, a closed window) does not stop it: the run goes on and is recorded, its
output goes nowhere. SIGKILL cannot be caught: readers then find the process gone and show the run
``interrupted`` (``acetui_core.storage.liveness``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.resources import ResourceSampler
from acetui_core.run.events import Event
from acetui_core.run.records import to_dict

HEARTBEAT_SECONDS = 1.0  # how often a run tells its recorder it is alive
POLL_SECONDS = 0.2  # how soon a stop signal or a stored cancel request reaches the pipeline's cancel flag


class Recorder(Protocol):
    """Where a run reports: ``acetui_core.storage.store.Store`` or a Slurm job folder."""

    def claim(self, run_id: str, env: dict | None = None) -> None: ...

    def heartbeat(self, run_id: str, resources: dict | None = None) -> bool: ...

    def cancel_requested(self, run_id: str) -> bool: ...

    def record_event(self, run_id: str, event: Event) -> None: ...

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> bool: ...

    def masks_path(self, run_id: str) -> Path: ...


class Stop(threading.Event):
    """A request to stop runs, and the signal that made it (``signum``; None when the app or a script set it)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None


class Either:
    """What the pipeline checks: set when either event is (a stop signal, or this run's cancel request),
    so a signal is heard at the pipeline's next check, not at the heartbeat's next poll."""

    def __init__(self, *events: threading.Event):
        self.events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self.events)


SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}


def stopped_by(stop: threading.Event) -> str:
    """Who asked a run to stop, for the sentence the store records."""
    signum = getattr(stop, "signum", None) if stop.is_set() else None
    return f"by {SIGNAL_NAMES.get(signum, f'signal {signum}')}" if signum else "on request"


@contextmanager
def stop_signals(stop: Stop):
    """While inside, SIGINT and SIGTERM set ``stop`` and say which (the run ends at its next check: before
    its next layer, calibration window or evaluation batch); a second SIGINT raises KeyboardInterrupt
    at once; SIGHUP leaves the runs going, their output silenced. Only the main thread can own signals; elsewhere (the app's worker threads) this does
    nothing and the caller's ``stop`` event is the way to cancel."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.signum = stop.signum or signum
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGHUP] = signal.getsignal(signal.SIGHUP)
    outlive_hangup()
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def outlive_hangup() -> None:
    """From now on a hang-up (SIGHUP) silences this process's terminal instead of ending the process. Not
    under nohup (which chose for itself), nor twice. The ``acetui`` command calls it first of all: importing
    the CLI takes seconds, and a dropped SSH session right after Enter must not kill the command just typed."""
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:
        # asked now: a terminal that has hung up no longer says it is one
        terminals = [stream for stream in (1, 2) if os.isatty(stream)]
        signal.signal(signal.SIGHUP, lambda signum, frame: _hung_up(terminals))


# SIGTERM came while no run held the stop signals (``interrupt_on_terminate``): the command's exit says so
TERMINATED = threading.Event()


def interrupt_on_terminate() -> None:
    """From now on, wherever no run holds the stop signals (``stop_signals``), SIGTERM interrupts the command
    as Ctrl-C does, so it says so in a line and exits 143: by default it ended a command still starting
    (importing the CLI, checking a model) without a word. The ``acetui`` command calls it first of all."""

    def handler(signum, frame):
        TERMINATED.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def end_on_hangup() -> None:
    """Undo ``outlive_hangup`` and ``interrupt_on_terminate`` where a process must end with its terminal:
    the app, which has nothing to do without one (the runs it started are processes of their own and go on)."""
    if signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _hung_up(terminals: list[int]) -> None:
    """The terminal is gone. Its default would kill the run where it stands, hours of work with it, and
    writing to a terminal that is gone fails: what went to it (``terminals``, of stdout and stderr) goes
    to the null device and the run goes on, to be found finished in the store (``acetui runs``, the app).
    Output sent to a file or a pipe (``prune --json > result.json``) still reaches it."""
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in terminals:
        os.dup2(null, stream)
    os.close(null)


@contextmanager
def heartbeat(recorder: Recorder, run_id: str, stop: threading.Event, cancel: threading.Event):
    """A thread that beats for the run, with a sample of the resources its process uses, and turns a stop
    signal or a cancel request into ``cancel``."""
    done = threading.Event()
    sampler = ResourceSampler()

    def beat():
        last = 0.0
        while not done.wait(POLL_SECONDS):
            try:
                if time.monotonic() - last >= HEARTBEAT_SECONDS:
                    last = time.monotonic()
                    requested = recorder.heartbeat(run_id, to_dict(sampler.sample()))
                else:
                    requested = recorder.cancel_requested(run_id)
            except UserError:
                requested = False  # the store stayed locked for its busy timeout; the next poll tries again
            if stop.is_set() or requested:
                cancel.set()

    thread = threading.Thread(target=beat, name=f"acetui-heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
