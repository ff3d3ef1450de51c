"""What the app's figures and tables let a reader read at 80x24 (the appfigures audit): log-scale depth plots
labelled inside their range, score histograms of sampled linears on the scale of their weights, a long
Method cell that leaves Seed, Eval and the run id on screen, seeds told apart on the comparison strip."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.text import Text
from runhelpers import Clock, insert_run, layer_event, pilot_wait_until, result_for
from test_app_terminal import OnePlot
from textual.widgets import DataTable, Static

from acetui.app import make_app
from acetui.app.runview import batch_line, describe_stage
from acetui.app.widgets.plots import ScoreHistogram, histogram_caption
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned, RunFinished, RunStarted
from acetui_core.run.records import Fidelity, Histogram
from acetui_core.storage.store import Store

SIZE = (80, 24)
CONFIG = RunConfig(model="org/llama-tiny", method="wanda", sparsity="0.5", nsamples=8, seqlen=32, fidelity=True)


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "runs.db")


def add_fidelity_run(store: Store, run_id: str, errors: list[float]) -> str:
    """A finished run whose layers' outputs moved by ``errors`` (relative L2; 1 - cos a tenth of it)."""
    store.create_run(CONFIG, run_id=run_id)
    store.claim(run_id)
    store.record_event(run_id, RunStarted(CONFIG.model, CONFIG.method, CONFIG.sparsity, len(errors), "cpu"))
    for index, error in enumerate(errors):
        layer = layer_event(index, len(errors)).layer
        layer.fidelity = Fidelity(cosine=1 - error / 10, rel_error=error)
        store.record_event(run_id, LayerPruned(layer))
    store.record_event(run_id, RunFinished(result_for(CONFIG, ppl=50.0, seconds=3.0)))
    return run_id


def y_labels(plot) -> tuple[list[str], list[str]]:
    """The y labels plotext drew on the rows inside the plot's frame, and the rows outside it (title, x axis)."""
    lines = Text.from_ansi(plot.plt.build()).plain.splitlines()
    top = next(i for i, line in enumerate(lines) if "┌" in line)
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    inside = [line.split("┤")[0].strip() for line in lines[top + 1 : bottom] if "┤" in line]
    return inside, lines[: top + 1] + lines[bottom:]


@pytest.mark.asyncio
async def test_log_plots_within_a_decade_label_their_range_inside_the_frame(store, monkeypatch):
    """Layer errors of 0.17 to 0.28 lie inside one decade: the log axis was labelled at whole decades only,
    none of them in the range, so the Fidelity tab and Results' ``f`` showed no y label (at 80x24 the
    labels plotext did print landed on the title's row and under the frame). The ends carry the values."""
    monkeypatch.setenv("NO_COLOR", "1")
    run_id = add_fidelity_run(store, "fid00001", [0.17, 0.2, 0.19, 0.28])
    app = make_app(store, attach=run_id)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot_wait_until(pilot, lambda: screen.query_one("#layers", DataTable).row_count == 4, "the layers")
        await pilot.press("f")
        await pilot.pause()
        inside, outside = y_labels(screen.query_one("#fidelity-plot"))
        assert inside[0] == "0.28" and inside[-1] == "0.17" and len(inside) == 3, inside
        assert not any("0.2" in line or "e-1" in line for line in outside), outside
        assert outside[0].strip() == "||Y-Y'||/||Y|| by layer (log)"  # whole in the tab's 40 columns, not cut
        await pilot.press("f3")
        table = app.screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 1, "the run's row")
        await pilot.press("f")
        await pilot.pause()
        inside, _ = y_labels(app.screen.query_one("#fidelity-overlay"))
        assert inside[0] == "0.028" and inside[-1] == "0.017", inside  # 1 - cos: a tenth of the errors


def test_log_plots_over_decades_label_their_ends_and_whole_decades():
    from acetui.app.widgets.plots import log_labels, log_ticks

    assert log_labels(log_ticks(-6.55, 12.26)) == ["2.8e-7", "1e-4", "1", "1e4", "1e8", "1.8e12"]
    assert log_labels(log_ticks(-0.77, -0.55)) == ["0.17", "0.22", "0.28"]  # none inside: halfway up too
    assert log_labels(log_ticks(-0.767, -0.760)) == ["0.171", "0.172", "0.174"]  # digits enough to tell apart


@pytest.mark.asyncio
async def test_a_sampled_linears_histogram_counts_its_weights_and_says_it_was_sampled():
    """A large linear's histogram bins every 5th score (``Histogram.stride``): drawn as they were, its counts
    read as weights and sat 5 times below those of a small linear of the layer binned whole."""
    edges = [0.0, 1.0, 2.0, 3.0, 4.0]
    sampled = Histogram(edges=edges, counts=[100, 11832, 400, 7], threshold=1.5, log=False, stride=5)
    whole = replace(sampled, counts=[c * 5 for c in sampled.counts], stride=1)
    drawn = []
    for histogram in (sampled, whole):
        plot = ScoreHistogram(id="h")
        async with OnePlot(plot).run_test(size=(60, 16)) as pilot:
            plot.show("L0 q_proj", histogram)
            await pilot.pause()
            drawn.append(Text.from_ansi(plot.plt.build()).plain)
    assert drawn[0] == drawn[1] and "59k┤" in drawn[0]  # 11832 sampled scores of 59160 weights
    assert histogram_caption("0.5", "layer", sampled) == (
        "░ pruned, █ kept; line: the layer's threshold. Counts from every 5th score, ×5."
    )
    assert "Counts" not in histogram_caption("0.5", "layer", whole)


@pytest.mark.asyncio
async def test_a_long_method_cell_wraps_and_leaves_seed_eval_and_the_id_on_screen(store):
    """At 80 columns an OWL run's label (its settings are not defaults: no brief form) pushed Seed, Eval and
    Id past the screen's edge, so the rows of seed 0 and seed 1 read the same. It wraps instead, whole."""
    clock = Clock()
    base = RunConfig(model="/models/tiny-llama-2", method="wanda", sparsity="0.5", nsamples=8, seqlen=32)
    owl = replace(base, allocation="owl", owl_lambda=0.2, owl_m=2.0)
    other = replace(base, model="/models/tiny-llama-4", sparsity="2:4", seqlen=16, eval_limit=4)
    runs = {"seed0000": (base, 2), "seed0001": (replace(base, seed=1), 2), "owl00002": (owl, 2), "nm000003": (other, 4)}
    for number, (run_id, (config, windows)) in enumerate(runs.items()):
        insert_run(
            store, clock, run_id, config, created=1.7e9 + number, ppl=5e4 + number, result={"ppl_windows": windows}
        )
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        table = app.screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 4, "four results")
        headers = [str(column.label) for column in table.ordered_columns]
        assert headers[-3:] == ["Seed", "Eval", "Id"], headers
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing past the edge
        rows = [dict(zip(headers, map(str, table.get_row_at(i)), strict=True)) for i in range(4)]
        method = {row["Id"]: row["Method"] for row in rows}
        assert "\n" in method["owl00002"] and " ".join(method["owl00002"].split()) == app.screen.method_name(
            store.get_run("owl00002")
        )
        assert {row["Id"]: row["Seed"] for row in rows}["seed0001"] == "1"


def test_the_comparison_strip_names_each_runs_seed_where_the_comparison_has_several(store):
    clock = Clock()
    for number, seed in enumerate((0, 1)):
        insert_run(store, clock, f"seed000{seed}", replace(CONFIG, seed=seed), created=1.7e9 + number, ppl=50.0)
    runs = store.list_runs()
    line = Text.from_markup(batch_line(("seed0000", "seed0001"), runs, "seed0000")).plain
    assert line == "1 ✓ Wanda-32 0.5 seed 0 50.00  │  2 ✓ Wanda-32 0.5 seed 1 50.00"
    alone = Text.from_markup(batch_line(("seed0000",), runs, "seed0000")).plain
    assert alone == "1 ✓ Wanda-32 0.5 50.00"  # one seed: nothing to tell apart


def test_the_stage_line_counts_one_window_as_one(store):
    insert_run(store, Clock(), "part0001", CONFIG, created=1.7e9, ppl=192.4, partial=True, result={"ppl_windows": 1})
    assert describe_stage(store.get_run("part0001")).startswith("finished · ppl 192.40† (1 window) · prune ")


@pytest.mark.asyncio
async def test_sorting_by_calibration_puts_runs_without_it_last(store):
    """A magnitude run reads no calibration data (its cell is –) yet sorted among the 8×32 runs by the
    samples and length it recorded but never read."""
    clock = Clock()
    runs = {
        "long0001": replace(CONFIG, seqlen=64),
        "magn0002": replace(CONFIG, method="magnitude"),
        "short003": replace(CONFIG, seqlen=16),
    }
    for number, (run_id, config) in enumerate(runs.items()):
        insert_run(store, clock, run_id, config, created=1.7e9 + number, ppl=50.0 + number)
    app = make_app(store)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("f3")
        screen = app.screen
        table = screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 3, "three results")
        while "by Calib ↑" not in str(screen.query_one("#results-info", Static).render()):
            await pilot.press("s")
        order = [str(table.get_row_at(i)[-1]) for i in range(3)]
        assert order == ["short003", "long0001", "magn0002"]


@pytest.mark.asyncio
async def test_results_fidelity_spans_the_depth_of_the_runs_it_draws(store):
    """Results' ``f`` drew a 4-layer run's fidelity on an axis 30 layers long, squeezed into its first
    tenth, because a deeper run without fidelity was among the chosen ones."""
    add_fidelity_run(store, "fid00001", [0.17, 0.2, 0.19, 0.28])
    insert_run(store, Clock(), "deep0002", replace(CONFIG, fidelity=False), created=1.8e9, ppl=60.0, layers=30)
    app = make_app(store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        table = app.screen.query_one("#results", DataTable)
        await pilot_wait_until(pilot, lambda: table.row_count == 2, "both runs")
        await pilot.press("f")
        await pilot.pause()
        plot = app.screen.query_one("#fidelity-overlay")
        lines = Text.from_ansi(plot.plt.build()).plain.splitlines()
    bottom = next(i for i, line in enumerate(lines) if "└" in line)
    x_labels = lines[bottom + 1].split()
    assert x_labels[-1] == "3" and "29" not in x_labels, x_labels
