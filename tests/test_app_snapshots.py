"""Snapshots of every screen at 80x24 and 120x40, drawn from synthetic runs in a tmp store.

The store is filled with fixed ids, times and numbers (no clock, no ages), so the pictures only change
when the app's look changes. Regenerate with ``pytest tests/test_app_snapshots.py --snapshot-update``
and review the SVGs in ``tests/__snapshots__``.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from runhelpers import pilot_wait_until, record

from acetui.app import make_app
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned, LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.run.records import ActStats, Histogram, LayerRecord, LinearRecord, RunResult, Spread
from acetui_core.storage.store import Store

T0 = 1_714_564_800.0  # 2024-05-01 12:00 UTC
NOW = T0 + 3 * 3600  # the screens' clock: elapsed times and sample ages are fixed
MODEL = "/models/llama-7b"
LINEARS = [
    ("self_attn.q_proj", 64, 64),
    ("self_attn.k_proj", 32, 64),
    ("self_attn.v_proj", 32, 64),
    ("self_attn.o_proj", 64, 64),
    ("mlp.gate_proj", 128, 64),
    ("mlp.up_proj", 128, 64),
    ("mlp.down_proj", 64, 128),
]
NUM_LAYERS = 6
COMPARISON_PID = 31337  # runs 1-3 were queued together (one worker process owned them)


class Ticks:
    """A clock that advances one minute per call: fixed, distinct times for the synthetic runs."""

    def __init__(self, start: float = T0):
        self.now = start

    def __call__(self) -> float:
        self.now += 60
        return self.now


def histogram(layer: int, position: int, sparsity: str) -> Histogram:
    """A bell of log-spaced scores whose centre moves with depth. Unstructured: the threshold cuts half
    of it. N:M: no threshold; low scores are mostly pruned, high ones mostly kept, every bin mixed."""
    bins = 24
    low, high = -4 + 0.2 * layer, -1 + 0.2 * layer + 0.1 * position
    edges = [round(10 ** (low + (high - low) * i / bins), 8) for i in range(bins + 1)]
    counts = [round(1000 * math.exp(-((((i + 0.5) / bins - 0.55) / 0.2) ** 2))) for i in range(bins)]
    if ":" in sparsity:
        pruned = [round(c / (1 + math.exp((i - bins * 0.5) / 3))) for i, c in enumerate(counts)]
        return Histogram(edges=edges, counts=counts, threshold=None, log=True, pruned=pruned)
    total, running, cut = sum(counts), 0, 0
    for i, count in enumerate(counts):
        running += count
        if running >= 0.5 * total:
            cut = i + 1
            break
    return Histogram(
        edges=edges,
        counts=counts,
        threshold=edges[cut],
        log=True,
        pruned=[c if i < cut else 0 for i, c in enumerate(counts)],
    )


def layer_event(index: int, sparsity: str, activations: bool = True) -> LayerPruned:
    linears = []
    for position, (name, d_out, d_in) in enumerate(LINEARS):
        scale = 1 + index * 0.8 + position * 0.1
        act = (
            ActStats(
                x2_mean=Spread(0.01 * scale, 0.2 * scale, 4.0 * scale),
                x2_var=Spread(0.001 * scale, 0.05 * scale**2, 30.0 * scale**3),
            )
            if activations
            else None
        )
        linears.append(
            LinearRecord(
                name=name,
                d_out=d_out,
                d_in=d_in,
                sparsity=0.5,
                seconds=0.1 + 0.01 * position,
                act_stats=act,
                histogram=histogram(index, position, sparsity),
            )
        )
    return LayerPruned(LayerRecord(index=index, total=NUM_LAYERS, seconds=1.5 + 0.25 * index, linears=linears))


LOG_END = {
    "finished": [
        "12:09:40 wikitext2 0/166",
        "12:11:02 wikitext2 166/166",
        "12:11:02 finished: prune 12.8 s, ppl 7.110",
    ],
    "failed": [
        "Traceback (most recent call last):",
        '  File "acetui_core/pipeline.py", line 161, in _prune_layer',
        "    stats = _gather_stats(layer, linears, inputs, device)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ],
    "cancelled": [],
    "running": [
        "/usr/lib/python3/site-packages/transformers/modeling_utils.py:4713: FutureWarning: "
        "`_is_quantized_training_enabled` is going to be deprecated in transformers 4.39.0."
    ],
}


def write_log(store: Store, run_id: str, layers: int, status: str) -> None:
    """The run's own log file, as the runner writes it (fixed times)."""
    lines = [
        "2024-05-01 12:00:00 worker pid 31337 runs " + run_id,
        "12:00:01 load 0/1",
        "12:00:09 load 1/1",
        "12:00:10 calibration 128/128",
    ]
    lines += [f"12:0{1 + i}:00 {layer_event(i, '0.5').layer.line}" for i in range(layers)]
    path = store.log_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines + LOG_END[status]) + "\n")


def add_run(
    store: Store,
    method: str,
    sparsity: str,
    *,
    seqlen=16,
    layers: int = NUM_LAYERS,
    ppl: float | None = None,
    status: str = "finished",
    error: str | None = None,
    zeroshot: float | None = None,
    model: str = MODEL,
    pid: int | None = None,
    batch: str | None = None,
    windows: int = 166,
) -> str:
    config = RunConfig(
        model=model,
        method=method,
        sparsity=sparsity,
        seqlen=seqlen,
        nsamples=128,
        eval_limit=None if windows == 166 else windows,
        eval_seqlen=2048,
        device="cuda:0",
        dtype="float16",
    )
    env = {"host": "box", "acetui": "0.1.0", "torch": "2.4.0", "transformers": "4.46.0", "python": "3.11.9"}
    run_id = store.create_run(config, env=env, run_id=f"run{len(store.list_runs()) + 1:05d}", batch=batch)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(model, method, sparsity, NUM_LAYERS, "cuda:0", "NVIDIA H100 80GB HBM3"))
    store.record_event(run_id, Stage("calibration", 128, 128))
    for index in range(layers):
        store.record_event(run_id, LayerStarted(index, NUM_LAYERS))
        store.record_event(run_id, layer_event(index, sparsity, activations=method != "magnitude"))
    if status == "finished":
        result = {
            "model": model,
            "method": method,
            "label": config.label,
            "sparsity": sparsity,
            "group": "row",
            "prune_seconds": 9.75 + len(method),
            "ppl_wikitext2": ppl,
            "ppl_windows": windows,
            "ppl_partial": windows < 166,
            "ppl_seqlen": 2048,
            "zeroshot": None
            if zeroshot is None
            else {
                task: {
                    "acc": acc,
                    "acc_stderr": 0.01,
                    "acc_norm": None,
                    "acc_norm_stderr": None,
                    "n": 100,
                    "total": 100,
                    "partial": False,
                    "source": "local",
                }
                for task, acc in (("boolq", zeroshot), ("rte", zeroshot - 0.1))
            },
            "peak_rss_mb": 2048.0,
            "peak_gpu_mb": 14000.0,
            "device": "cuda:0",
            "dtype": "float16",
            "config": config.to_dict(),
        }
        store.record_event(run_id, RunFinished(record(RunResult, result)))
    elif status == "running":
        store.record_event(run_id, LayerStarted(layers, NUM_LAYERS))
        store.heartbeat(
            run_id,
            {
                "taken": NOW - 1,
                "rss_mb": 3757.0,
                "cpu_percent": 101.0,
                "gpu": "cuda:0",
                "gpu_used_mb": 13107.2,
                "gpu_total_mb": 81559.0,
                "gpu_process_mb": 12288.0,
                "gpu_util_percent": 97.0,
            },
        )
    else:
        store.set_status(run_id, status, error=error)
    write_log(store, run_id, layers, status)
    if pid is not None:
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE runs SET pid = ?, host = 'box' WHERE id = ?", (pid, run_id))
        db.close()
    return run_id


def build_store(path: Path) -> Store:
    """Nine runs of every kind: finished (two sparsities, four methods; the first three one comparison),
    running, failed, cancelled."""
    store = Store(path, clock=Ticks())
    comparison = {"pid": COMPARISON_PID, "batch": "run00001"}  # queued together: one batch
    add_run(store, "wanda", "0.5", ppl=7.89, zeroshot=0.61, **comparison)
    add_run(store, "ria", "0.5", ppl=7.27, zeroshot=0.62, **comparison)
    add_run(store, "ace", "0.5", ppl=7.11, zeroshot=0.64, **comparison)
    add_run(store, "wanda", "2:4", ppl=11.53, pid=1001)
    add_run(store, "ace", "2:4", ppl=10.92, pid=1002, windows=16)
    add_run(store, "magnitude", "0.5", ppl=17.29, model="/models/opt-1.3b", pid=1003)
    add_run(store, "cosp", "0.5", seqlen="full", layers=3, status="running")
    add_run(
        store,
        "varp",
        "0.5",
        layers=1,
        status="failed",
        pid=1004,
        error="CUDA out of memory. Tried to allocate 2.00 GiB; try --device cpu or a smaller --nsamples.",
    )
    add_run(
        store, "sparsegpt", "4:8", layers=2, status="cancelled", error="Stopped on request between layers.", pid=1005
    )
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
        (shutil.copytree if part.is_dir() else shutil.copy)(part, tmp_path / part.name)
    copy = Store(tmp_path / "runs.db")
    with sqlite3.connect(copy.path) as db:  # each run's log file, in the copy
        for run_id, env in db.execute("SELECT id, env FROM runs").fetchall():
            db.execute(
                "UPDATE runs SET env = ? WHERE id = ?",
                (json.dumps({**json.loads(env), "log": str(copy.log_path(run_id))}), run_id),
            )
    db.close()
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr("acetui.app.screens.new_run.model_candidates", lambda recent: recent)
    monkeypatch.setattr("acetui.app.screens.new_run.starting_model", lambda last: "")
    monkeypatch.setattr("acetui.app.summary.clock", lambda: NOW)
    # the toast on opening the app while a run goes on (tests/test_app_going.py) would lie over the screens
    monkeypatch.setattr("acetui.app.workbench.Workbench._announce_runs_going_on", lambda self: None)
    yield copy
    monkeypatch.undo()  # restore TZ now, so that tzset() below brings back the local zone
    time.tzset()


def until(condition, timeout: float = 20.0):
    """A ``run_before`` that lets the app's store-polling threads deliver until ``condition(app)``."""

    async def wait(pilot):
        await pilot_wait_until(pilot, lambda: condition(pilot.app), "the screen to show the store's data", timeout)

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


def log_has(text: str):
    return lambda app: any(text in line.text for line in app.screen.query_one("#log").lines)


def both(*conditions):
    return until(lambda app: all(condition(app) for condition in conditions))


def layer_rows(count: int):
    return lambda app: app.screen.query_one("#layers").row_count == count


@pytest.mark.parametrize("size", SIZES)
def test_run_live(snap_compare, store, size):
    """A run in progress: 3 of 6 layers, the last one's histogram, elapsed time and ETA, the resource
    line from its last heartbeat, the tail of its log file."""
    assert snap_compare(
        make_app(store, attach="run00007"), terminal_size=size, run_before=both(layer_rows(3), log_has("FutureWarning"))
    )


def test_run_failed(snap_compare, store):
    """The error under the title; the traceback at the end of the log."""
    app = make_app(store, attach="run00008")
    assert snap_compare(
        app, run_before=both(lambda app: app.screen.query_one("#run-error").display, log_has("OutOfMemoryError"))
    )


@pytest.mark.parametrize("size", SIZES)
def test_run_nm_histogram(snap_compare, store, size):
    """2:4 (partial perplexity, †): pruned and kept scores in each bin, and no threshold line."""
    assert snap_compare(
        make_app(store, attach="run00005"),
        terminal_size=size,
        run_before=both(layer_rows(NUM_LAYERS), log_has("finished")),
    )


def in_comparison(app) -> bool:
    """The app has found the comparison of runs 1-3 (from its store poll): the title says "(k/3)"."""
    return app.batch == ("run00001", "run00002", "run00003")


def test_run_comparison(snap_compare, store):
    """The second run of a comparison: every run of it with its perplexity on the batch line."""
    assert snap_compare(make_app(store, attach="run00002"), run_before=both(layer_rows(NUM_LAYERS), in_comparison))


def test_run_variance_ticks(snap_compare, store):
    """Var[x²] over seven decades at 80 columns: compact ticks (1e3), not 20-character labels."""
    assert snap_compare(
        make_app(store, attach="run00003"), press=["v"], run_before=both(layer_rows(NUM_LAYERS), in_comparison)
    )


def test_run_config(snap_compare, store):
    assert snap_compare(
        make_app(store, attach="run00003"), press=["i"], run_before=both(layer_rows(NUM_LAYERS), in_comparison)
    )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("key", ["h", "s", "v"])
def test_empty_run_screen_plots(snap_compare, tmp_path, key, size):
    """No run at all: each plot key draws an empty plot (``v`` used to crash on a log axis with no points)."""
    assert snap_compare(make_app(Store(tmp_path / "empty.db")), press=["f2", key], terminal_size=size)


def test_help_on_results(snap_compare, store):
    async def help_keys(pilot):
        await pilot.press("f3")
        await rows("#results", 6)(pilot)
        await pilot.press("question_mark")

    assert snap_compare(make_app(store), run_before=help_keys)


def test_run_depth_plots_light(snap_compare, store):
    assert snap_compare(
        make_app(store, theme="light", attach="run00003"),
        press=["s"],
        run_before=both(layer_rows(NUM_LAYERS), in_comparison),
    )


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


# ---- every screen at 80x24 under NO_COLOR: series told apart by glyph, no legend over the data, titles
# that fit, no stray scrollbar marks, the active tab underlined ----------------------------------------


def _results(*keys: str):
    async def steps(pilot):
        await pilot.press("f3")
        await rows("#results", 6)(pilot)
        await pilot.press(*keys)

    return steps


async def _runs_steps(pilot):
    await pilot.press("f4")
    await rows("#runs", 9)(pilot)


NO_COLOR_SCREENS = {
    "run-histogram": ("run00003", [], None),
    "run-sparsity": ("run00003", ["s"], None),
    "run-variance": ("run00003", ["v"], None),
    "run-config": ("run00003", ["i"], None),
    "results": (None, [], _results()),
    "results-paper": (None, [], _results("v")),
    "results-pareto": (None, [], _results("p")),
    "runs": (None, [], _runs_steps),
    "help": (None, [], _results("question_mark")),
}


@pytest.mark.parametrize("screen", NO_COLOR_SCREENS)
def test_no_color_80x24(snap_compare, store, monkeypatch, screen):
    monkeypatch.setenv("NO_COLOR", "1")
    attach, press, steps = NO_COLOR_SCREENS[screen]
    ready = steps or both(layer_rows(NUM_LAYERS), in_comparison)
    assert snap_compare(make_app(store, attach=attach), terminal_size=(80, 24), press=press, run_before=ready)


def test_no_color_new_run_80x24(snap_compare, store, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    from textual.widgets import Input

    async def fill(pilot):
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False

    assert snap_compare(make_app(store), terminal_size=(80, 24), run_before=fill)
