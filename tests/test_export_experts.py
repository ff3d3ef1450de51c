"""The CSV export of expert-removal runs: each run named as the table names its row ("REAP expert
removal", not the unused method's "Wanda-16"), with its cell's row and column, and which experts went and
where the tokens went written out (JSON text), no column empty in every run."""

from __future__ import annotations

import csv
import io
import json

from runhelpers import Clock, cli, insert_run

from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

EXPERTS = {
    "layout": "fused 3-D [experts, d_out, d_in]: gate_up_proj, down_proj",
    "calibration": "routed",
    "load": [{"layer": 0, "experts": "mlp.experts", "tokens": [30, 10, 60, 28]}],
    "removal": [
        {"layer": 0, "experts": "mlp.experts", "score": "reap", "scores": [0.2, 0.1, 0.4, 0.3], "removed": [1]}
    ],
}
REMOVED = {"fraction": 0.25, "score": "reap", "kept": [3], "parameters_before": 1000, "parameters_after": 750}


def test_the_csv_names_removal_runs_as_the_table_and_writes_what_they_removed(tmp_path, monkeypatch, capsys):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    approaches = [
        ("r1", dict(sparsity="0", expert_sparsity=0.25), {"experts": EXPERTS, "experts_removed": REMOVED}),
        ("r2", dict(sparsity="0.25", sparsity_scope="experts"), {}),
    ]
    for index, (run_id, settings, result) in enumerate(approaches):
        config = RunConfig(model="org/tiny-moe", method="wanda", nsamples=8, **settings)
        insert_run(store, clock, run_id, config, created=100.0 * index, ppl=10.0 + index, result=result)
    out = tmp_path / "runs.csv"
    code, _, err = cli(monkeypatch, capsys, "export", "--format", "csv", "-o", out, "--store", store.path)
    assert code == 0, err
    rows = {row["id"]: row for row in csv.DictReader(io.StringIO(out.read_text()))}
    removal, inside = rows["r1"], rows["r2"]
    assert (removal["label"], removal["row"]) == ("REAP expert removal", "REAP expert removal")
    assert (inside["label"], inside["row"]) == ("Wanda-16", "Wanda-16")
    assert removal["column"] == inside["column"] == "25% of expert parameters"
    assert json.loads(removal["results.experts.removal"])[0]["removed"] == [1]
    assert json.loads(removal["results.experts.load"])[0]["tokens"] == [30, 10, 60, 28]
    assert removal["results.experts_removed.kept"] == "3"
    assert "results.experts_removed" not in removal  # null in the other run: its dotted columns say it all
