"""Intervals, paired tests and Holm's correction on hand-made unit values, checked against direct
computations."""

import numpy as np
import pytest
from scipy import stats

from acetui_core.analysis.evidence import (
    Group,
    accuracy_interval,
    group_interval,
    holm,
    paired_difference,
)


def test_an_accuracy_interval_is_wilsons():
    ci = stats.binomtest(30, 40).proportion_ci(0.9, method="wilson")
    assert accuracy_interval(np.array([1] * 30 + [0] * 10), level=0.9) == pytest.approx((ci.low, ci.high))


def test_a_groups_interval_counts_the_seed_spread():
    """Units that agree within each run leave only the seeds' spread: mean ± t(k-1) s / sqrt(k)."""
    means = [2.0, 2.3, 2.1]
    group = Group([[np.full(16, m)] for m in means])
    half = stats.t.ppf(0.975, 2) * np.std(means, ddof=1) / np.sqrt(3)
    assert group_interval(group) == pytest.approx((np.mean(means) - half, np.mean(means) + half))


def test_a_paired_difference_of_single_runs_is_the_paired_t_test():
    rng = np.random.default_rng(1)
    x = rng.normal(4.0, 0.3, 50)
    y = x + rng.normal(0.05, 0.1, 50)
    difference = paired_difference(Group([[y]]), Group([[x]]))
    assert difference.p == pytest.approx(stats.ttest_rel(y, x).pvalue)
    assert difference.value == pytest.approx(np.mean(y - x))
    assert difference.seed_noise_known is False


def test_identical_windows_give_p_one():
    x = np.random.default_rng(2).normal(4.0, 0.3, 32)
    difference = paired_difference(Group([[x], [x + 0.1]]), Group([[x], [x + 0.1]]))
    assert difference.p == 1.0 and difference.value == 0.0 and difference.seed_noise_known


def test_one_task_of_0_1_outcomes_run_against_run_is_mcnemars_exact_test():
    """5 of 10 documents flipped one way: McNemar's exact p is 2 / 2^5; the t-test said 0.015."""
    right, wrong = np.array([1] * 5 + [0] * 5), np.zeros(10)
    difference = paired_difference(Group([[right]]), Group([[wrong]]))
    assert difference.p == pytest.approx(0.0625) and stats.ttest_rel(right, wrong).pvalue < 0.05
    # the interval is the same test's: it holds 0 where p says tied (the t-interval was [0.12, 0.88])
    low, high = difference.ci
    assert low < 0 < high and high == pytest.approx(0.5)
    for only_a, only_b in ((9, 1), (8, 0), (7, 3), (12, 2)):  # Clopper-Pearson leaves 0 out exactly when p < 0.05
        a = np.array([1] * only_a + [0] * only_b + [1] * 5)
        b = np.array([0] * only_a + [1] * only_b + [1] * 5)
        found = paired_difference(Group([[a]]), Group([[b]]))
        assert (found.ci[0] > 0) == (found.p < 0.05), (only_a, only_b, found)


def test_units_that_all_moved_alike_get_the_sign_test_not_p_zero():
    """Two documents, both right on each of three seeds against both wrong: no spread for a t, and two
    units can never give p < 0.001 (it said p = 0, "worse")."""
    difference = paired_difference(Group([[np.ones(2)]] * 3), Group([[np.zeros(2)]] * 3))
    assert difference.p == pytest.approx(0.5) and difference.ci is None  # no spread for an interval either


def test_a_paired_difference_needs_the_same_units():
    with pytest.raises(ValueError, match="same units"):
        paired_difference(Group([[np.zeros(4)]]), Group([[np.zeros(5)]]))


def test_holm_adjusts_step_down():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
