"""Executing recorded runs, wherever they were queued: in this process, in a local worker process
(``acetui_core.execution.worker``) or in a Slurm job (``acetui_core.execution.slurm``).

A run reports to a *recorder*: the run store itself, or, for a cluster job that must not write the
user's SQLite file over a network file system, its job folder (imported into the store later). Both
offer the same four calls: ``claim``, ``heartbeat``, ``record_event`` and ``set_status``.

How a stop reaches a run (signals, cancel requests, the heartbeat) is ``acetui_core.execution.heartbeat``; its log
file, ``acetui_core.execution.runlog``; the model kept between consecutive runs, ``acetui_core.execution.modelcache``.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
from contextlib import ExitStack
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import acetui_core
from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import Cancelled, UserError
from acetui_core.execution.heartbeat import Either, Recorder, Stop, heartbeat, stop_signals, stopped_by
from acetui_core.execution.modelcache import ModelCache
from acetui_core.execution.runlog import log_line, run_log
from acetui_core.pruning import pipeline
from acetui_core.run.config import RunConfig
from acetui_core.run.events import OnEvent, OnRunEvent, Stage
from acetui_core.storage.store_db import StoreLocked

STAGE_WRITE_SECONDS = 0.5  # zero-shot reports thousands of steps: record a stage's progress at most this often


def package_version(package: str) -> str | None:
    """The installed version of ``package``, None where it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None


# The installed packages whose version can move a number a run reports: the model's arithmetic (torch,
# transformers, accelerate), how a GGUF is dequantized (gguf, numpy) and a checkpoint read (safetensors),
# how text becomes tokens (tokenizers), the data and zero-shot tasks (datasets, lm-eval) and the
# statistics of a comparison (scipy). A fresh install's newer releases moved the README's set-up perplexity.
NUMERIC_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "accelerate",
    "safetensors",
    "gguf",
    "numpy",
    "datasets",
    "lm-eval",
    "scipy",
)


def collect_env() -> dict:
    """Where and with what a run executes: host, platform, Python, acetui, and the version of every
    package that can move a number (``NUMERIC_PACKAGES``)."""
    env = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{package: package_version(package) for package in NUMERIC_PACKAGES},
        "acetui": acetui_core.__version__,
        "mkl_cbwr": os.environ.get("MKL_CBWR"),  # the CPU products' code path (acetui_core sets AVX2,STRICT)
    }
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    if os.environ.get("SLURM_JOB_ID"):
        env["slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    return env


LOCKED_PATIENCE = 3600.0  # seconds a run waits to record an event while another process holds the store


def record_patiently(recorder: Recorder, run_id: str, event, log_file=None, patience: float = LOCKED_PATIENCE) -> None:
    """Record ``event``, waiting while another process holds the store's write lock (a backup, a `sqlite3`
    session): a run that failed there after ``BUSY_TIMEOUT`` lost the layers it had pruned. Past
    ``patience`` it fails as before."""
    started, said = time.monotonic(), False
    while True:
        try:
            recorder.record_event(run_id, event)
            return
        except StoreLocked:
            if time.monotonic() - started >= patience:
                raise
            if log_file is not None and not said:
                log_file.write(f"{time.strftime('%H:%M:%S')} the run store is locked by another process; waiting\n")
                said = True


def execute(
    recorder: Recorder,
    run_id: str,
    config: RunConfig,
    *,
    on_event: OnEvent | None = None,
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
                record_patiently(recorder, run_id, event, log_file)
            if on_event is not None:
                on_event(event)

        if stop is None:
            stop = Stop()
            stack.enter_context(stop_signals(stop))
        stack.enter_context(heartbeat(recorder, run_id, stop, cancel))
        try:
            pipeline.run(
                config,
                record,
                Either(stop, cancel),
                loaded=models.get(config, record) if models else None,
                masks_path=recorder.masks_path(run_id),
                run_id=run_id,
                checked=True,  # by launch.queue, before the run was recorded
            )
        except Cancelled as error:
            where = f" {error.where}" if error.where else ""
            recorder.set_status(run_id, RunStatus.CANCELLED, error=f"Stopped {stopped_by(stop)}{where}.")
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
    store,
    run_ids: list[str],
    *,
    on_event: OnRunEvent | None = None,
    stop: threading.Event | None = None,
    redirect_output: bool = False,
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
            stop = Stop()
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
        raise Cancelled(signum=getattr(stop, "signum", None))
