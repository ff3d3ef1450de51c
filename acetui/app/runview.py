"""What the Run screen shows of a run as text: where it is now, a row per pruned layer, the strip of the
comparison it belongs to, and a mixture-of-experts run's token load per expert. Pure functions of the run's
record, so the screen only places them."""

from __future__ import annotations

from rich.text import Text
from textual.markup import escape

from acetui.app import summary
from acetui_core.basics.choices import RunStatus
from acetui_core.run.records import LayerRecord
from acetui_core.storage.store_rows import RunRecord

STATUS_MARK = {
    RunStatus.FINISHED: "✓",
    RunStatus.RUNNING: "▶",
    RunStatus.QUEUED: "·",
    RunStatus.FAILED: "✗",
    RunStatus.INTERRUPTED: "✗",
    RunStatus.CANCELLED: "■",
}


def describe_stage(run: RunRecord) -> str:
    """Where the run is now, in a few words."""
    if run.status == RunStatus.FINISHED:
        text = "finished"
        if run.ppl is not None:
            text += f" · ppl {summary.ppl_text(run)}"
            if run.ppl_partial and run.results and run.results.ppl_windows:
                windows = run.results.ppl_windows
                text += f" ({windows} window{'' if windows == 1 else 's'})"
        return text + f" · prune {summary.fmt_seconds(run.prune_seconds)}"
    if not run.active:
        return run.status
    if run.current_layer is not None and run.num_layers:
        return f"layer {run.current_layer} · {run.layers_done}/{run.num_layers} done"  # numbered from 0
    if run.stage:
        total = run.stage.total
        return f"{run.stage.name} {run.stage.done}/{total if total is not None else '?'}"
    return "waiting to start" if run.status == RunStatus.QUEUED else "starting"


def layer_row(layer: LayerRecord) -> tuple[str, ...]:
    """Index, linears, seconds, sparsity and the median Var[x²] of the layer's inputs (the Var[x²]
    plot adds the largest column's)."""
    variance = summary.layer_variance(layer)
    return (
        str(layer.index),
        str(len(layer.linears)),
        summary.fmt_seconds(layer.seconds),
        "–" if layer.sparsity is None else f"{layer.sparsity:.3f}",
        "–" if variance is None else f"{variance.median:.3g}",
    )


SEPARATOR = "  │  "


def batch_line(batch: tuple[str, ...], runs: list[RunRecord], shown: str | None, room: int = 10_000) -> str:
    """Every run of a comparison with its status mark and, once finished, its perplexity (markup), in at
    most ``room`` characters: a long comparison shows the runs around the one ``shown``, with how many
    are left out on each side (cut at the line's end, the shown run was the one lost at 80 columns). Each
    run names its seed where the comparison has several (its seeds of one method and sparsity read alike)."""
    by_id = {run.id: run for run in runs}
    members = [by_id[run_id] for run_id in batch if run_id in by_id]
    seeded = len({run.config.seed for run in members}) > 1
    parts: list[tuple[str, bool]] = []  # each run's text, and whether it is the one shown
    for place, run_id in enumerate(batch, 1):
        run = by_id.get(run_id)
        if run is None:
            continue
        seed = f" seed {run.config.seed}" if seeded else ""
        result = (
            summary.ppl_text(run)
            if run.status == RunStatus.FINISHED
            else (
                f"{run.layers_done}/{run.num_layers}"
                if run.status == RunStatus.RUNNING and run.num_layers
                else run.status
            )
        )
        parts.append(
            (f"{place} {STATUS_MARK[run.status]} {run.label} {run.config.target}{seed} {result}", run_id == shown)
        )
    first, last = _window([text for text, _ in parts], next((i for i, (_, on) in enumerate(parts) if on), 0), room)
    shown_parts = [f"[b]{escape(text)}[/b]" if on else escape(text) for text, on in parts[first:last]]
    if first:
        shown_parts.insert(0, f"… {first} before")
    if last < len(parts):
        shown_parts.append(f"{len(parts) - last} after …")
    return SEPARATOR.join(shown_parts)


def _window(texts: list[str], centre: int, room: int) -> tuple[int, int]:
    """The widest run of ``texts`` around ``centre`` that fits ``room`` with its "… N before/after" marks."""

    def width(first: int, last: int) -> int:
        marks = (first > 0) + (last < len(texts))
        return sum(len(t) for t in texts[first:last]) + len(SEPARATOR) * (last - first - 1 + marks) + 12 * marks

    first, last = centre, min(centre + 1, len(texts))
    grew = True
    while grew:
        grew = False
        for wider in ((first, last + 1), (first - 1, last)):
            if wider[0] >= 0 and wider[1] <= len(texts) and width(*wider) <= room:
                first, last = wider
                grew = True
    return first, last


def token_load(run: RunRecord, layers: list[LayerRecord]) -> Text:
    """The calibration tokens each expert of each MoE layer received (of the pruned ``layers`` while the run
    goes on), as a grid with one column per expert; a starved expert is marked ``*`` (and coloured), with
    the sentences of its fallback under the grid."""
    experts = summary.run_experts(run, layers)
    if experts is None:
        if run.active:
            return Text("No token load yet: it shows as the layers of a mixture-of-experts model are pruned.")
        return Text("No token load: the model has no experts, or the method reads no calibration data.")
    rows = summary.expert_load(experts)
    width = max((len(count) for _, counts in rows for count in counts), default=1) + 1
    label = max((len(where) for where, _ in rows), default=0)
    if run.config.removes_experts_alone:  # no statistics, so no expert is starved of them
        heading = f"calibration tokens per expert; {summary.expert_tokens_use(run.config, experts)}"
    else:
        heading = f"calibration tokens per expert ({experts.calibration}); * starved: statistics from all tokens"
    text = Text(heading + "\n\n")
    experts_shown = max((len(counts) for _, counts in rows), default=0)
    text.append(" " * label + "".join(f"{e:>{width}}" for e in range(experts_shown)) + "\n", style="bold")
    for where, counts in rows:
        text.append(where.ljust(label))
        for count in counts:
            text.append(f"{count:>{width}}", style="bold red" if count.endswith("*") else "")
        text.append("\n")
    for fallback in experts.fallbacks:
        text.append(f"\n* {fallback.sentence()}")
    removal = summary.expert_removal(experts)
    if removal:
        text.append("\n\nexpert scores (--expert-sparsity); x removed\n", style="bold")
        label = max(len(where) for where, _ in removal)
        width = max(len(score) for _, scores in removal for score in scores) + 1
        for where, scores in removal:
            text.append(where.ljust(label))
            for score in scores:
                text.append(f"{score:>{width}}", style="bold red" if score.endswith("x") else "")
            text.append("\n")
        # Which ones, in words: a grid of many experts wraps in a narrow pane (39 columns at 80), where an
        # expert's column can no longer be told by eye.
        for r in experts.removal:
            text.append(f"\nlayer {r.layer} {r.experts}: removed {', '.join(map(str, r.removed))}")
    return text
