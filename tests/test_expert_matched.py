"""Expert removal against sparsity inside the experts at matched parameters (docs/moe.md): ``--sparsity F
--sparsity-scope experts`` zeros as many parameters as ``--expert-sparsity F`` removes (less the removed
experts' router rows), both counted on the saved checkpoints, and each run's record says so."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from runhelpers import saved_tensors
from test_expert_removal import _run
from test_moe import QUICK

from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store


def test_sparsity_inside_the_experts_matches_the_parameters_expert_removal_saves(make_moe, calib_file, tmp_path):
    source = make_moe("qwen2_moe")  # shared experts and attention beside the routed experts: both stay dense
    dense = saved_tensors(source)
    removal, _ = _run(source, calib_file, tmp_path / "removal", sparsity="0", expert_sparsity=0.5)
    inside, _ = _run(source, calib_file, tmp_path / "inside", expert_sparsity=0, sparsity_scope="experts")
    removed = sum(t.numel() for t in dense.values()) - sum(
        t.numel() for t in saved_tensors(tmp_path / "removal").values()
    )
    saved = saved_tensors(tmp_path / "inside")
    zeros = {name: int((t == 0).sum() - (dense[name] == 0).sum()) for name, t in saved.items()}  # new zeros
    zeros = {name: count for name, count in zeros.items() if count}
    assert zeros and all(".experts." in name and "shared" not in name for name in zeros)
    for name in saved.keys() - zeros.keys():
        assert torch.equal(saved[name], dense[name]), name
    assert removal.parameters_removed == removed and inside.parameters_removed == sum(zeros.values())
    router_rows = 2 * 4 * 64  # 2 MoE layers, 4 of 8 experts removed, hidden size 64: the removal's only extra
    assert removed - sum(zeros.values()) == router_rows
    assert inside.overall_sparsity == 0.5 and inside.kinds == {"experts": 0.5}


def test_a_run_masking_the_experts_alone_says_so_where_it_names_its_sparsity(make_moe, calib_file, cli, tmp_path):
    """Its summary said "0.5000 of the decoder linears" with a third of them zero, and `acetui runs` listed
    it as plain 0.5, as a whole-model run; its mask covers the routed experts alone."""
    store = tmp_path / "runs.db"
    args = ("--method", "wanda", "--sparsity", "0.5", "--sparsity-scope", "experts")
    code, out, _ = cli("prune", make_moe("qwen2_moe"), *args, "--calib", calib_file, *QUICK, "--store", store)
    assert code == 0 and "0.5000 of the routed experts'" in out, out  # the table folds the rest at 80 columns
    assert "of the decoder linears" not in out and "Wanda-16 at 0.5 in experts" in out
    [run] = Store(store).list_runs()
    assert run.config.target == "0.5 in experts"


@pytest.mark.parametrize("command", ["prune", "compare", "sweep"])
@pytest.mark.parametrize("flags", [["--sparsity-scope", "experts"], ["--expert-sparsity", "0.5"]])
def test_expert_settings_need_routed_experts_before_a_run_is_recorded(
    make_moe, calib_file, cli, tmp_path, command, flags
):
    """compare recorded a failed run for these (the check ran once the model was loaded); prune, compare and
    sweep refuse them from the model's config, and no store is made (they made an empty one)."""
    store = tmp_path / "runs.db"
    code, _, err = cli(command, make_moe("gpt_neox"), *flags, "--calib", calib_file, *QUICK, "--store", store)
    assert code == 2 and "and the 'gpt_neox' model has none." in err and "Traceback" not in err
    assert not store.exists()


def _store_matched_runs(store) -> None:
    """Three seeds of each approach at 50% of the expert parameters: REAP and frequency removal, Wanda and
    ACE inside the experts; removal is the better here (a lower loss) and removes the router rows too."""
    from runhelpers import insert_run
    from test_verdicts import C4, losses

    approaches = [  # (settings, shift of the per-token loss, parameters removed)
        (dict(method="wanda", sparsity="0", expert_sparsity=0.5, expert_score="reap"), 0.0, 1_000_256),
        (dict(method="wanda", sparsity="0", expert_sparsity=0.5, expert_score="frequency"), 0.01, 1_000_256),
        (dict(method="wanda", sparsity="0.5", sparsity_scope="experts"), 0.3, 1_000_000),
        (dict(method="ace", sparsity="0.5", sparsity_scope="experts"), 0.4, 1_000_000),
    ]
    for index, (settings, shift, removed) in enumerate(approaches):
        for seed in range(3):
            run = RunConfig(model="org/tiny-moe", seed=seed, nsamples=8, **settings)
            windows = losses(10 * index + seed, shift)
            ppl = float(np.exp(sum(windows["nll"]) / sum(windows["tokens"])))
            result = {"calibration": {**C4, "seed": seed}, "window_losses": windows, "parameters_removed": removed}
            insert_run(store, store.clock_, f"r{index}{seed}", run, created=100.0 * (3 * index + seed), ppl=ppl,
                       result={**result, "ppl_windows": len(windows["nll"]), "ppl_seqlen": windows["seqlen"]})  # fmt: skip


def test_verdict_and_the_figure_put_expert_removal_beside_sparsity_inside_the_experts(tmp_path, monkeypatch, capsys):
    import json

    from runhelpers import Clock, cli

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    store.clock_ = clock
    _store_matched_runs(store)
    code, out, err = cli(monkeypatch, capsys, "verdict", "--json", "--store", store.path)
    assert code == 0, err
    (column,) = json.loads(out)["columns"]
    assert column["column"] == "50% of expert parameters (tiny-moe)"
    rows = {row["row"]: row for row in column["rows"]}
    assert rows.keys() == {"REAP expert removal", "Frequency expert removal", "Wanda-16", "CosP+VarP-16"}
    assert {rows[r]["verdict"] for r in ("REAP expert removal", "Frequency expert removal")} <= {"best", "tied"}
    assert rows["Wanda-16"]["verdict"] == rows["CosP+VarP-16"]["verdict"] == "worse"
    assert all(row["n"] == 3 for row in rows.values())
    tex = tmp_path / "experts.tex"
    code, _, err = cli(monkeypatch, capsys, "figure", "experts", "-o", tex, "--store", store.path)
    assert code == 0, err
    text = tex.read_text()
    assert text.count("\\addplot") == 4 and "\\addlegendentry{REAP expert removal}" in text
    assert "xlabel={parameters removed (millions" in text and "xmode=normal" in text
    assert {x for x in re.findall(r"\n  \(([\d.]+), ", text)} == {"1.000256", "1"}  # 1,000,256 parameters
    # the pareto and seqlen figures named the removals after their unused method ("Wanda (experts ranked by
    # reap)"): a pruning result that never happened
    for kind in ("pareto", "seqlen"):
        tex = tmp_path / f"{kind}.tex"
        code, _, err = cli(monkeypatch, capsys, "figure", kind, "-o", tex, "--store", store.path)
        legends = re.findall(r"addlegendentry\{(.*)\}", tex.read_text())
        assert code == 0 and sorted(legends) == sorted(
            ["REAP expert removal", "Frequency expert removal", "Wanda", "CosP+VarP"]
        ), (kind, legends, err)
    csv = tmp_path / "runs.csv"
    code, _, err = cli(monkeypatch, capsys, "export", "--format", "csv", "-o", csv, "--store", store.path)
    assert code == 0 and "results.parameters_removed" in csv.read_text().splitlines()[0]


def test_removal_with_a_mask_inside_the_experts_never_shares_a_cell_with_one_on_every_projection(tmp_path):
    from runhelpers import Clock, insert_run

    from acetui_core.analysis.comparison import comparison

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    for index, scope in enumerate(("all", "experts")):
        run = RunConfig(model="org/tiny-moe", method="wanda", expert_sparsity=0.5, sparsity_scope=scope)
        insert_run(store, clock, f"r{index}", run, created=100.0 * index, ppl=10.0 + index)
    table = comparison(store.list_runs())
    assert len(table.cells) == 2 and all(len(cell.values) == 1 for cell in table.cells.values())


def test_the_experts_figure_of_runs_that_never_counted_what_they_removed_says_so(tmp_path, cli):
    from runhelpers import Clock, insert_run

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    run = RunConfig(model="org/tiny-moe", method="wanda", sparsity="0", expert_sparsity=0.5)
    insert_run(store, clock, "r0", run, created=100.0, ppl=10.0)  # finished before parameters_removed was kept
    code, _, err = cli("figure", "experts", "-o", tmp_path / "experts.tex", "--store", store.path)
    assert code == 2 and "None of the selected runs recorded the parameters it removed" in err


def test_the_experts_figure_of_a_dense_models_runs_says_there_are_no_experts(tmp_path, cli):
    """A dense model's runs drew a figure with every point at one x value, exit 0 (CLI audit)."""
    from runhelpers import Clock, insert_run

    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    insert_run(store, clock, "r0", RunConfig(model="org/tiny", method="wanda"), created=100.0, ppl=10.0)
    code, _, err = cli("figure", "experts", "-o", tmp_path / "experts.tex", "--store", store.path)
    assert code == 2 and "is of a mixture-of-experts model" in err, err
    assert not (tmp_path / "experts.tex").exists()


def test_owl_inside_the_experts_prunes_them_to_the_target(make_moe, calib_file):
    """OWL's layer sparsities average to --sparsity over the parameters the mask covers: a dense first layer
    (DeepSeek-V3's) takes no part (it had a share of the target, though nothing in it was masked)."""
    source = make_moe("deepseek_v3", first_k_dense_replace=1)
    inside, _ = _run(source, calib_file, expert_sparsity=0, sparsity_scope="experts", allocation="owl")
    assert inside.kinds.keys() == {"experts"} and abs(inside.kinds["experts"] - 0.5) < 0.01  # masks' rounding
