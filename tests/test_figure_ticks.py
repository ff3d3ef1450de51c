"""The x ticks of a figure drawn as an image (``acetui figure pareto -o p.png``): a few plain numbers that
cannot overlap, whatever the span of the data (matplotlib's log axis labels every minor tick of a narrow
span, ``9.6×10¹9.8×10¹ 10²`` run together); the coordinates of a pgfplots figure, to the table's digits."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from acetui_core.analysis.figures import MOST_TICKS, Series, log_ticks, to_pgfplots, write_figure

SPANS = {  # the data's lowest and highest x
    "prune seconds, within a decade": (96.3, 110.2),
    "prune seconds, a few percent apart": (31.0, 31.9),
    "calibration tokens, 128 to 4096": (128, 4096),
    "calibration tokens, 2048 to 262144": (2048, 262144),
    "seconds across five decades": (0.05, 4200),
    "one point": (58.7, 58.7),
}


@pytest.mark.parametrize("span", SPANS.values(), ids=SPANS)
def test_a_log_axis_gets_a_few_plain_ticks_spread_over_the_data(span):
    low, high = span
    ticks = log_ticks(low, high)
    positions = [x for x, _ in ticks]
    labels = [label for _, label in ticks]
    assert 1 <= len(ticks) <= MOST_TICKS
    assert len(ticks) >= 2 or low == high
    assert positions == sorted(set(positions)) and len(set(labels)) == len(labels)
    assert all(low <= x <= high for x in positions) or low == high
    assert all("×" not in label and len(label) <= 7 for label in labels)  # plain numbers, short
    assert all(float(label) == pytest.approx(x, rel=1e-3) for x, label in ticks)
    if len(ticks) >= 2:  # evenly enough spread on the log axis that no two labels crowd each other
        gaps = [math.log10(b / a) for a, b in itertools.pairwise(positions)]
        assert min(gaps) >= math.log10(high / low) / (2 * MOST_TICKS)


def test_an_image_labels_only_the_chosen_ticks(tmp_path, monkeypatch):
    """The image's x axis carries exactly those labels, and none on its minor ticks."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    drawn = {}
    monkeypatch.setattr(plt, "close", lambda figure: drawn.setdefault("figure", figure))
    lines = [Series("Wanda", [(96.3, 87.6, 74.2, 103.4), (110.2, 84.6, 71.8, 99.7)])]
    write_figure(lines, "prune time (s)", "perplexity", tmp_path / "p.png")
    axes = drawn["figure"].axes[0]
    shown = [t.get_text() for t in axes.get_xticklabels() if t.get_text()]
    assert shown == [label for _, label in log_ticks(96.3, 110.2)]
    assert not [t.get_text() for t in axes.get_xticklabels(minor=True) if t.get_text()]


def test_a_pgfplots_point_is_drawn_at_the_tables_figure_and_its_bars_end_on_the_seeds():
    """A perplexity of 50961.01 was drawn at 5.096e+04 (four significant digits), its bars ending on neither
    seed, and a million calibration tokens at 1.04858e+06."""
    seeds = (50900.5, 51020.25)
    value = 50961.0123
    text = to_pgfplots([Series("Wanda-16", [(1_048_576, value, *seeds)])], "tokens", "perplexity")
    [point] = [line for line in text.splitlines() if line.startswith("  (")]
    assert point == "  (1048576, 50961.0123) += (0, 59.2377) -= (0, 60.5123)"
    x, y, up, down = map(float, re.fullmatch(r"  \((.+), (.+)\) \+= \(0, (.+)\) -= \(0, (.+)\)", point).groups())
    assert (x, f"{y:.2f}") == (1_048_576, f"{value:.2f}")  # the table's 50961.01
    assert (y - down, y + up) == pytest.approx(seeds, abs=1e-6)
