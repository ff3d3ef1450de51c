"""--expert-sparsity names the share of experts a run removes, exactly: a fraction whose ``F x E`` (per
routing group on a grouped router) is not a whole number of experts is refused in every command, with the
nearest shares that are, so a run is never filed and compared under a share it did not remove."""

from __future__ import annotations

import pytest
from test_moe import QUICK


@pytest.mark.parametrize("command", [["prune"], ["plan"], ["compare", "--methods", "wanda"], ["sweep"]])
def test_a_share_the_routing_groups_cannot_honour_is_refused_with_the_nearest_that_can(
    make_moe, calib_file, cli, tmp_path, command
):
    """DeepSeek-V3's 8 experts in 2 routing groups: 0.375 took int(1.5) = 1 per group, 25% of the experts,
    and the run was filed in the column '37.5% of expert parameters' beside Wanda at 37.5%."""
    store = tmp_path / "runs.db"
    flags = [] if command == ["plan"] else ["--calib", calib_file, *QUICK, "--store", store]
    code, out, err = cli(*command, make_moe("deepseek_v3"), "--expert-sparsity", "0.375", *flags)
    assert code == 2 and "Traceback" not in err, err
    assert " ".join(err.split()) == (
        "acetui: --expert-sparsity 0.375 would remove 2 of 8 experts (25%) on deepseek_v3 (2 routing groups): "
        "give 0.25 or 0.5, a whole number of experts."
    )
    assert not store.exists()


def test_an_ungrouped_router_names_only_the_shares_it_can_run(make_moe, calib_file, cli):
    """Mixtral's 4 experts, 2 per token: 0.3 removed 1 (25%) under '30%'; 0.9 would keep 1, too few, so
    the nearest share below that keeps 2 is named alone."""
    code, _, err = cli("prune", make_moe("mixtral"), "--expert-sparsity", "0.3", "--calib", calib_file, *QUICK)
    assert code == 2 and "would remove 1 of 4 experts (25%) on mixtral: give 0.25 or 0.5," in " ".join(err.split())
    code, _, err = cli("prune", make_moe("mixtral"), "--expert-sparsity", "0.9", "--calib", calib_file, *QUICK)
    assert code == 2 and "would remove 3 of 4 experts (75%) on mixtral: give 0.5," in " ".join(err.split())
