"""Test helpers: deterministic synthetic runs (fixed ids, times, host and pid; no model) and the CLI in-process."""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import pytest

from acetui_core.config import RunConfig
from acetui_core.events import LayerPruned, RunFinished, RunStarted
from acetui_core.records import ActStats, Histogram, LayerRecord, LinearRecord, RunResult, Spread, from_dict
from acetui_core.store import Store

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
    return from_dict(
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
) -> str:
    """Record a whole run through the store's public API at fixed times, then pin its pid and host."""
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
        db.execute(
            "UPDATE runs SET pid = 4242, host = 'gpu-box', pid_started = 1699999000.0, env = ? WHERE id = ?",
            (json.dumps({**ENV, "log": f"/home/me/.local/share/acetui/logs/{run_id}.log"}), run_id),
        )
    db.close()
    return run_id


def cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run ``acetui ARGS`` in this process as the console script does; return (exit code, stdout, stderr)."""
    from acetui.cli import main

    monkeypatch.setattr(sys, "argv", ["acetui", *map(str, args)])
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


async def wait_for(pilot, condition, what: str, timeout: float = 20.0) -> None:
    """Let an app under Pilot run (its store-polling threads deliver) until ``condition()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.1)
