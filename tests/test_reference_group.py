"""Which weights compete for unstructured sparsity (``--group``) by default is the method's reference
protocol: RIA's code (``prune_ria``, ``per_outneuron`` off) and Wanda's code for magnitude
(``prune_magnitude``, the baseline of the Wanda and ACE papers) cut each layer at one threshold; Wanda's and
the ACE paper's scores compete per output row. The other choice is a named variant, and a stored run keeps
the group it ran with."""

from __future__ import annotations

import json

import pytest
from runhelpers import cli as run_cli
from runhelpers import saved_tensors

from acetui_core.run.config import RunConfig
from acetui_core.storage.store import Store

QUICK = ["--nsamples", "4", "--seqlen", "16", "--eval", "none", "--device", "cpu"]


@pytest.mark.parametrize("method", ["ria", "magnitude"])
def test_prunes_each_layer_at_one_threshold_by_default(
    monkeypatch, capsys, make_tiny_model, calib_file, tmp_path, method
):
    store = tmp_path / "runs.db"
    code, out, err = run_cli(monkeypatch, capsys, "prune", make_tiny_model("llama"), "-m", method, "-s", "0.5",
                             "--calib", calib_file, *QUICK, "--save", tmp_path / "out", "--store", store, "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["group"] == "layer"
    assert Store(store).list_runs()[0].config.group == "layer"  # recorded as it ran
    uneven = 0
    for name, W in saved_tensors(tmp_path / "out").items():
        if ".layers." in name and W.dim() == 2:
            assert int((W == 0).sum()) == W.numel() // 2, name  # exactly the layer's share
            per_row = (W == 0).sum(dim=1)
            uneven += int(per_row.min() != per_row.max())  # rows compete with each other
    assert uneven > 0


def test_each_method_defaults_to_its_references_group_and_the_other_is_a_variant():
    for method in ("ria", "magnitude"):
        assert RunConfig(model="m", method=method).group == "layer"
        assert RunConfig(model="m", method=method, group="row").group == "row"
    for method in ("wanda", "ace", "cosp", "varp", "sparsegpt"):
        assert RunConfig(model="m", method=method).group == "row", method


@pytest.mark.parametrize("stored", ["row", "layer"])
def test_a_stored_group_is_kept(stored):
    assert RunConfig.from_dict({"model": "m", "method": "ria", "group": stored}).group == stored


def test_a_record_without_a_group_ran_per_row():
    """Before RIA's default followed its reference, every method competed per row unless told otherwise."""
    assert RunConfig.from_dict({"model": "m", "method": "ria"}).group == "row"


def test_a_grid_gives_each_method_its_own_default(monkeypatch, capsys, make_tiny_model, calib_file, tmp_path):
    """And an N:M pattern, which competes within each row whatever --group says, records row, as every N:M
    run did before: an old and a new RIA 2:4 run share a cell."""
    store = tmp_path / "runs.db"
    code, _, err = run_cli(monkeypatch, capsys, "compare", make_tiny_model("llama"), "--methods", "wanda,ria",
                           "--sparsity", "0.5,2:4", "--calib", calib_file, *QUICK, "--store", store)  # fmt: skip
    assert code == 0, err
    groups = {(run.config.method, run.config.sparsity): run.config.group for run in Store(store).list_runs()}
    assert groups == {("wanda", "0.5"): "row", ("ria", "0.5"): "layer", ("wanda", "2:4"): "row", ("ria", "2:4"): "row"}
