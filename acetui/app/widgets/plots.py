"""plotext plots of a run: one linear's score histogram, and per-layer values along depth.

Each plot keeps its data and redraws from it in ``replot`` (as textual-plotext's weather example
does), so new layers only append data. Series use the 16 named ANSI colours, which every theme and
a 256-colour terminal render; under an ANSI theme the plot background is the terminal's own.
"""

from __future__ import annotations

import math

from textual_plotext import PlotextPlot

from acetui.app import summary
from acetui_core.records import Histogram, LayerRecord


def _ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (count - 1)
    return [lo + i * step for i in range(count)]


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

    def draw(self) -> None:
        raise NotImplementedError


class ScoreHistogram(Plot):
    """The binned scores of one linear, with the pruning threshold as a vertical line."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title = "no layer pruned yet"
        self._histogram: Histogram | None = None

    def show(self, title: str, histogram: Histogram | None) -> None:
        self._title = title
        self._histogram = histogram
        self.replot()

    def draw(self) -> None:
        plt = self.plt
        plt.title(self._title)
        histogram = self._histogram
        if not histogram or not histogram.counts:
            return
        edges, counts, log = histogram.edges, histogram.counts, histogram.log
        # Log-spaced bins are drawn on a log10 axis, labelled with the scores themselves.
        axis = (lambda v: math.log10(max(v, 1e-30))) if log else (lambda v: v)
        centres = [(axis(a) + axis(b)) / 2 for a, b in zip(edges, edges[1:])]
        threshold = histogram.threshold
        # Bins below the threshold were pruned: drawn red, the kept ones blue, the threshold a line.
        pruned = [count if threshold is not None and centre < axis(threshold) else 0
                  for count, centre in zip(counts, centres)]
        plt.bar(centres, [c - p for c, p in zip(counts, pruned)], width=1, color="blue")
        if any(pruned):
            plt.bar(centres, pruned, width=1, color="red")
        ticks = _ticks(axis(edges[0]), axis(edges[-1]))
        plt.xticks(ticks, [f"{(10 ** t if log else t):.2g}" for t in ticks])
        plt.xlabel("score (log)" if log else "score")
        if threshold is not None:
            plt.vline(axis(threshold), "red")


class DepthPlot(Plot):
    """One or more per-layer series along depth; the x axis spans the whole model from the start,
    so the lines grow to the right as layers finish."""

    def __init__(self, title: str, *, log: bool = False, ylim: tuple[float, float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self._title = title
        self._log = log
        self._ylim = ylim
        self._total = 0
        self._series: dict[str, list[tuple[int, float]]] = {}

    def show(self, total: int, series: dict[str, list[tuple[int, float]]]) -> None:
        self._total = total
        self._series = series
        self.replot()

    def draw(self) -> None:
        plt = self.plt
        plt.title(self._title)
        plt.xlabel("layer")
        if self._total:
            last = self._total - 1
            plt.xlim(0, max(last, 1))
            plt.xticks([*range(0, last, max(1, math.ceil(last / 5))), last])
        if self._ylim:
            plt.ylim(*self._ylim)
        if self._log:
            plt.yscale("log")
        for (label, points), color in zip(self._series.items(), ("cyan", "magenta", "green")):
            points = [(x, y) for x, y in points if not self._log or y > 0]
            if points:
                xs, ys = zip(*points)
                plt.plot(xs, ys, marker="braille", color=color, label=label if len(self._series) > 1 else None)


def sparsity_series(layers: list[LayerRecord]) -> dict[str, list[tuple[int, float]]]:
    return {"sparsity": [(layer.index, layer.sparsity) for layer in layers if layer.sparsity is not None]}


def variance_series(layers: list[LayerRecord]) -> dict[str, list[tuple[int, float]]]:
    stats = [(layer.index, summary.layer_variance(layer)) for layer in layers]
    return {
        "median": [(i, v.median) for i, v in stats if v],
        "max": [(i, v.max) for i, v in stats if v],
    }
