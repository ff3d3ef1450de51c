"""DeepSeek-V3's and GLM-4-MoE's router keep a persistent buffer per expert (``e_score_correction_bias``):
the plan and a run without --save count it as the saved files do, so parameters_removed does not depend on
--save (they left it out: 24832 unsaved against 24836 saved)."""

from __future__ import annotations

import json

import pytest
from test_moe import QUICK


@pytest.mark.parametrize("family", ["deepseek_v3", "glm4_moe"])
def test_the_plan_and_an_unsaved_run_count_the_routers_buffers(make_moe, calib_file, cli, tmp_path, family):
    source = make_moe(family)
    code, out, err = cli("plan", source, "--expert-sparsity", "0.5", "--device", "cpu", "--offload", "none", "--json")
    assert code == 0, err
    plan = json.loads(out)
    results = {}
    for save in ([], ["--save", tmp_path / "saved"]):
        code, out, err = cli("prune", source, "-s", "0", "--expert-sparsity", "0.5", "--expert-score", "frequency",
                             "--calib", calib_file, *QUICK, *save, "--json")  # fmt: skip
        assert code == 0, err
        results[bool(save)] = json.loads(out)
    unsaved, saved = results[False], results[True]
    assert saved["experts_removed"]["counted_from"] == "saved checkpoint"
    assert unsaved["parameters_removed"] == saved["parameters_removed"]
    for result in (unsaved, saved):
        removed = result["experts_removed"]
        assert (removed["parameters_before"], removed["parameters_after"]) == (
            plan["parameters"],
            plan["saved_parameters"],
        )
