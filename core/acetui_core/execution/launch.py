"""The one door for starting runs. The CLI (prune, compare, sweep), the app and scripts all come here.

A grid (every combination of the settings' values, ``Grid``) becomes run configurations; every
one is checked (``acetui_core.pruning.validate``) before anything is recorded or queued; the runs are recorded
in the store; an *executor* executes them:

- ``InProcess``: in this process, one after another (tests, scripts, ``acetui prune``);
- ``LocalProcesses``: worker processes on this machine, one per visible GPU (one on a CPU machine),
  detached from the terminal or not (the app, ``--detach``, compare on several GPUs);
- ``acetui_core.execution.slurm.Slurm``: a Slurm job array through submitit.

``launch`` hands the runs over and returns; ``run_and_wait`` executes them from this process and returns
once they have ended (``acetui compare`` and ``sweep`` without ``--detach``, scripts).

Usage::

    grid = Grid({"model": ["model"], "method": ["wanda", "ace"], "sparsity": ["0.5", "2:4"]})
    ids = launch(grid.configs(), LocalProcesses(), store)
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from acetui_core.basics import parse
from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import Cancelled, UserError
from acetui_core.basics.outputs import refuse_protected
from acetui_core.execution.heartbeat import Stop, stop_signals
from acetui_core.execution.runner import collect_env, run_queue
from acetui_core.pruning.plan import check_fits_memory
from acetui_core.pruning.validate import check_config, model_places
from acetui_core.run.config import AXES, SETTINGS, RunConfig
from acetui_core.run.events import OnRunEvent
from acetui_core.scores.metrics import reads_calibration
from acetui_core.storage import store_files
from acetui_core.storage.store import Store
from acetui_core.storage.store_db import check_writable, store_path
from acetui_core.storage.store_reader import StoreReader


@dataclass
class Grid:
    """Every combination of the ``axes`` (a setting's name and its values: any setting of the table; an axis
    of the table not given takes its default), each with the ``common`` settings.

    The runs come model by model and method by method (a model loaded once; a method's calibration
    statistics shared), then by the calibration axes, with the others innermost (sparsity: one pass of
    statistics, several masks). One rule for methods without calibration data (magnitude): they run once
    per combination of the other axes, whatever the calibration axes (source, length, seed), since none
    can change their result."""

    axes: dict[str, list]
    common: dict = field(default_factory=dict)

    @classmethod
    def of(cls, settings: dict) -> Grid:
        """A grid from run settings as the CLI and the form hold them: the table's axes (a list, or one
        value) become axes, the rest is common."""
        axes = {name: value if isinstance(value, list) else [value] for name, value in settings.items() if name in AXES}
        return cls(axes, {name: value for name, value in settings.items() if name not in AXES})

    def configs(self) -> list[RunConfig]:
        values = {name: [SETTINGS[name].default] for name in AXES if name not in self.common} | self.axes
        order = sorted(values, key=lambda name: (name not in ("model", "method"), not SETTINGS[name].calibration))
        grid: dict[tuple, RunConfig] = {}
        for combination in itertools.product(*(values[name] for name in order)):
            chosen = dict(zip(order, combination, strict=True))
            config = RunConfig(**self.common, **chosen)
            if not reads_calibration(config):  # its seeds and calibration settings cannot differ: one cell
                for name in order:
                    if SETTINGS[name].calibration:
                        chosen[name] = values[name][0]
                config = RunConfig(**self.common, **chosen)
            grid.setdefault(tuple(str(chosen[name]) for name in order), config)
        return list(grid.values())


class Executor(Protocol):
    @property
    def kind(self) -> ExecutorKind: ...  # what the store records

    @property
    def local_device(self) -> bool: ...  # runs execute on this machine, so --device is checked here

    def start(self, store: Store, run_ids: list[str]) -> None: ...


def check(configs: list[RunConfig], *, local_device: bool = True, store: Path | None = None) -> list[RunConfig]:
    """Every configuration checked and in normal form; the first problem raises its UserError. ``store``: the
    run store's path: no checkpoint may be saved over or into it, the files beside it, or what its runs
    read and saved (``StoreReader.protected_places``)."""
    protected: tuple = ()
    if store is not None and store.is_file():
        reader = StoreReader(store)
        check_writable(reader.path)  # a store this user may only read is said before any model is read
        protected = tuple(reader.protected_places())
    elif store is not None:
        protected = store_files.places(store)
    checked = [check_config(config, local_device=local_device, protected=protected) for config in configs]
    if store is not None:  # the store and its logs folder beside it must not land in what the runs read
        advice = "keep the run store apart from it (--store, or ACETUI_HOME)."
        for model in dict.fromkeys(config.model for config in checked):  # a grid names each model many times
            refuse_protected(store, f"The run store {store}", model_places(model), advice)
    if local_device:  # a Slurm node's memory is not this machine's
        for config in checked:
            check_fits_memory(config)
    return checked


def checked_store(
    configs: list[RunConfig], store: str | os.PathLike | None, *, local_device: bool = True
) -> tuple[list[RunConfig], Store]:
    """Every configuration checked, then the run store opened (made if new): a run the checks refuse leaves
    no empty store behind."""
    path = store_path(store)
    return check(configs, local_device=local_device, store=path), Store(path)


def queue(configs: list[RunConfig], store: Store, executor: Executor, *, checked: bool = False) -> list[str]:
    """Check every configuration (unless ``checked``: they come from ``check``) and record the runs, queued
    for ``executor`` as one batch; return their ids.

    Nothing is recorded when any configuration is bad."""
    if not checked:
        configs = check(configs, local_device=executor.local_device, store=store.path)
    store.check_log_folder()
    env = collect_env()
    batch = secrets.token_hex(4)
    return [store.create_run(config, env=env, executor=executor.kind, batch=batch) for config in configs]


def launch(
    configs: list[RunConfig], executor: Executor, store: Store | None = None, *, checked: bool = False
) -> list[str]:
    """``queue`` the runs, then hand them to ``executor``; return their ids."""
    store = store or Store()
    run_ids = queue(configs, store, executor, checked=checked)
    start(executor, store, run_ids)
    return run_ids


def start(executor: Executor, store: Store, run_ids: list[str]) -> None:
    """Hand queued runs to ``executor``. When it cannot take them (a worker that does not start, a
    cluster that refuses the job), the runs it did not take are recorded failed with the reason, never
    left queued for an executor that will not come, and the reason is one sentence."""
    try:
        executor.start(store, run_ids)
    except (Cancelled, KeyboardInterrupt):
        raise
    except Exception as error:
        reason = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
        for run in store.list_runs(ids=run_ids):
            if run.status == RunStatus.QUEUED and run.pid is None and run.job is None:  # taken by no worker or job
                store.set_status(run.id, RunStatus.FAILED, error=f"It could not be started: {reason}")
        if isinstance(error, UserError):
            raise
        raise UserError(f"The runs could not be started ({reason}); they are recorded failed.") from None


def run_and_wait(
    configs: list[RunConfig],
    store: Store,
    executor: LocalProcesses,
    *,
    on_event: OnRunEvent | None = None,
    watch: Callable[[list[str], list], Callable[[], bool]] | None = None,
    checked: bool = False,
) -> tuple[list[str], Cancelled | None]:
    """Queue ``configs`` and execute them from this process until every run has ended: on several GPUs one
    worker process per GPU, followed here, else in this process one after another. ``on_event(run_id,
    event)`` sees each event of an in-process run; ``watch(run_ids, workers)`` returns the poll that follows
    workers (True once every run has ended; by default the store's statuses). Returns the run ids and
    the stop that cut the grid short, if one did (each run records how it ended). ``checked``: as for ``queue``."""
    if len(executor.devices()) > 1 and len(configs) > 1:
        executor.detach = False
        run_ids = queue(configs, store, executor, checked=checked)
        try:
            start(executor, store, run_ids)
            if watch is not None:
                poll = watch(run_ids, executor.workers)
            else:
                poll = lambda: not any(run.active for run in store.list_runs(ids=run_ids))  # noqa: E731
            _wait_for_workers(executor.workers, poll)
        except Cancelled as stopped:
            return run_ids, stopped
        return run_ids, None
    in_process = InProcess(on_event=on_event)
    run_ids = queue(configs, store, in_process, checked=checked)
    try:
        in_process.start(store, run_ids)
    except Cancelled as stopped:
        return run_ids, stopped
    return run_ids, None


def _wait_for_workers(workers: list, poll: Callable[[], bool]) -> None:
    """Poll until every run has ended or every worker has exited. The workers share this terminal's
    process group, so Ctrl-C reaches them; SIGTERM is passed on, and ``Cancelled`` raised after."""
    stop = Stop()
    with stop_signals(stop):
        while not poll() and any(w.poll() is None for w in workers):
            if stop.is_set():
                for worker in workers:
                    worker.terminate()
            time.sleep(0.5)
        for worker in workers:
            worker.wait()
        poll()
    if stop.is_set():
        raise Cancelled(signum=stop.signum)


@dataclass(frozen=True)
class InProcess:
    """Runs in this process, one after another; ``on_event(run_id, event)`` sees every event. A stop
    signal (or ``stop``) cancels the current run and the ones still queued (``Cancelled`` is raised)."""

    on_event: OnRunEvent | None = None
    stop: threading.Event | None = None
    kind: ExecutorKind = ExecutorKind.LOCAL
    local_device: bool = True

    def start(self, store: Store, run_ids: list[str]) -> None:
        run_queue(store, run_ids, on_event=self.on_event, stop=self.stop)


@dataclass
class LocalProcesses:
    """Worker processes on this machine: one per visible GPU, each with a contiguous share of the runs
    (so runs of one model stay together and each worker loads it once); one worker without GPUs.

    ``detach``: the workers outlive this process and the terminal (their own session). ``workers``
    holds the started processes."""

    detach: bool = True
    gpus: int | None = None  # None: count the visible GPUs
    kind: ExecutorKind = ExecutorKind.LOCAL
    local_device: bool = True
    workers: list = field(default_factory=list)

    def start(self, store: Store, run_ids: list[str]) -> None:
        from acetui_core.execution.worker import spawn

        devices = self.devices()
        share = -(-len(run_ids) // max(1, len(devices)))
        if len(devices) < 2:
            self.workers = [spawn(store, run_ids, detach=self.detach)]
            return
        chunks = [run_ids[i : i + share] for i in range(0, len(run_ids), share)]
        self.workers = [
            spawn(store, chunk, detach=self.detach, env={"CUDA_VISIBLE_DEVICES": device})
            for device, chunk in zip(devices, chunks, strict=False)
        ]

    def devices(self) -> list[str]:
        """The GPUs to spread over, as CUDA_VISIBLE_DEVICES entries (respecting the user's own list)."""
        gpus = visible_gpus() if self.gpus is None else self.gpus
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return parse.items(visible)[:gpus] if visible else [str(i) for i in range(gpus)]


def gpus_for(device: str) -> int | None:
    """How many GPUs a grid may spread over for ``--device``: all visible ones for auto/cuda (None: count
    them), none for cpu or one chosen GPU."""
    return None if device in ("auto", "cuda") else 0


def visible_gpus() -> int:
    """How many CUDA GPUs this process can use (0 without torch CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
