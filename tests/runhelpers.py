"""Test helpers: deterministic synthetic runs (fixed ids, times, host and pid; no model) and the CLI in-process."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
import types
import typing
from pathlib import Path

import pytest

from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned, RunFinished, RunStarted
from acetui_core.run.records import ActStats, Histogram, LayerRecord, LinearRecord, RunResult, Spread, from_dict
from acetui_core.storage.store import Store

GATE = Path(__file__).resolve().parent / "gate_metric.py"  # the plug-in that holds a run until the test lets it go

LINEAR_NAMES = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
ENV = {
    "host": "gpu-box",
    "platform": "Linux-6.8-x86_64",
    "python": "3.11.9",
    "torch": "2.4.0",
    "transformers": "4.46.0",
    "acetui": "0.1.0",
}


class Clock:
    """A store clock the test sets by hand."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def layer_event(
    index: int, total: int, *, linears: int = 7, seconds: float = 0.5, sparsity: float = 0.5
) -> LayerPruned:
    records = [
        LinearRecord(
            name=LINEAR_NAMES[i % len(LINEAR_NAMES)],
            d_out=64,
            d_in=64 + 64 * (i % 2),
            sparsity=sparsity,
            seconds=seconds / linears,
            act_stats=ActStats(
                x2_mean=Spread(min=0.01 * (i + 1), median=0.5, max=4.0 + index),
                x2_var=Spread(min=0.0, median=1.5, max=90.0),
            ),
            histogram=Histogram(
                edges=[0.001, 0.01, 0.1, 1.0, 10.0], counts=[3, 40, 50, 7], threshold=0.1 + 0.01 * index, log=True
            ),
        )
        for i in range(linears)
    ]
    return LayerPruned(LayerRecord(index=index, total=total, seconds=seconds, linears=records))


def result_for(
    config: RunConfig,
    *,
    ppl: float | None,
    seconds: float,
    partial: bool = False,
    zeroshot: dict | None = None,
    **fields,
) -> RunResult:
    """A result shaped like ``pipeline.run``'s, at fixed values (``fields`` override any of them)."""
    return record(
        RunResult,
        {
            "model": config.model,
            "method": config.method,
            "label": config.label,
            "sparsity": config.sparsity,
            "group": config.group,
            "layers": [],
            "overall_sparsity": 0.5,
            "prune_seconds": seconds,
            "calibration": {
                "source": "c4",
                "nsamples": config.nsamples,
                "seqlen": 4096 if config.seqlen == "full" else config.seqlen,
                "seed": config.seed,
            },
            "ppl_wikitext2": ppl,
            "ppl_windows": 2 if partial else 83,
            "ppl_partial": partial,
            "ppl_seqlen": 2048,
            "zeroshot": zeroshot,
            "peak_rss_mb": 2048.0,
            "peak_gpu_mb": 13000.5,
            "device": "cuda:0",
            "dtype": "float16",
            "config": config.to_dict(),
            **fields,
        },
    )


def window_losses(per_token, seqlen: int) -> dict:
    """A stored perplexity evaluation's per-window losses (``WindowLosses`` as JSON) from each window's
    mean loss per token (a numpy array): every window ``seqlen`` tokens long, none left out."""
    return {
        "dataset": "wikitext2",
        "split": "test",
        "seqlen": seqlen,
        "limit": len(per_token),
        "nll": (per_token * seqlen).tolist(),
        "tokens": [seqlen] * len(per_token),
    }


def record(cls, data: dict):
    """``from_dict`` for a record a test writes by hand: a key the record has no field for, at any depth,
    fails the test (``from_dict`` itself ignores such keys, so a typo would pass unseen)."""
    unknown = _unknown_keys(cls, data, cls.__name__)
    if unknown:
        raise TypeError(f"no such field: {', '.join(unknown)}")
    return from_dict(cls, data)


def _unknown_keys(kind, value, where: str) -> list[str]:
    """The dotted paths of ``value``'s keys that the type ``kind`` (dataclasses, their lists, dicts and
    optionals) does not declare."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return [
            found
            for arg in typing.get_args(kind)
            if arg is not type(None)
            for found in _unknown_keys(arg, value, where)
        ]
    if typing.get_origin(kind) is list and isinstance(value, list):
        [item] = typing.get_args(kind)
        return [found for i, entry in enumerate(value) for found in _unknown_keys(item, entry, f"{where}[{i}]")]
    if typing.get_origin(kind) is dict and isinstance(value, dict):
        item = typing.get_args(kind)[1]
        return [found for key, entry in value.items() for found in _unknown_keys(item, entry, f"{where}[{key!r}]")]
    if dataclasses.is_dataclass(kind) and isinstance(value, dict):
        hints = typing.get_type_hints(kind)
        return [f"{where}.{key}" for key in value if key not in hints] + [
            found
            for key, entry in value.items()
            if key in hints
            for found in _unknown_keys(hints[key], entry, f"{where}.{key}")
        ]
    return []


def insert_run(
    store: Store,
    clock: Clock,
    run_id: str,
    config: RunConfig,
    *,
    created: float,
    ppl: float | None = None,
    seconds: float = 30.0,
    layers: int = 2,
    status: str = "finished",
    partial: bool = False,
    error: str | None = None,
    zeroshot: dict | None = None,
    result: dict | None = None,
    pin_env: bool = True,
) -> str:
    """Record a whole run through the store's public API at fixed times, then pin its pid and host and,
    unless not ``pin_env``, its environment (what the store recorded names this machine's folders)."""
    clock.now = created
    store.create_run(config, env=dict(ENV), run_id=run_id)
    clock.now = created + 1
    store.claim(run_id)
    store.record_event(run_id, RunStarted(config.model, config.method, config.sparsity, layers, "cuda:0"))
    for index in range(layers):
        clock.now = created + 2 + index
        store.record_event(run_id, layer_event(index, layers))
    clock.now = created + 2 + layers + seconds
    if status == "finished":
        store.record_event(
            run_id,
            RunFinished(
                result_for(config, ppl=ppl, seconds=seconds, partial=partial, zeroshot=zeroshot, **(result or {}))
            ),
        )
    else:
        store.set_status(run_id, status, error=error)
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET pid = 4242, host = 'gpu-box', pid_started = 1699999000.0 WHERE id = ?", (run_id,))
        if pin_env:
            env = {**ENV, "log": f"/home/me/.local/share/acetui/logs/{run_id}.log"}
            db.execute("UPDATE runs SET env = ? WHERE id = ?", (json.dumps(env), run_id))
    db.close()
    return run_id


def stopped_by_sigterm(monkeypatch, capsys, module, *args) -> tuple[int, str, str]:
    """The CLI with ``module.run_and_wait`` replaced by what a SIGTERM in the first run leaves: every run
    queued, then cancelled (the queued ones before they started), and the stop returned."""
    import signal

    from acetui_core.basics.errors import Cancelled
    from acetui_core.execution.launch import InProcess, queue

    def stopped_at_once(configs, store, executor, **_):
        run_ids = queue(configs, store, InProcess(), checked=True)
        for run_id in run_ids:
            store.request_cancel(run_id)
        return run_ids, Cancelled("before layer 1 of 2", signum=signal.SIGTERM)

    monkeypatch.setattr(module, "run_and_wait", stopped_at_once)
    handler = signal.getsignal(signal.SIGINT)  # the CLI ignores a further Ctrl-C as it exits
    try:
        return cli(monkeypatch, capsys, *args)
    finally:
        signal.signal(signal.SIGINT, handler)


def cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run ``acetui ARGS`` in this process as the console script does; return (exit code, stdout, stderr)."""
    from acetui.cli import main

    monkeypatch.setattr(sys, "argv", ["acetui", *map(str, args)])
    capsys.readouterr()  # what came before (a fixture writing a model's shards) is not the command's
    with pytest.raises(SystemExit) as exit:
        main()
    out, err = capsys.readouterr()
    return exit.value.code or 0, out, err


def tiny_prune_command(model: str, *extra: str) -> list[str]:
    """``acetui prune`` of a tiny model as a process of its own: Wanda on 4 windows, 2 evaluation windows."""
    quick = [
        "--method",
        "wanda",
        "--nsamples",
        "4",
        "--seqlen",
        "16",
        "--eval-limit",
        "2",
        "--eval-seqlen",
        "64",
        "--device",
        "cpu",
    ]
    return [sys.executable, "-m", "acetui", "prune", model, *quick, *extra]


def _polls(condition, what: str, timeout: float):
    """``condition()`` at each poll, until the caller stops at a truthy one; after ``timeout`` seconds the
    test fails, saying what never happened. An AttributeError is "not yet": the app may still show the
    screen before the awaited one (``app.screen._run`` read while the New run screen is still up, on a
    loaded machine), and it is raised as it is if it lasts to the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
        except AttributeError:
            if time.monotonic() > deadline:
                raise
            found = None
        yield found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def wait_until(condition, what: str, timeout: float = 120.0, every: float = 0.05):
    """Call ``condition()`` until it returns something truthy, and return that."""
    for found in _polls(condition, what, timeout):
        if found:
            return found
        time.sleep(every)


def send_in_one_read(app, burst: list[tuple[str, str | None]]) -> None:
    """Hand the app ``burst`` (key, character) as its driver does one read of a burst (SSH, tmux, a fast
    typist): every key queued before the app handles the first."""
    from textual import events

    for key, character in burst:
        app._driver.send_message(events.Key(key, character))


def screen_shown(app, screen_type) -> bool:
    """The app shows a ``screen_type`` whose widgets are mounted: ``switch_mode`` makes a new mode's screen
    ``app.screen`` at once, before it is composed, so a query made then finds nothing."""
    return isinstance(app.screen, screen_type) and app.screen.is_mounted


async def pilot_wait_until(pilot, condition, what: str, timeout: float = 90.0, every: float = 0.1):
    """``wait_until`` for an app under Textual's Pilot: the pauses let its timers and threads deliver."""
    for found in _polls(condition, what, timeout):
        if found:
            return found
        await pilot.pause(every)


def wait_for_runs(store: Store | Path | str, check, what: str = "the runs' expected state", timeout: float = 120.0):
    """Poll a run store until ``check(runs)`` (``Store.list_runs()``) is truthy; return its value. A store
    given by path may not exist yet (the run that creates it is starting)."""

    def runs():
        opened = store if isinstance(store, Store) else Store(store) if Path(store).exists() else None
        return check(opened.list_runs()) if opened is not None else None

    return wait_until(runs, what, timeout)


def gated(calib_file, hold: str = "until_cancelled") -> list[str]:
    """CLI options of a run that the gate metric holds in layer 1, once layer 0 is recorded (give the run a
    model of three layers or more and the ``gate`` fixture)."""
    return [
        "--method",
        f"{GATE}:{hold}",
        "--calib",
        str(calib_file),
        "--nsamples",
        "4",
        "--seqlen",
        "16",
        "--eval",
        "none",
    ]


def held_at_the_gate(store: Store | Path | str, gate: Path, process: subprocess.Popen | None = None):
    """The run the gate metric holds: running, with its layer 0 recorded. ``process``: the run's own, which
    must not end first."""

    def reached() -> bool:
        assert process is None or process.poll() is None, f"the run's process ended first (exit {process.returncode})"
        return (gate / "waiting").exists()

    wait_until(reached, "the run to reach the gate")
    [run] = (store if isinstance(store, Store) else Store(store)).list_runs(status="running")
    assert run.layers_done == 1
    return run


def saved_tensors(folder) -> dict:
    """Every tensor of a saved checkpoint by its name, whether one file or shards (a streamed run's)."""
    from safetensors.torch import load_file

    tensors = {}
    for shard in Path(folder).glob("*.safetensors"):
        tensors.update(load_file(shard))
    return tensors
