"""Keystroke-to-screen latency of the Results screen over a store of 300 finished runs, each with the
per-window losses its verdicts are tested on (issue 31, item 9).

The app runs headless at 80x24 under Textual's Pilot; each key is timed from its press until the app is
idle again with the screen redrawn (``pilot.press`` returns once the key's handlers have run, then
``pilot.pause`` lets the refresh happen). Three kinds of key: typing a model filter and erasing it, moving
the cursor, selecting runs; first with the table shown, then with the paper view shown (methods by
sparsity, each cell's interval and verdict from its runs' window losses).

    .venv/bin/python bench/results_latency.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from runhelpers import Clock, insert_run, window_losses
from textual.pilot import WaitForScreenTimeout

from acetui.app import make_app
from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

WINDOWS, SEQLEN = 32, 16
METHODS = ("wanda", "ria", "ace", "magnitude", "sparsegpt")
SPARSITIES = ("0.5", "0.6", "2:4")
MODELS = ("org/llama-tiny", "org/qwen-tiny")


def build_store(path: Path, count: int) -> Store:
    """``count`` finished runs: methods x sparsities x two models x seeds, each with its window losses."""
    clock = Clock()
    store = Store(path, clock=clock)
    base = np.random.default_rng(0).normal(4.3, 0.35, WINDOWS)
    for i in range(count):
        method, sparsity = METHODS[i % len(METHODS)], SPARSITIES[(i // len(METHODS)) % len(SPARSITIES)]
        model, seed = MODELS[(i // 15) % len(MODELS)], i // 30
        rng = np.random.default_rng(i)
        per_token = base + 0.05 * METHODS.index(method) + rng.normal(0, 0.02) + rng.normal(0, 0.01, WINDOWS)
        losses = window_losses(per_token, SEQLEN)
        ppl = float(np.exp(per_token.mean()))
        config = RunConfig(model=model, method=method, sparsity=sparsity, seed=seed, nsamples=8)
        result = {"ppl_windows": WINDOWS, "ppl_seqlen": SEQLEN, "window_losses": losses}
        insert_run(store, clock, f"r{i:07d}", config, created=clock.now + 10, ppl=ppl, result=result)
    return store


async def settle(pilot) -> None:
    """Wait until the app is idle, however long its handlers take (Pilot gives up after 30 s)."""
    while True:
        try:
            await pilot.pause()
            return
        except WaitForScreenTimeout:
            continue


async def timed(pilot, keys: list[str]) -> list[tuple[float, float]]:
    """Per key: milliseconds from its press to the app idle with its screen redrawn, and the CPU time the
    app's process spent meanwhile (all its threads), which a machine whose cores are shared inflates less."""
    spent = []
    for key in keys:
        start, cpu = time.perf_counter(), time.process_time()
        await pilot.press(key)
        await settle(pilot)
        spent.append(((time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000))
    return spent


def summary(name: str, spent: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in spent], [c for _, c in spent]
    return (
        f"{name:<30} n={len(spent):>2}  wall median {statistics.median(wall):7.1f} max {max(wall):7.1f} ms"
        f"  CPU median {statistics.median(cpu):7.1f} ms"
    )


async def measure(store: Store, count: int) -> None:
    app = make_app(store)
    async with app.run_test(size=(80, 24)) as pilot:
        start = time.perf_counter()
        await pilot.press("f3")
        while app.screen.query_one("#results").row_count != count:
            await settle(pilot)
        print(f"{'Results (F3) until listed':<30}       wall {(time.perf_counter() - start) * 1000:7.1f} ms")
        for view in ("table", "paper view"):
            if view == "paper view":
                start = time.perf_counter()
                await pilot.press("v")
                while "Working out" in str(app.screen.query_one("#paper-table").render()):
                    await settle(pilot)
                print(
                    f"{'paper view shown (v) until drawn':<30}       wall {(time.perf_counter() - start) * 1000:7.1f} ms"
                )
            app.screen.query_one("#results").focus()
            await pilot.pause()
            print(summary(f"{view}: cursor down", await timed(pilot, ["down"] * 10)))
            print(summary(f"{view}: select (space)", await timed(pilot, ["space", "down"] * 3)))
            await pilot.press("slash")
            print(summary(f"{view}: filter typed", await timed(pilot, list("llama"))))
            print(summary(f"{view}: filter erased", await timed(pilot, ["backspace"] * 5)))
            await pilot.press("escape")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    count = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        store = build_store(Path(folder) / "runs.db", count)
        asyncio.run(measure(store, count))


if __name__ == "__main__":
    main()
