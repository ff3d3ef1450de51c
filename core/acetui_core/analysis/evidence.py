"""Whether a difference between two results is larger than their noise: intervals, paired tests and
verdicts, from what each run measured unit by unit (a perplexity window's loss, a zero-shot document's
0/1). Pure numbers: no store, no records (``acetui_core.analysis.comparison`` feeds it).

Two sources of noise are counted. The evaluation units: another set of windows or documents would give
another number. The seeds: another calibration sample gives another mask. Every run of a comparison is
evaluated on the same units, so a paired test removes what the units share; the seed-to-seed spread stays
and can only be measured with at least two seeds (a method without calibration data has none).

A group's value on a column is the mean over its seeds of each run's mean over units (per stratum, then
over strata: zero-shot tasks weigh equally, as the paper's mean accuracy). Its variance is
``s^2/k`` (the seeds' sample variance over their count) plus the variance of the seed-averaged unit mean
over units; the interval is ``t`` with Welch-Satterthwaite's degrees of freedom. A paired difference
adds both groups' seed parts to the variance of the per-unit differences: with one seed on each side
and one stratum it is exactly the paired t-test (``scipy.stats.ttest_rel``); with 0/1 outcomes of one
task, McNemar's exact test instead. Units that all moved alike, with no seed spread, get the sign test.
One run's perplexity interval is the same ``t`` interval with one seed: mean NLL per window
``± t(n-1) s/sqrt(n)`` over its ``n`` windows, exponentiated (a percentile bootstrap over windows, used
before, covered 52% of the time with 2 windows and 88% with 8, and its ends were the two windows' values);
one zero-shot task's, Wilson's binomial interval (``scipy.stats.binomtest``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEED_NOISE_UNKNOWN = "1 seed: seed noise unknown"


def _stats():
    """``scipy.stats``, imported on first use: it takes a second, and most commands never test anything."""
    from scipy import stats

    return stats


@dataclass
class Group:
    """The runs of one cell: per run (seed), its per-unit values in strata (one stratum for perplexity:
    each window's NLL per token; one per task for accuracy: each document's 0/1). ``seed_free``: the method
    reads no calibration data, so its seeds cannot differ and one run is enough."""

    runs: list[list[np.ndarray]]
    seed_free: bool = False

    @property
    def seeds(self) -> int:
        return len(self.runs)

    @property
    def seed_noise_known(self) -> bool:
        return self.seed_free or self.seeds >= 2

    @property
    def unit_noise_known(self) -> bool:
        """Whether the sampling noise of the units can be measured: a stratum of two units or more. One
        window (``--eval-limit 1``) gives none, and a zero-width interval would claim certainty."""
        return any(len(units) > 1 for units in self.runs[0])

    def run_means(self) -> np.ndarray:
        return np.array([stratified_mean(strata) for strata in self.runs])

    def unit_means(self) -> list[np.ndarray]:
        """Each unit's value averaged over the seeds, per stratum."""
        return [np.mean([run[i] for run in self.runs], axis=0) for i in range(len(self.runs[0]))]

    @property
    def mean(self) -> float:
        return float(self.run_means().mean())


@dataclass
class Difference:
    """``a - b`` of two groups' means on the same units, its interval and two-sided p-value."""

    value: float
    ci: tuple[float, float] | None  # None where no spread is left to give one (units and seeds all alike)
    p: float
    seed_noise_known: bool


def stratified_mean(strata: list[np.ndarray]) -> float:
    return float(np.mean([np.mean(units) for units in strata]))


def _units_variance(strata: list[np.ndarray]) -> tuple[float, float]:
    """The variance of ``stratified_mean`` over the sampling of units, and its degrees of freedom."""
    variance = sum(np.var(units, ddof=1) / len(units) for units in strata if len(units) > 1) / len(strata) ** 2
    return float(variance), float(sum(len(units) - 1 for units in strata))


def _seed_variance(group: Group) -> tuple[float, float]:
    """``s^2/k`` of the group's run means and its degrees of freedom (0 for a seed-free method)."""
    if group.seed_free or group.seeds < 2:
        return 0.0, float("inf")
    return float(np.var(group.run_means(), ddof=1) / group.seeds), float(group.seeds - 1)


def _t_interval(center: float, parts: list[tuple[float, float]], level: float) -> tuple[float, float, float, float]:
    """``center ± t * sqrt(sum of variances)``, df by Welch-Satterthwaite; returns (low, high, se, df)."""
    variance = sum(v for v, _ in parts)
    if variance <= 0:
        return center, center, 0.0, float("inf")
    df = variance**2 / sum(v * v / d for v, d in parts if v > 0 and d > 0)
    se = float(np.sqrt(variance))
    half = float(_stats().t.ppf((1 + level) / 2, df)) * se
    return center - half, center + half, se, df


def group_interval(group: Group, level: float = 0.95) -> tuple[float, float]:
    """The interval of a group's mean (in the units' scale: NLL per token, or accuracy as a fraction).
    Seed spread and unit sampling together (see the module docstring)."""
    low, high, _, _ = _t_interval(group.mean, [_seed_variance(group), _units_variance(group.unit_means())], level)
    return low, high


def accuracy_interval(correct: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """One task's accuracy interval (as a fraction): Wilson's binomial interval."""
    ci = _stats().binomtest(int(np.sum(correct)), len(correct)).proportion_ci(level, method="wilson")
    return float(ci.low), float(ci.high)


def paired_difference(a: Group, b: Group, level: float = 0.95) -> Difference:
    """``mean(a) - mean(b)`` of two groups evaluated on the same units, its interval and p-value."""
    if [len(s) for s in a.runs[0]] != [len(s) for s in b.runs[0]]:
        raise ValueError("a paired difference needs both groups on the same units")
    differences = [x - y for x, y in zip(a.unit_means(), b.unit_means(), strict=True)]
    value = a.mean - b.mean
    parts = [_seed_variance(a), _seed_variance(b), _units_variance(differences)]
    low, high, se, df = _t_interval(value, parts, level)
    ci: tuple[float, float] | None = (low, high)
    if _one_task_each(a, b):
        p, ci = _mcnemar(a.runs[0][0], b.runs[0][0], level)
    elif se == 0 and value != 0:  # no spread to scale a t or an interval by (units and seeds all alike)
        p, ci = _sign_test(np.concatenate(differences)), None
    elif se == 0:
        p = 1.0
    else:
        p = float(2 * _stats().t.sf(abs(value) / se, df))
    return Difference(value, ci, p, a.seed_noise_known and b.seed_noise_known)


def _one_task_each(a: Group, b: Group) -> bool:
    """One run of 0/1 outcomes on one task on each side: McNemar's exact test applies (the t-test's
    large-sample form of it is optimistic on few documents: 5 of 10 flipped one way gave p 0.015, not
    0.0625)."""
    groups = (a, b)
    return all(group.seeds == 1 and len(group.runs[0]) == 1 for group in groups) and all(
        np.isin(group.runs[0][0], (0, 1)).all() for group in groups
    )


def _sign_test(differences: np.ndarray) -> float:
    signs = np.sign(differences[differences != 0])
    return _central_p(int(np.sum(signs > 0)), len(signs))


def _central_p(k: int, n: int) -> float:
    """The two-sided p of ``k`` of ``n`` against a fair coin, as twice the smaller tail: the p whose test
    Clopper-Pearson's interval inverts, so the interval leaves out 1/2 exactly when p < 1 - level."""
    if n == 0:
        return 1.0
    binomial = _stats().binom
    return float(min(1.0, 2 * min(binomial.cdf(k, n, 0.5), binomial.sf(k - 1, n, 0.5))))


def _mcnemar(a: np.ndarray, b: np.ndarray, level: float) -> tuple[float, tuple[float, float]]:
    """McNemar's exact two-sided p (the documents only one side got right, split by a fair coin) and the
    difference's interval from the same test: Clopper-Pearson's for the share of those documents ``a``
    got right, as a difference of accuracies, ``(2 share - 1) x discordant / documents``."""
    only_a, only_b = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    discordant = only_a + only_b
    if not discordant:
        return 1.0, (0.0, 0.0)
    share = _stats().binomtest(only_a, discordant).proportion_ci(level, method="exact")
    scale = discordant / len(a)
    return _central_p(only_a, discordant), (scale * (2 * share.low - 1), scale * (2 * share.high - 1))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (family-wise error over one column's comparisons)."""
    order = np.argsort(p_values, kind="stable")
    adjusted = np.empty(len(p_values))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()
