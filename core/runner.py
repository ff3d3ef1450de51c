"""Running configurations as recorded runs: every run, from the CLI, the app or a script, goes through here.

- :func:`run_recorded` runs one configuration in this process and records it in the store as it goes.
- :func:`run_queue` runs queued runs one after another, loading each model once per process.
- :func:`start_detached` / :func:`spawn_worker` start runs in a new process (its own session, so it
  outlives the terminal and SSH connection that started it), logging next to the store.
- ``python -m acetui_core.runner --store PATH RUN_ID...`` is that process.

Stopping: SIGINT or SIGTERM (or ``Store.request_cancel``) stops a run between layers and records it
``cancelled``; a second SIGINT stops at once. SIGKILL cannot be caught: readers then find the
process gone and show the run ``interrupted`` (see ``acetui_core.store``).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import acetui_core
from acetui_core import pipeline
from acetui_core.config import RunConfig
from acetui_core.errors import Cancelled, UserError
from acetui_core.events import LayerPruned, RunFinished, RunStarted, Stage
from acetui_core.store import Store

HEARTBEAT_SECONDS = 1.0  # how often a run tells the store it is alive
STAGE_WRITE_SECONDS = 0.5  # zero-shot reports thousands of steps: store a stage's progress at most this often
POLL_SECONDS = 0.2  # how soon a stop signal or a stored cancel request reaches the pipeline's cancel flag
LOG_FOLDER = "logs"  # beside the store: one log per detached process


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def collect_env() -> dict:
    """Where and with what a run executes: host, platform, Python, torch, transformers and acetui versions."""
    env = {"host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
           "torch": _version("torch"), "transformers": _version("transformers"), "acetui": acetui_core.__version__}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
def _heartbeat(store: Store, run_id: str, stop: threading.Event, cancel: threading.Event):
    """A thread that beats for the run and turns a stop signal or a stored cancel request into ``cancel``."""
    done = threading.Event()

    def beat():
        last = 0.0
        while not done.wait(POLL_SECONDS):
            try:
                if time.monotonic() - last >= HEARTBEAT_SECONDS:
                    last = time.monotonic()
                    requested = store.heartbeat(run_id)
                else:
                    requested = store.cancel_requested(run_id)  # a read: cheap enough for every poll
            except UserError:
                requested = False  # the store stayed locked for BUSY_TIMEOUT; the next poll tries again
            if stop.is_set() or requested:
                cancel.set()

    thread = threading.Thread(target=beat, name=f"acetui-heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _execute(store: Store, run_id: str, on_event, stop: threading.Event | None, work) -> dict:
    """Claim ``run_id``, run ``work(record, cancel)`` and record how it ended.

    ``record`` stores each event before forwarding it to ``on_event``, so whatever a listener is told
    is already committed. The result gains a ``run_id`` key.
    """
    store.claim(run_id)
    store.update_env(run_id, **collect_env())  # the executing process's facts (host, visible GPUs)

    last_stage_write = [0.0]

    def record(event):
        if isinstance(event, Stage) and event.done not in (0, event.total):
            if time.monotonic() - last_stage_write[0] < STAGE_WRITE_SECONDS:
                if on_event is not None:
                    on_event(event)
                return
            last_stage_write[0] = time.monotonic()
        store.record_event(run_id, event)
        if isinstance(event, RunStarted):
            store.update_env(run_id, device_name=_device_name(event.device))
        if on_event is not None:
            on_event(event)

    cancel = threading.Event()
    with ExitStack() as stack:
        if stop is None:
            stop = threading.Event()
            stack.enter_context(stop_signals(stop))
        stack.enter_context(_heartbeat(store, run_id, stop, cancel))
        try:
            result = work(record, cancel)
        except Cancelled:
            store.set_status(run_id, "cancelled", error="Stopped on request between layers.")
            raise
        except KeyboardInterrupt:
            store.set_status(run_id, "cancelled", error="Stopped at once by a second interrupt.")
            raise
        except UserError as error:
            store.set_status(run_id, "failed", error=str(error))
            raise
        except BaseException as error:
            store.set_status(run_id, "failed", error=f"{type(error).__name__}: {error}")
            raise
    store.finish(run_id, result)  # already done by RunFinished unless the pipeline skipped it; idempotent
    return {**result, "run_id": run_id}


def run_recorded(config: RunConfig, on_event=None, store: Store | None = None, *, run_id: str | None = None,
                 loaded=None, stop: threading.Event | None = None) -> dict:
    """Run ``config`` in this process, recorded in ``store`` (default: ``Store()``) as it goes.

    Creates the run unless ``run_id`` names a queued one. Events go to the store, then to
    ``on_event``. SIGINT/SIGTERM stop it between layers (``cancelled``; ``Cancelled`` is raised)
    when called from the main thread and ``stop`` is None; otherwise set ``stop`` (or call
    ``store.request_cancel``). Failures are recorded ``failed`` with their text and re-raised.
    Returns the pipeline's result object plus ``run_id``.
    """
    store = store or Store()
    if run_id is None:
        run_id = store.create_run(config, env=collect_env())
    return _execute(store, run_id, on_event, stop,
                    lambda record, cancel: pipeline.run(config, record, cancel, loaded=loaded))


class _ModelCache:
    """The model of consecutive runs, loaded once and reset to its dense weights between runs."""

    def __init__(self):
        self.key, self.loaded = None, None

    def get(self, config: RunConfig, on_event):
        from acetui_core.models import load_model

        key = (config.model, config.device, config.dtype)
        if key == self.key:
            self.loaded.reset()
            return self.loaded
        self.key = self.loaded = None
        gc.collect()  # let the previous model go before the next one arrives
        loaded = load_model(config.model, device=config.device, dtype=config.dtype, on_event=on_event)
        loaded.snapshot()
        self.key, self.loaded = key, loaded
        return loaded


def run_queue(store: Store, run_ids: list[str], on_event=None, stop: threading.Event | None = None) -> None:
    """Run the queued runs ``run_ids`` one after another in this process, reusing a loaded model.

    A run cancelled from outside (``Store.request_cancel``) or failing does not stop the queue. A
    stop signal (or ``stop``) cancels the current run and every run still queued, then raises
    ``Cancelled``. ``on_event(run_id, event)`` sees every event.
    """
    cache = _ModelCache()
    with ExitStack() as stack:
        if stop is None:
            stop = threading.Event()
            stack.enter_context(stop_signals(stop))
        try:
            for run_id in run_ids:
                if stop.is_set():
                    break
                run = store.get_run(run_id, layers=False)
                if run.status != "queued":
                    continue  # cancelled while it waited
                forward = None if on_event is None else (lambda event, run_id=run_id: on_event(run_id, event))
                try:
                    _execute(store, run_id, forward, stop,
                             lambda record, cancel, config=run.config:
                             pipeline.run(config, record, cancel, loaded=cache.get(config, record)))
                except Cancelled:
                    pass  # recorded; the queue goes on unless it was stopped as a whole
                except Exception as error:  # recorded as failed; one broken configuration must not sink the grid
                    text = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
                    print(f"acetui: run {run_id} failed: {text}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            stop.set()
            raise
        finally:
            if stop.is_set():
                for run_id in run_ids:
                    store.set_status(run_id, "cancelled", error="The queue was stopped before this run started.")
    if stop.is_set():
        raise Cancelled()


def visible_gpus() -> int:
    """How many CUDA GPUs this process can use (0 without torch CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def log_path(store: Store, run_id: str) -> Path:
    return store.path.parent / LOG_FOLDER / f"{run_id}.log"


def spawn_worker(store: Store, run_ids: list[str], *, detach: bool = True, env: dict | None = None) -> subprocess.Popen:
    """Start ``python -m acetui_core.runner`` for the queued ``run_ids`` and hand the runs to it.

    ``detach``: a new session (no controlling terminal: SIGHUP and the terminal closing do not reach
    it). Its output goes to ``logs/<first id>.log`` beside the store; each run's ``env["log"]`` says so.
    """
    log = log_path(store, run_ids[0])
    log.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **(env or {})}
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "acetui_core.runner", "--store", str(store.path), *run_ids],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=detach, env=environment, close_fds=True)
    for run_id in run_ids:
        store.set_owner(run_id, process.pid)
        store.update_env(run_id, log=str(log))
    return process


def start_detached(config: RunConfig, store: Store | None = None) -> str:
    """Queue ``config`` and run it in a detached process; return the run id at once."""
    store = store or Store()
    pipeline.validate(config)
    run_id = store.create_run(config, env=collect_env())
    spawn_worker(store, [run_id])
    return run_id


def _log_event(run_id: str, event) -> None:
    """One line per event worth reading in a detached run's log."""
    stamp = time.strftime("%H:%M:%S")
    if isinstance(event, Stage) and (event.done == 0 or event.done == event.total):
        line = f"{event.name} {event.done}/{event.total if event.total is not None else '?'}"
    elif isinstance(event, LayerPruned):
        line = f"layer {event.index + 1}/{event.total} pruned in {event.seconds:.2f} s"
    elif isinstance(event, RunFinished):
        ppl = event.result.get("ppl_wikitext2")
        line = f"finished: prune {event.result.get('prune_seconds', 0):.1f} s, ppl {ppl if ppl is None else f'{ppl:.3f}'}"
    else:
        return
    print(f"{stamp} {run_id} {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """The detached process: run the given queued runs from the store, one after another."""
    parser = argparse.ArgumentParser(prog="python -m acetui_core.runner", description=main.__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("run_ids", nargs="+")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # belt and braces: a new session has no terminal to hang up
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()} runs {' '.join(args.run_ids)}", flush=True)
    try:
        store = Store(args.store)
        run_queue(store, args.run_ids, on_event=_log_event)
    except Cancelled:
        print("stopped by a signal; the current and queued runs are recorded cancelled.", flush=True)
        return 130
    except UserError as error:
        print(f"acetui: {error}", flush=True)
        return 2
    statuses = [store.get_run(run_id, layers=False).status for run_id in args.run_ids]
    print(f"done: {', '.join(f'{i} {s}' for i, s in zip(args.run_ids, statuses))}", flush=True)
    return 0 if all(s == "finished" for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
