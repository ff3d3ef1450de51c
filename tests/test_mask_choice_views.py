"""How a linear's mask was chosen (retained score, --permute, --refine dsnot), as the store keeps it and
as ``acetui runs show`` and the Run screen show it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from runhelpers import Clock, cli, insert_run, layer_event
from textual.widgets import DataTable, Static

from acetui.app import make_app
from acetui_core.run.config import RunConfig
from acetui_core.run.records import MaskChoice, Refinement
from acetui_core.storage.store import Store

RUN = "c0ffee000001"


def chosen(index: int, position: int) -> MaskChoice:
    return MaskChoice(
        retained=0.9 - 0.01 * position,
        retained_unpermuted=0.8 - 0.01 * position,
        permutation=[3, 1, 0, 2] if position == 0 else None,
        refinement=Refinement(swaps=10 * (index + 1), error_before=0.5, error_after=0.25 + 0.01 * position),
    )


def store_with_choices(tmp_path) -> Store:
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    config = RunConfig("org/m", "ria", "2:4", permute="lsa", refine="dsnot")
    insert_run(store, clock, RUN, config, created=1.7e9, ppl=20.0, layers=2)
    for index in range(2):  # the layers again, now with how their masks were chosen
        event = layer_event(index, 2, linears=2)
        event.layer.linears = [replace(linear, choice=chosen(index, i)) for i, linear in enumerate(event.layer.linears)]
        store.record_event(RUN, event)
    return store


def test_the_store_keeps_each_linears_mask_choice(tmp_path):
    layers = store_with_choices(tmp_path).get_run(RUN).layers
    assert [[linear.choice for linear in layer.linears] for layer in layers] == [
        [chosen(index, i) for i in range(2)] for index in range(2)
    ]


def test_runs_show_gives_each_layers_retained_score_and_dsnot_swaps(tmp_path, monkeypatch, capsys):
    store_with_choices(tmp_path)
    code, out, err = cli(monkeypatch, capsys, "runs", "show", RUN, "--store", tmp_path / "runs.db")
    assert code == 0, err
    header, first, second = out.splitlines()[4:7]
    assert header.split() == [
        "layer",
        "linears",
        "sparsity",
        "seconds",
        "retained",
        "unpermuted",
        "swaps",
        "DSnoT",
        "error",
    ]
    # retained: mean of 0.90 and 0.89; unpermuted: of 0.80 and 0.79; swaps: 10 + 10; error: 0.5 -> mean(0.25, 0.26)
    assert first.split()[4:] == ["0.8950", "0.7950", "20", "0.5000", "->", "0.2550"]
    assert second.split()[6] == "40"


@pytest.mark.asyncio
async def test_the_run_screen_captions_the_linears_retained_score_and_swaps(tmp_path):
    store = store_with_choices(tmp_path)
    app = make_app(store, attach=RUN)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.5)
        caption = str(app.screen.query_one("#histogram-caption", Static).render())
        assert "Keeps 90.00% of the score (80.00% without --permute)" in caption
        row = app.screen.query_one("#layers", DataTable).cursor_row  # the highlighted layer's first linear
        assert f"DSnoT: {10 * (row + 1)} swaps, expected-output error 0.5 -> 0.25." in caption
