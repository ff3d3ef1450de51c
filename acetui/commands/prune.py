"""``acetui prune``: one method at one sparsity on one model, through the launcher."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from acetui import options
from acetui_core.basics.choices import RunStatus, SparsityScope
from acetui_core.basics.errors import UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.paths import default_model, mixture, user_path
from acetui_core.modeling.data import mixture_counts
from acetui_core.run.config import RunConfig
from acetui_core.run.records import RunResult, to_dict, zeroshot_text
from acetui_core.storage.store_rows import RunRecord


def zeroshot_row(result: RunResult):
    return ("zero-shot acc", zeroshot_text(result.zeroshot)) if result.zeroshot else None


def _by_kind(result: RunResult) -> str:
    """Per kind of projection, when the model has more kinds than attention and MLP (experts)."""
    kinds = result.kinds or {}
    if set(kinds) <= {"attention", "mlp"}:
        return ""
    return " (" + ", ".join(f"{kind.replace('_', ' ')} {value:.4f}" for kind, value in kinds.items()) + ")"


def _sources(calib, typed: str) -> str:
    """Where the windows came from; of a mixture, how many from each source (``c4@3+dom.jsonl@1``: 3 to 1)."""
    parts = mixture(typed)
    places = calib.source.split(" + ")
    if len(parts) == 1 or len(places) != len(parts):  # one source, or recorded otherwise
        return calib.source
    counts = mixture_counts([share for _, share in parts], calib.nsamples)
    return " + ".join(f"{place} ({count} windows)" for place, count in zip(places, counts, strict=True))


def experts_removed_row(result: RunResult):
    removed = result.experts_removed
    if removed is None:
        return None
    kept = ", ".join(map(str, removed.kept))
    return (
        "experts removed",
        f"{removed.fraction * 100:g}% of the routed experts ({removed.score}); kept per MoE layer: {kept}; "
        f"{removed.parameters_removed:,} parameters removed with them",  # the mask's zeros are not theirs
    )


def summary_table(run: RunRecord, result: RunResult) -> Table:
    """A two-column summary that stays readable in an 80-column SSH terminal."""
    table = Table(title=run.title, show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    calib, ppl = result.calibration, result.ppl_wikitext2
    ppl_text = "not evaluated" if ppl is None else f"{ppl:.2f}"
    if result.ppl_partial:
        ppl_text += f" (partial: first {result.ppl_windows} windows of {result.ppl_seqlen} tokens)"
    elif ppl is not None and result.ppl_seqlen:  # the window length moves perplexity: said even when it is the default
        ppl_text += f" (all {result.ppl_windows} windows of {result.ppl_seqlen} tokens)"
    rows = [
        ("run", f"{result.run_id} (acetui runs show {result.run_id})") if result.run_id else None,
        ("model", result.model),
        (
            "method",
            f"{result.method} (unused: --sparsity 0 masks nothing)"
            if run.config.removes_experts_alone
            else f"{result.method} ({result.group} groups)",
        ),
        (
            "sparsity",
            # the mask's share of what it covered: with --sparsity-scope experts, the experts alone
            f"{result.overall_sparsity:.4f} of the routed experts' linears (the other linears dense)"
            if run.config.sparsity_scope == SparsityScope.EXPERTS
            else f"{result.overall_sparsity:.4f} of the decoder linears{_by_kind(result)}",
        ),
        experts_removed_row(result),
        (
            "calibration",
            f"{calib.nsamples} x {calib.seqlen} tokens, seed {calib.seed}, {_sources(calib, run.config.calib)}"
            if calib
            else f"none ({result.method} uses no calibration data)",
        ),
        ("prune time", f"{result.prune_seconds:.1f} s on {result.device} ({result.dtype})"),
        ("WikiText-2 ppl", ppl_text),
        zeroshot_row(result),
        (
            "peak memory",
            f"{result.peak_rss_mb:.0f} MiB RSS"
            + (f", {result.peak_gpu_mb:.0f} MiB GPU" if result.peak_gpu_mb is not None else ""),
        ),
        ("saved to", result.saved_to) if result.saved_to else None,
    ]
    for key, value in filter(None, rows):
        table.add_row(key, str(value))
    return table


@options.with_settings()
@options.with_executor
def prune(
    model: options.Model = None,
    *,
    as_json: options.JsonOption = False,
    detach: bool = False,
    cluster=None,
    store: options.StoreOption = None,
    **settings,
) -> None:
    """Prune MODEL with one method and sparsity; evaluate and optionally save it."""
    from acetui.progress import EventProgress
    from acetui_core.execution.launch import InProcess, LocalProcesses, checked_store, launch, queue

    config = RunConfig(model=default_model() if model is None else model, **settings)  # "" is no model
    save = config.save
    [config], opened = checked_store([config], store, local_device=cluster is None)  # before a progress bar
    if cluster is not None or detach:
        print(launch([config], cluster or LocalProcesses(detach=True, gpus=0), opened, checked=True)[0])
        return
    [run_id] = queue([config], opened, InProcess(), checked=True)
    with EventProgress() as progress:
        in_process = InProcess(on_event=lambda run_id, event: progress(event))
        in_process.start(opened, [run_id])  # Ctrl-C: Cancelled, recorded; acetui.cli says so
    run = opened.get_run(run_id, layers=False)
    result = run.results
    if run.status != RunStatus.FINISHED or result is None:
        raise UserError(run.error or f"Run {run_id} {run.status}.")
    saved_to = run.results.saved_to if run.results else None
    if save is not None and saved_to and Path(saved_to) != user_path(save).resolve():
        print(
            f"acetui: --save {save} was filled by another run meanwhile; this run's model is in {saved_to}.",
            file=sys.stderr,
        )
    if as_json:
        print(json_text(to_dict(result)))
    else:
        Console().print(summary_table(run, result))
