"""plotext plots: one linear's score histogram, per-layer values along depth, and the Pareto view of a
comparison (quality against cost, with intervals: ``acetui figure pareto``'s series).

Each plot keeps its data and redraws from it in ``replot`` (as textual-plotext's weather example
does), so new layers only append data. Series use the 16 named ANSI colours, which every theme and
a 256-colour terminal render; under an ANSI theme the plot background is the terminal's own. Each
series also has its own glyph, named in a legend under the plot (never over the data), so plots read
under ``NO_COLOR`` too; titles are cut to the plot's width (plotext drops a title that does not fit).
"""

from __future__ import annotations

import math

from textual_plotext import PlotextPlot

from acetui.app import summary
from acetui_core.analysis.figures import Series
from acetui_core.basics.choices import SparsityGroup
from acetui_core.run.records import Histogram, LayerRecord, MaskChoice, linear_kind
from acetui_core.scores.sparsity import parse_sparsity


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (count - 1)
    return [lo + i * step for i in range(count)]


AXIS_WIDTH = 5  # plotext drops a title or label longer than the width less about this many columns

PRUNED_MARKER = "░"  # pruned bins are shaded, kept ones solid: the split reads without colour


class Plot(PlotextPlot):
    """A plot that follows the app theme: the terminal's colours under an ANSI theme."""

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda theme: self._follow_theme())
        self._follow_theme()
        self.replot()

    def _follow_theme(self) -> None:
        self.theme = "clear" if self.app.current_theme.ansi else "auto"

    def replot(self) -> None:
        self.plt.clear_figure()
        self.draw()
        self.refresh()

    def on_resize(self) -> None:
        self.replot()  # the title and legend are fitted to the width

    def fit(self, text: str, *, keep: int = 0) -> str:
        """``text`` cut to what plotext shows of a title or an axis label at this width; with ``keep``, its
        first ``keep`` characters and its end stay and the middle is cut (a figure at the end is the point)."""
        room = max(self.size.width - AXIS_WIDTH, 8)
        if len(text) <= room:
            return text
        if keep and room > keep + 8:
            return text[:keep] + "…" + text[len(text) - (room - keep - 1) :]
        return text[: room - 1] + "…"

    def draw(self) -> None:
        raise NotImplementedError

    def legend(self, axis: str, entries: list[tuple[str, str]]) -> str:
        """The x axis label: ``axis``, then each series' glyph and name when there are several, as spaced as
        the width allows."""
        if len(entries) < 2:
            return axis
        wide = f"{axis} │ " + "  ".join(f"{marker}{label}" for marker, label in entries)
        return wide if len(self.fit(wide)) == len(wide) else " ".join(f"{marker}{label}" for marker, label in entries)


class ScoreHistogram(Plot):
    """The binned scores of one linear: pruned (red, shaded ░) over kept (blue, solid █) in each bin, and
    the threshold as a vertical line where there is one."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title = "no layer pruned yet"
        self._keep = 0
        self._histogram: Histogram | None = None

    def show(self, title: str, histogram: Histogram | None, keep: int = 0) -> None:
        """``keep``: the title's first characters that stay when it is cut in the middle (the layer), the
        end staying too (the threshold)."""
        self._title, self._keep = title, keep
        self._histogram = histogram
        self.replot()

    def draw(self) -> None:
        plt = self.plt
        plt.title(self.fit(self._title, keep=self._keep))
        histogram = self._histogram
        if not histogram or not histogram.counts:
            return
        edges, log, stride = histogram.edges, histogram.log, histogram.stride
        # Log-spaced bins are drawn on a log10 axis, labelled with the scores themselves.
        axis = (lambda v: math.log10(max(v, 1e-30))) if log else (lambda v: v)
        centres = [(axis(a) + axis(b)) / 2 for a, b in zip(edges, edges[1:], strict=False)]
        # A large linear's counts are of every stride-th score: scaled by the stride, they count its weights,
        # and two linears read on one scale (the caption says so).
        counts = [count * stride for count in histogram.counts]
        pruned = [count * stride for count in pruned_per_bin(histogram, centres, axis)]
        # Whole bins in red, then their kept part in blue over them: the red left showing was pruned.
        # Empty bars are left out: plotext draws a bar of height 0 as one row, which would hide the red.
        # No plotext legend: it is drawn over the bars; the caption says what each shade means.
        if any(pruned):
            plt.bar(*_nonzero(centres, counts), width=1, color="red", marker=PRUNED_MARKER)
        kept = _nonzero(centres, [c - p for c, p in zip(counts, pruned, strict=False)])
        if kept[0]:
            plt.bar(*kept, width=1, color="blue")
        ticks = _ticks(axis(edges[0]), axis(edges[-1]))
        plt.xticks(ticks, [f"{(10**t if log else t):.2g}" for t in ticks])
        heights = _ticks(0, max(counts))
        plt.yticks(heights, [count_label(h) for h in heights])
        plt.xlabel("score (log)" if log else "score")
        if histogram.threshold is not None:
            plt.vline(axis(histogram.threshold), "red")


def count_label(count: float) -> str:
    """A bin count in at most five characters (``950``, ``12k``, ``4.5M``): a 7B model's linears have
    millions of weights per bin, and plotext's own labels (``4718592.0``) would eat the plot."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:.2g}{unit}" if count < 10 * size else f"{count / size:.0f}{unit}"
    return f"{count:.0f}"


def _nonzero(xs: list[float], ys: list[int]) -> tuple[list[float], list[int]]:
    points = [(x, y) for x, y in zip(xs, ys, strict=False) if y > 0]
    return [x for x, _ in points], [y for _, y in points]


def pruned_per_bin(histogram: Histogram, centres: list[float], axis) -> list[int]:
    """The pruned scores of each bin as recorded; runs recorded before the split was kept have only the
    threshold, so every bin below it counts as pruned."""
    if histogram.pruned is not None:
        return histogram.pruned
    threshold = histogram.threshold
    return [
        count if threshold is not None and centre < axis(threshold) else 0
        for count, centre in zip(histogram.counts, centres, strict=False)
    ]


SHADES = f"{PRUNED_MARKER} pruned, █ kept"  # by glyph alone: the colours are gone under NO_COLOR


def histogram_caption(sparsity: str, group: str, histogram: Histogram | None) -> str:
    """What the histogram's colours and line mean for this run's kind of sparsity, and, for a large linear,
    that its counts are a sample's, scaled."""
    if histogram is None:
        return ""
    if summary.is_nm(sparsity):
        spec = parse_sparsity(sparsity)
        text = f"{spec} keeps the top {spec.n} of every {spec.m}: no single threshold. {SHADES}."
    elif group == SparsityGroup.ROW:
        text = f"{SHADES}; line: the rows' median cut-off."
    else:
        text = f"{SHADES}; line: the layer's threshold."
    stride = histogram.stride
    return text if stride == 1 else f"{text} Counts from every {_ordinal(stride)} score, ×{stride}."


def _ordinal(number: int) -> str:
    """``5th``, ``2nd``, ``13th``, ``21st``."""
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def choice_caption(choice: MaskChoice | None) -> str:
    """How a linear's mask was chosen: the share of the score it keeps (with and without --permute) and
    what DSnoT did (--refine dsnot); empty for runs that recorded none."""
    if choice is None:
        return ""
    text = f"Keeps {choice.retained:.2%} of the score"
    if choice.retained_unpermuted is not None:
        text += f" ({choice.retained_unpermuted:.2%} without --permute)"
    if choice.refinement is not None:
        done = choice.refinement
        text += f"; DSnoT: {done.swaps} swaps, expected-output error {done.error_before:.3g} -> {done.error_after:.3g}"
    return text + "."


SERIES_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "red", "gray", "orange")
SERIES_MARKERS = ("•", "x", "+", "=", "*", "#", "%", "@")  # one glyph per series, as many as colours


class DepthPlot(Plot):
    """One or more per-layer series along depth; the x axis spans the whole model from the start,
    so the lines grow to the right as layers finish. ``log``: the values are drawn on a log10 axis spanning
    them, labelled compactly (``0.17``, ``1e-4``) at its ends and whole decades, so long numbers never eat the
    plot."""

    def __init__(self, title: str, *, log: bool = False, ylim: tuple[float, float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title = title
        self._log = log
        self._ylim = ylim
        self._total = 0
        self._series: dict[str, list[tuple[int, float]]] = {}

    def show(self, total: int, series: dict[str, list[tuple[int, float]]], title: str | None = None) -> None:
        self._total = total
        self._series = series
        if title is not None:
            self._title = title
        self.replot()

    def draw(self) -> None:
        plt = self.plt
        plt.title(self.fit(self._title))
        if self._total:
            last = self._total - 1
            plt.xlim(0, max(last, 1))
            plt.xticks([*range(0, last, max(1, math.ceil(last / 5))), last])
        if self._ylim:
            plt.ylim(*self._ylim)
        series = {
            label: [(x, math.log10(y) if self._log else y) for x, y in points if not self._log or y > 0]
            for label, points in self._series.items()
        }
        several = len(series) > 1
        styles = list(zip(series.items(), SERIES_COLORS, SERIES_MARKERS, strict=False))
        for (_, points), color, marker in styles:
            if points:
                xs, ys = zip(*points, strict=False)
                plt.plot(xs, ys, marker=marker if several else "braille", color=color)
        plt.xlabel(self.fit(self.legend("layer", [(marker, label) for (label, _), _, marker in styles])))
        values = [y for points in series.values() for _, y in points]
        if self._log and values:
            low, high = min(values), max(values)
            if high > low:  # plotext places no tick outside the range it draws: the range is the data's
                plt.ylim(low, high)
            ticks = log_ticks(low, high)
            plt.yticks(ticks, log_labels(ticks))


def log_ticks(low: float, high: float, decades: int = 4) -> list[float]:
    """Where a log10 axis from ``low`` to ``high`` (exponents) is labelled: at both ends, so values a span of
    less than a decade (0.17 to 0.28) can still be read, and at up to ``decades`` whole decades between them,
    none so near an end that its label would crowd the end's (or, with none between them, halfway up)."""
    if high <= low:
        return [low]
    margin = (high - low) / 8
    inner = range(math.ceil(low + margin), math.floor(high - margin) + 1)
    step = max(1, math.ceil(len(inner) / decades))
    # No decade inside: the value halfway up, a third mark to read the lines by.
    return [low, *([float(d) for d in inner[::step]] or [(low + high) / 2]), high]


def log_labels(ticks: list[float]) -> list[str]:
    """The values at log10 ``ticks`` in a few characters (``0.17``, ``6.9``, ``1e-4``, ``2.6e-7``), with as
    many digits as it takes for the two ends to read apart (0.171 and 0.174)."""

    def label(exponent: float, digits: int) -> str:
        value = 10**exponent
        plain = f"{value:.{digits}g}"
        mantissa, _, power = f"{value:.{digits - 1}e}".partition("e")
        scientific = f"{mantissa.rstrip('0').rstrip('.')}e{int(power)}"  # 1e-4, not 1.0e-04
        return plain if "e" not in plain and len(plain) <= len(scientific) else scientific

    digits = next((d for d in (2, 3, 4) if label(ticks[0], d) != label(ticks[-1], d)), 4)
    return [label(t, digits) for t in ticks]


def sparsity_series(layers: list[LayerRecord]) -> dict[str, list[tuple[int, float]]]:
    """The sparsity each kind of linear reached, layer by layer (q, k, v, o, gate, up, down); a layer's
    experts and shared experts as one line each, weighted by size."""
    series: dict[str, list[tuple[int, float]]] = {}
    for layer in layers:
        pooled: dict[str, tuple[float, int]] = {}
        for linear in layer.linears:
            if linear.kind in ("experts", "shared_experts"):
                zeros, size = pooled.get(linear.kind, (0.0, 0))
                pooled[linear.kind] = (zeros + linear.sparsity * linear.size, size + linear.size)
            else:
                series.setdefault(linear_kind(linear.name), []).append((layer.index, linear.sparsity))
        for kind, (zeros, size) in pooled.items():
            series.setdefault(kind.replace("_", " "), []).append((layer.index, zeros / size))
    return series


def _sparsities_as_shown(series: dict[str, list[tuple[int, float]]]) -> set[float]:
    """The distinct sparsities at the 3 decimals shown: a 2:4 linear whose weights held a few zeros before
    pruning is at 0.5001, one with the others on the plot and in the sentence that says so."""
    return {round(y, 3) for points in series.values() for _, y in points}


def sparsity_title(series: dict[str, list[tuple[int, float]]]) -> str:
    values = _sparsities_as_shown(series)
    if len(values) == 1:
        return f"sparsity: every linear {values.pop():.3f}"
    return "sparsity by layer and linear"


def uniform_note(series: dict[str, list[tuple[int, float]]]) -> str:
    """Why a sparsity plot of several linears shows one line: every linear of every layer has one value."""
    values = _sparsities_as_shown(series)
    if len(values) != 1 or len(series) < 2:
        return ""
    return f"Every linear of every layer is at {values.pop():.3f}: the {len(series)} lines lie on one another."


def variance_series(layers: list[LayerRecord]) -> dict[str, list[tuple[int, float]]]:
    stats = [(layer.index, summary.layer_variance(layer)) for layer in layers]
    return {
        "median": [(i, v.median) for i, v in stats if v],
        "max": [(i, v.max) for i, v in stats if v],
    }


def fidelity_series(layers: list[LayerRecord]) -> dict[str, list[tuple[int, float]]]:
    """The relative L2 error of each layer's output ("out") and of each kind of linear, layer by layer
    (empty for runs without --fidelity)."""
    series: dict[str, list[tuple[int, float]]] = {"out": []}
    for layer in layers:
        if layer.fidelity is not None:
            series["out"].append((layer.index, layer.fidelity.rel_error))
        for linear in layer.linears:
            if linear.fidelity is not None:
                series.setdefault(linear_kind(linear.name), []).append((layer.index, linear.fidelity.rel_error))
    return series if series["out"] else {}


def fidelity_title(series: dict[str, list[tuple[int, float]]]) -> str:
    if not series:
        return "no fidelity: run with --fidelity"
    # the legend under the axis names the series (out, q_proj, ...); at 80 columns the tab has 35 for this
    return "||Y-Y'||/||Y|| by layer (log)"


class ParetoPlot(Plot):
    """Quality against cost, one series per method (``acetui_core.analysis.figures.figure_series``, the figure file's
    own): each point on a log10 cost axis labelled with the costs themselves, its interval a vertical bar;
    glyphs named in the caption over it. Points at no cost (tokens of a method without calibration data) have no
    place on a log axis and are left out (pgfplots discards them from the figure file too)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: list[Series] = []
        self._xlabel = ""
        self._title = ""

    def show(self, lines: list[Series], xlabel: str, title: str) -> None:
        self._lines, self._xlabel, self._title = lines, xlabel, title
        self.replot()

    def draw(self) -> None:
        plt = self.plt
        plt.title(self.fit(self._title))
        styles = list(zip(self._lines, SERIES_COLORS, SERIES_MARKERS, strict=False))
        drawn = [([(math.log10(x), y, lo, hi) for x, y, lo, hi in line.points if x > 0], c, m) for line, c, m in styles]
        # Bars first, then lines, then the points' glyphs: no method's bar hides another's point.
        for points, color, _ in drawn:
            for x, _, low, high in points:
                plt.plot([x, x], [low, high], marker="│", color=color)
        for points, color, _ in drawn:
            plt.plot([p[0] for p in points], [p[1] for p in points], marker="braille", color=color)
        for points, color, marker in drawn:  # each point its glyph: the methods read apart under NO_COLOR
            plt.scatter([p[0] for p in points], [p[1] for p in points], marker=marker, color=color)
        costs = sorted({x for line, _, _ in styles for x, *_ in line.points if x > 0})
        if costs:
            plt.xticks([math.log10(x) for x in costs], [count_label(x) if x >= 1 else f"{x:.2g}" for x in costs])
        # The axis alone: the caption names each series by its glyph (at 80 columns their names left no room
        # for the axis's, and nothing said what x was).
        plt.xlabel(self.fit(f"{self._xlabel}, log"))
