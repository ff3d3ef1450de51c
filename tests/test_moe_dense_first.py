"""Mixture-of-experts checkpoints whose first decoder layers are dense MLPs (DeepSeek-V3's
``first_k_dense_replace``, GLM-4-MoE's, ERNIE-4.5-MoE's ``moe_layer_start_index``) stream with
``--offload disk``: the saved weights have the sparsity the run reports, and ``acetui plan`` says what the
run then does (it streams; the same layers and weights of each kind)."""

from __future__ import annotations

import json

import pytest
from runhelpers import saved_tensors
from test_moe import QUICK, _pruned_zeros

# Each family with its first layer dense and its second a mixture of experts.
DENSE_FIRST = {
    "deepseek_v3": {"first_k_dense_replace": 1},
    "glm4_moe": {"first_k_dense_replace": 1},
    "ernie4_5_moe": {"moe_layer_start_index": 1},
}


@pytest.mark.parametrize("family", DENSE_FIRST)
def test_a_model_with_dense_first_layers_streams_as_planned(cli, make_moe, calib_file, tmp_path, family):
    source = make_moe(family, **DENSE_FIRST[family])
    code, out, err = cli("plan", source, "-m", "wanda", "--offload", "disk", "--device", "cpu", *QUICK, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["streaming"]
    code, out, err = cli("prune", source, "-m", "wanda", "-s", "0.5", "--calib", calib_file, *QUICK, "--device",
                         "cpu", "--offload", "disk", "--save", tmp_path / "out", "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    zeros, weights = _pruned_zeros(saved_tensors(tmp_path / "out"))
    assert zeros / weights == pytest.approx(0.5, abs=1e-9)
    assert result["overall_sparsity"] == pytest.approx(zeros / weights, abs=1e-9)
    experts = _pruned_zeros(saved_tensors(tmp_path / "out"), ".experts.")
    assert experts[1] > 0 and experts[0] / experts[1] == pytest.approx(0.5, abs=1e-9)
    assert {linear["layer"] for linear in result["layers"]} == set(range(plan["layers"]))
    assert [load["layer"] for load in result["experts"]["load"]] == [1]  # layer 0 is dense
    recorded: dict[str, int] = {}
    for linear in result["layers"]:
        recorded[linear["kind"]] = recorded.get(linear["kind"], 0) + linear["weights"]
    assert recorded == {kind: n for kind, n in plan["census"].items() if kind not in ("routing", "norms and biases")}
