"""Plain summaries of stored run data for the screens: no widgets, no model, just numbers.

A stored layer is an ``acetui_core.records.LayerRecord``.
"""

from __future__ import annotations

from statistics import median

from acetui_core.records import LayerRecord, Spread

# The theme colour of each run status (a theme variable, so every theme, ANSI too, has it).
STATUS_COLOR = {"finished": "success", "failed": "error", "interrupted": "error", "cancelled": "warning",
                "running": "accent", "queued": "secondary"}


def layer_variance(layer: LayerRecord) -> Spread | None:
    """``Var[x^2]`` of the layer's inputs: the median over linears of the per-column median, and the
    largest column; None when the method gathered no activations (magnitude)."""
    spreads = [linear.act_stats.x2_var for linear in layer.linears if linear.act_stats]
    if not spreads:
        return None
    return Spread(min=min(s.min for s in spreads), median=median(s.median for s in spreads),
                  max=max(s.max for s in spreads))


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def eta_seconds(layers: list[LayerRecord], total: int) -> float | None:
    """Time left for the layer loop at the mean pace so far (deterministic: from recorded seconds)."""
    if not layers or not total:
        return None
    mean = sum(layer.seconds for layer in layers) / len(layers)
    return mean * max(total - len(layers), 0)
