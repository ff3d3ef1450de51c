"""``acetui overlap`` of runs that removed routed experts (--expert-sparsity): a linear a layer lacks is
"-", never 1.000 from 0/0; expert columns name their expert; runs that removed different experts compare
the experts both kept and say so, instead of calling a mask file damaged."""

from __future__ import annotations

import json

from test_moe import QUICK


def _run(cli, model, calib_file, store, *flags) -> dict:
    code, out, err = cli("prune", model, "-m", "wanda", "-s", "0.5", "--keep-masks", "--calib", calib_file,
                         *QUICK, "--store", store, *flags, "--json")  # fmt: skip
    assert code == 0, err
    return json.loads(out)


def test_overlap_of_runs_with_removed_experts(make_moe, calib_file, cli, tmp_path):
    store, model = tmp_path / "runs.db", make_moe("qwen2_moe")
    removal = _run(cli, model, calib_file, store, "--expert-sparsity", "0.25")["run_id"]
    dense = _run(cli, model, calib_file, store)["run_id"]
    code, out, err = cli("overlap", removal, removal, "--store", store, "--json")
    assert code == 0, err
    kept = {(row["layer"], row["name"]) for row in json.loads(out)["linears"]}
    gone = [(layer, f"mlp.experts.{e}.down_proj") for layer in (0, 1) for e in range(8)]
    gone = [key for key in gone if key not in kept]
    assert len(gone) == 4 and {layer for layer, _ in gone} == {0, 1}
    assert any((1 - layer, name) in kept for layer, name in gone)  # a column one layer lacks: its cell is "-"

    code, out, err = cli("overlap", removal, removal, "--store", store)
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("layer"))
    assert [f"e{e} down" in header for e in range(8)] == [True] * 8  # every expert's column names it
    assert header.index("e0 down") < header.index("e7 down") < header.index("  down")  # the shared expert's
    for layer, name in gone:  # the cell under a removed expert's column: left-aligned, so at the header's start
        row = next(line for line in lines if line.startswith(f"{layer} "))
        assert row[header.index(f"e{name.split('.')[2]} down")] == "-"

    code, out, err = cli("overlap", removal, dense, "--store", store)
    assert code == 0 and "damaged" not in err, err
    assert f"Runs {removal} and {dense} removed different experts (layer 0:" in " ".join(out.split())
    assert "only the experts both kept are compared." in " ".join(out.split())
    code, out, err = cli("overlap", removal, dense, "--store", store, "--json")
    linears = {(row["layer"], row["name"]) for row in json.loads(out)["linears"]}
    assert linears == kept


def test_overlap_of_a_run_masking_the_experts_alone_with_one_masking_every_linear(make_moe, calib_file, cli, tmp_path):
    """docs/moe.md's comparison (sparsity inside the experts against the whole model's) was refused as "one
    of the mask files is damaged, or the model changed"; the experts' linears, the ones both masked, are compared."""
    store, model = tmp_path / "runs.db", make_moe("qwen2_moe")
    inside = _run(cli, model, calib_file, store, "--sparsity-scope", "experts")["run_id"]
    everywhere = _run(cli, model, calib_file, store)["run_id"]
    code, out, err = cli("overlap", everywhere, inside, "--store", store, "--json")
    assert code == 0, err
    compared = json.loads(out)
    assert compared["scope"].startswith(f"Run {inside} masked the routed experts alone (--sparsity-scope experts)")
    names = {row["name"] for row in compared["linears"]}
    assert names and all(".experts." in name and "shared" not in name for name in names), names
    assert all(row["pruned_b"] > 0 and 0 < row["shared"] <= row["pruned_a"] for row in compared["linears"])
