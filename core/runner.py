"""Executing recorded runs, wherever they were queued: in this process, in a local worker process
(``acetui_core.worker``) or in a Slurm job (``acetui_core.slurm``).

A run reports to a *recorder*: the run store itself, or, for a cluster job that must not write the
user's SQLite file over a network file system, its job folder (imported into the store later). Both
offer the same four calls: ``claim``, ``heartbeat``, ``record_event`` and ``set_status``.

Stopping: SIGINT or SIGTERM (or a cancel request in the store) stops a run between layers and records
it ``cancelled``; a second SIGINT stops at once. SIGKILL cannot be caught: readers then find the process
gone and show the run ``interrupted`` (``acetui_core.liveness``).

Every run writes its own log file (``logs/<run id>.log`` beside the store, or in the job folder): its
events, warnings, and the traceback when it fails.
"""

from __future__ import annotations

import gc
import logging
import os
import platform
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from contextlib import ExitStack, contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import acetui_core
from acetui_core import pipeline
from acetui_core.choices import RunStatus
from acetui_core.config import RunConfig
from acetui_core.errors import Cancelled, UserError
from acetui_core.events import LayerPruned, RunFinished, Stage
from acetui_core.records import to_dict
from acetui_core.resources import ResourceSampler

if TYPE_CHECKING:
    from collections.abc import Iterable

    from acetui_core.models import Loaded

HEARTBEAT_SECONDS = 1.0  # how often a run tells its recorder it is alive
STAGE_WRITE_SECONDS = 0.5  # zero-shot reports thousands of steps: record a stage's progress at most this often
POLL_SECONDS = 0.2  # how soon a stop signal or a stored cancel request reaches the pipeline's cancel flag


class Recorder(Protocol):
    """Where a run reports: ``acetui_core.store.Store`` or a Slurm job folder."""

    def claim(self, run_id: str, env: dict | None = None) -> None: ...

    def heartbeat(self, run_id: str, resources: dict | None = None) -> bool: ...

    def cancel_requested(self, run_id: str) -> bool: ...

    def record_event(self, run_id: str, event) -> None: ...

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> bool: ...

    def masks_path(self, run_id: str) -> Path: ...


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def collect_env() -> dict:
    """Where and with what a run executes: host, platform, Python, torch, transformers and acetui versions."""
    env = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "acetui": acetui_core.__version__,
    }
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if os.environ.get("SLURM_JOB_ID"):
        env["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    return env


@contextmanager
def stop_signals(stop: threading.Event):
    """While inside, SIGINT and SIGTERM set ``stop`` (the run ends after its current layer); a second
    SIGINT raises KeyboardInterrupt at once. Only the main thread can own signals; elsewhere (the
    app's worker threads) this does nothing and the caller's ``stop`` event is the way to cancel."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _heartbeat(recorder: Recorder, run_id: str, stop: threading.Event, cancel: threading.Event):
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


@contextmanager
def run_log(path: Path | None, redirect_output: bool = False):
    """Write the run's log to ``path``: its warnings and log records, and its traceback if it fails.

    ``redirect_output`` (a worker process, which has no terminal) also sends the process's own
    stdout/stderr there, so whatever a library prints lands in the run's log."""
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1, encoding="utf-8") as log:
        saved = None
        if redirect_output:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%H:%M:%S"))
        root = logging.getLogger()
        root.addHandler(handler)
        show = warnings.showwarning

        def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show_warning
        try:
            yield log
        except BaseException as error:
            if not isinstance(error, (Cancelled, KeyboardInterrupt)):
                log.write("".join(traceback.format_exception(error)))
            raise
        finally:
            warnings.showwarning = show
            root.removeHandler(handler)
            if saved is not None:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])


def log_line(log, event) -> None:
    """One line per event worth reading in a run's log."""
    if log is None:
        return
    stamp = time.strftime("%H:%M:%S")
    if isinstance(event, Stage) and (event.done == 0 or event.done == event.total):
        line = f"{event.name} {event.done}/{event.total if event.total is not None else '?'}"
    elif isinstance(event, LayerPruned):
        line = event.layer.line
    elif isinstance(event, RunFinished):
        ppl = event.result.ppl_wikitext2
        line = f"finished: prune {event.result.prune_seconds:.1f} s, ppl {'-' if ppl is None else f'{ppl:.3f}'}"
    else:
        return
    log.write(f"{stamp} {line}\n")


class ModelCache:
    """The model of consecutive runs, loaded once and reset to its dense weights between runs.

    Resetting needs a copy of the dense decoder weights, taken only when a later run of the queue
    (``configs``) uses the same model: a single run would otherwise hold its decoder weights twice
    (on SmolLM2, 425 MB of a 2.5 GB peak)."""

    def __init__(self, configs: Iterable[RunConfig] = ()):
        self.key: tuple | None = None
        self.loaded: Loaded | None = None
        self.pending = Counter(_model_key(config) for config in configs)

    def get(self, config: RunConfig, on_event=None):
        from acetui_core.streaming import load_for_run

        key = _model_key(config)
        self.pending[key] -= 1
        if key == self.key and self.loaded is not None and self.loaded.can_reset:
            self.loaded.reset(keep_copy=self.pending[key] > 0)
            return self.loaded
        self.key = self.loaded = None
        gc.collect()  # let the previous model go before the next one arrives
        loaded = load_for_run(
            config.model, device=config.device, dtype=config.dtype, offload=config.offload, on_event=on_event
        )
        if self.pending[key] > 0:
            loaded.snapshot()
        self.key, self.loaded = key, loaded
        return loaded


def _model_key(config: RunConfig) -> tuple:
    return (config.model, config.device, config.dtype, config.offload)


def execute(
    recorder: Recorder,
    run_id: str,
    config: RunConfig,
    *,
    on_event=None,
    stop: threading.Event | None = None,
    models: ModelCache | None = None,
    log: Path | None = None,
    redirect_output: bool = False,
) -> None:
    """Claim ``run_id``, load the model (from ``models`` when consecutive runs share it), run ``config``
    and record how it ended.

    Each event is recorded before it is forwarded to ``on_event``, so whatever a listener is told is
    already committed. Cancelled, KeyboardInterrupt and failures are recorded, then re-raised.
    """
    recorder.claim(run_id, collect_env())
    last_stage_write = [0.0]
    cancel = threading.Event()
    with ExitStack() as stack:
        log_file = stack.enter_context(run_log(log, redirect_output))

        def record(event):
            log_line(log_file, event)
            throttled = isinstance(event, Stage) and event.done not in (0, event.total)
            if not throttled or time.monotonic() - last_stage_write[0] >= STAGE_WRITE_SECONDS:
                if throttled:
                    last_stage_write[0] = time.monotonic()
                recorder.record_event(run_id, event)
            if on_event is not None:
                on_event(event)

        if stop is None:
            stop = threading.Event()
            stack.enter_context(stop_signals(stop))
        stack.enter_context(_heartbeat(recorder, run_id, stop, cancel))
        try:
            pipeline.run(
                config,
                record,
                cancel,
                loaded=models.get(config, record) if models else None,
                masks_path=recorder.masks_path(run_id),
                run_id=run_id,
                checked=True,  # by launch.queue, before the run was recorded
            )
        except Cancelled:
            recorder.set_status(run_id, RunStatus.CANCELLED, error="Stopped on request between layers.")
            raise
        except KeyboardInterrupt:
            recorder.set_status(run_id, RunStatus.CANCELLED, error="Stopped at once by a second interrupt.")
            raise
        except UserError as error:
            recorder.set_status(run_id, RunStatus.FAILED, error=str(error))
            raise
        except BaseException as error:
            where = f" (traceback in {log})" if log else ""
            recorder.set_status(run_id, RunStatus.FAILED, error=f"{type(error).__name__}: {error}{where}")
            raise


def run_queue(
    store, run_ids: list[str], *, on_event=None, stop: threading.Event | None = None, redirect_output: bool = False
) -> None:
    """Run the queued runs ``run_ids`` of ``store`` one after another in this process, loading each
    model once.

    A run cancelled from outside (``Store.request_cancel``) or failing does not stop the queue. A stop
    signal (or ``stop``) cancels the current run and every run still queued, then raises ``Cancelled``;
    a stop that came too late to cancel any run (after the last layer of the last run, say) raises
    nothing: what the caller then says must be what the store holds. ``on_event(run_id, event)`` sees
    every event.
    """
    models = ModelCache([store.get_run(run_id, layers=False).config for run_id in run_ids])
    with ExitStack() as stack:
        if stop is None:
            stop = threading.Event()
            stack.enter_context(stop_signals(stop))
        try:
            for run_id in run_ids:
                if stop.is_set():
                    break
                run = store.get_run(run_id, layers=False)
                if run.status != RunStatus.QUEUED:
                    continue  # cancelled while it waited
                forward = None if on_event is None else (lambda event, run_id=run_id: on_event(run_id, event))
                try:
                    execute(
                        store,
                        run_id,
                        run.config,
                        on_event=forward,
                        stop=stop,
                        models=models,
                        log=store.log_path(run_id),
                        redirect_output=redirect_output,
                    )
                except Cancelled:
                    pass  # recorded; the queue goes on unless it was stopped as a whole
                except Exception:
                    continue
        except KeyboardInterrupt:
            stop.set()
            raise
        finally:
            if stop.is_set():
                for run_id in run_ids:
                    store.set_status(
                        run_id, RunStatus.CANCELLED, error="The queue was stopped before this run started."
                    )
    if stop.is_set() and any(store.get_run(run_id, layers=False).status == RunStatus.CANCELLED for run_id in run_ids):
        raise Cancelled()
