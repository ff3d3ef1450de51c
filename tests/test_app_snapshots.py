"""Snapshots of every screen at 80x24 and 120x40, drawn from synthetic runs in a tmp store.

The store is filled with fixed ids, times and numbers (no clock, no ages), so the pictures only change
when the app's look changes. Regenerate with ``pytest tests/test_app_snapshots.py --snapshot-update``
and review the SVGs in ``tests/__snapshots__``.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest

from acetui.app import make_app
from acetui_core.config import RunConfig
from acetui_core.events import LayerPruned, LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.records import ActStats, Histogram, LayerRecord, LinearRecord, RunResult, Spread, TaskAccuracy, from_dict
from acetui_core.store import Store

T0 = 1_714_564_800.0  # 2024-05-01 12:00 UTC
MODEL = "/models/llama-7b"
LINEARS = [("self_attn.q_proj", 64, 64), ("self_attn.k_proj", 32, 64), ("self_attn.v_proj", 32, 64),
           ("self_attn.o_proj", 64, 64), ("mlp.gate_proj", 128, 64), ("mlp.up_proj", 128, 64),
           ("mlp.down_proj", 64, 128)]
NUM_LAYERS = 6


class Ticks:
    """A clock that advances one minute per call: fixed, distinct times for the synthetic runs."""

    def __init__(self, start: float = T0):
        self.now = start

    def __call__(self) -> float:
        self.now += 60
        return self.now


def histogram(layer: int, position: int, sparsity: float) -> Histogram:
    """A bell of log-spaced scores whose centre moves with depth; the threshold cuts ``sparsity`` of it."""
    bins = 24
    low, high = -4 + 0.2 * layer, -1 + 0.2 * layer + 0.1 * position
    edges = [10 ** (low + (high - low) * i / bins) for i in range(bins + 1)]
    counts = [round(1000 * math.exp(-(((i + 0.5) / bins - 0.55) / 0.2) ** 2)) for i in range(bins)]
    total, running, cut = sum(counts), 0, 0
    for i, count in enumerate(counts):
        running += count
        if running >= sparsity * total:
            cut = i + 1
            break
    return Histogram(edges=[round(e, 8) for e in edges], counts=counts, threshold=round(edges[cut], 8), log=True)


def layer_event(index: int, sparsity: float, activations: bool = True) -> LayerPruned:
    linears = []
    for position, (name, d_out, d_in) in enumerate(LINEARS):
        scale = 1 + index * 0.8 + position * 0.1
        act = ActStats(x2_mean=Spread(min=0.01 * scale, median=0.2 * scale, max=4.0 * scale),
                       x2_var=Spread(min=0.001 * scale, median=0.05 * scale ** 2, max=30.0 * scale ** 3))
        linears.append(LinearRecord(name=name, d_out=d_out, d_in=d_in, sparsity=sparsity, seconds=0.1 + 0.01 * position,
                                    act_stats=act if activations else None,
                                    histogram=histogram(index, position, sparsity)))
    return LayerPruned(LayerRecord(index=index, total=NUM_LAYERS, seconds=1.5 + 0.25 * index, linears=linears))


def add_run(store: Store, method: str, sparsity: str, *, seqlen=16, layers: int = NUM_LAYERS, ppl: float | None = None,
            status: str = "finished", error: str | None = None, zeroshot: float | None = None, model: str = MODEL) -> str:
    config = RunConfig(model=model, method=method, sparsity=sparsity, seqlen=seqlen, nsamples=128)
    run_id = store.create_run(config, env={"host": "box"}, run_id=f"run{len(store.list_runs()) + 1:05d}")
    store.claim(run_id)
    store.record_event(run_id, RunStarted(model, method, sparsity, NUM_LAYERS, "cuda:0"))
    store.record_event(run_id, Stage("calibration", 128, 128))
    fraction = 0.5 if sparsity in ("0.5", "2:4", "4:8") else float(sparsity)
    for index in range(layers):
        store.record_event(run_id, LayerStarted(index, NUM_LAYERS))
        store.record_event(run_id, layer_event(index, fraction, activations=method != "magnitude"))
    if status == "finished":
        def task(acc: float) -> TaskAccuracy:
            return TaskAccuracy(acc=acc, acc_stderr=0.01, acc_norm=None, acc_norm_stderr=None, n=100, total=100,
                                partial=False, source="hub")

        result = from_dict(RunResult, {
            "model": model, "method": method, "label": config.label, "sparsity": sparsity, "group": "row",
            "prune_seconds": 9.75 + len(method), "ppl_wikitext2": ppl, "ppl_windows": 166, "ppl_partial": False,
            "peak_rss_mb": 2048.0, "peak_gpu_mb": 14000.0, "device": "cuda:0", "dtype": "float16",
            "config": config.to_dict()})
        result.zeroshot = None if zeroshot is None else {"boolq": task(zeroshot), "rte": task(zeroshot - 0.1)}
        store.record_event(run_id, RunFinished(result))
    elif status == "running":
        store.record_event(run_id, LayerStarted(layers, NUM_LAYERS))
    else:
        store.set_status(run_id, status, error=error)
    return run_id


def build_store(path: Path) -> Store:
    """Seven runs of every kind: finished (two sparsities, four methods), running, failed, cancelled."""
    store = Store(path, clock=Ticks())
    add_run(store, "wanda", "0.5", ppl=7.89, zeroshot=0.61)
    add_run(store, "ria", "0.5", ppl=7.27, zeroshot=0.62)
    add_run(store, "ace", "0.5", ppl=7.11, zeroshot=0.64)
    add_run(store, "wanda", "2:4", ppl=11.53)
    add_run(store, "ace", "2:4", ppl=10.92)
    add_run(store, "magnitude", "0.5", ppl=17.29, model="/models/opt-1.3b")
    add_run(store, "cosp", "0.5", seqlen="full", layers=3, status="running")
    add_run(store, "varp", "0.5", layers=1, status="failed",
            error="CUDA out of memory. Tried to allocate 2.00 GiB; try --device cpu or a smaller --nsamples.")
    add_run(store, "sparsegpt", "4:8", layers=2, status="cancelled", error="Stopped on request between layers.")
    return store


# ---- the snapshots ---------------------------------------------------------------------------------

SIZES = [(80, 24), (120, 40)]


@pytest.fixture(scope="session")
def synthetic_db(tmp_path_factory) -> Path:
    """The synthetic store, built once (its many small transactions take seconds)."""
    folder = tmp_path_factory.mktemp("synthetic-store")
    build_store(folder / "runs.db")
    return folder


@pytest.fixture
def store(synthetic_db, tmp_path, monkeypatch):
    """A fresh copy of the synthetic store, local times in UTC, and model completions from the store
    only (not from this machine's folders and Hugging Face cache)."""
    for part in synthetic_db.iterdir():
        shutil.copy(part, tmp_path / part.name)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr("acetui.app.screens.new_run.model_candidates", lambda recent: recent)
    yield Store(tmp_path / "runs.db")
    monkeypatch.undo()  # restore TZ now, so that tzset() below brings back the local zone
    time.tzset()


def until(condition, timeout: float = 20.0):
    """A ``run_before`` that lets the app's store-polling threads deliver until ``condition(app)``."""

    async def wait(pilot):
        deadline = time.monotonic() + timeout
        while not condition(pilot.app):
            assert time.monotonic() < deadline, "the screen never showed the store's data"
            await pilot.pause(0.1)

    return wait


def rows(selector: str, count: int):
    return until(lambda app: app.screen.query_one(selector).row_count == count)


@pytest.mark.parametrize("size", SIZES)
def test_new_run(snap_compare, store, size):
    from textual.widgets import Input

    async def fill(pilot):
        screen = pilot.app.screen
        for field in screen.query(Input):
            field.cursor_blink = False  # a blinking cursor is caught on or off at random
        screen.query_one("#model", Input).focus()
        await pilot.press(*"/models/")
        screen.query_one("#sparsity", Input).value = "0.5, 3:2"
        await until(lambda app: screen.query_one("#model-candidates").option_count == 2)(pilot)

    assert snap_compare(make_app(store), terminal_size=size, run_before=fill)


@pytest.mark.parametrize("size", SIZES)
def test_run_live(snap_compare, store, size):
    """A run in progress: 3 of 6 layers, the last one's histogram, ETA from the recorded layer times."""
    assert snap_compare(make_app(store, attach="run00007"), terminal_size=size, run_before=rows("#layers", 3))


def test_run_failed(snap_compare, store):
    app = make_app(store, attach="run00008")
    assert snap_compare(app, run_before=until(lambda app: app.screen.query_one("#run-error").display))


def test_run_depth_plots_light(snap_compare, store):
    assert snap_compare(make_app(store, theme="light", attach="run00003"), press=["s"],
                        run_before=rows("#layers", NUM_LAYERS))


@pytest.mark.parametrize("size", SIZES)
def test_results(snap_compare, store, size):
    async def results(pilot):
        await pilot.press("f3")
        await rows("#results", 6)(pilot)

    assert snap_compare(make_app(store), terminal_size=size, run_before=results)


def test_results_paper_view(snap_compare, store):
    async def paper(pilot):
        await pilot.press("f3")
        await rows("#results", 6)(pilot)
        await pilot.press("space", "down", "space", "down", "space", "v")

    assert snap_compare(make_app(store), run_before=paper)


@pytest.mark.parametrize("size", SIZES)
def test_runs(snap_compare, store, size):
    async def runs(pilot):
        await pilot.press("f4")
        await rows("#runs", 9)(pilot)
        await pilot.press("down")  # the failed run, with its error under the table

    assert snap_compare(make_app(store), terminal_size=size, run_before=runs)


def test_runs_ansi_theme(snap_compare, store):
    async def runs(pilot):
        await pilot.press("f4")
        await rows("#runs", 9)(pilot)

    assert snap_compare(make_app(store, theme="ansi"), run_before=runs)
