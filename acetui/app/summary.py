"""Plain summaries of stored run data for the screens: no widgets, no model, just numbers.

A stored layer is an ``acetui_core.run.records.LayerRecord``.
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from textual.markup import escape

from acetui_core.basics.choices import (
    Allocation,
    EvalKind,
    MoeCalibration,
    OwlMean,
    Permute,
    Refine,
    RunStatus,
    Update,
    VarpForm,
    VarpScale,
)
from acetui_core.basics.errors import UserError
from acetui_core.basics.resources import ResourceSample
from acetui_core.run.config import RunConfig
from acetui_core.run.experts import Experts
from acetui_core.run.records import LayerRecord, Spread, from_dict
from acetui_core.scores.metrics import METHODS, reads_calibration, unread_settings
from acetui_core.scores.sparsity import parse_sparsity
from acetui_core.storage.store_rows import RunRecord

if TYPE_CHECKING:  # the plan module imports torch; the app's screens need only its figures
    from acetui_core.pruning.plan import Plan

# The theme colour of each run status (a theme variable, so every theme, ANSI too, has it).
STATUS_COLOR = {
    RunStatus.FINISHED: "success",
    RunStatus.FAILED: "error",
    RunStatus.INTERRUPTED: "error",
    RunStatus.CANCELLED: "warning",
    RunStatus.RUNNING: "accent",
    RunStatus.QUEUED: "secondary",
}
STALE_SAMPLE = 10.0  # seconds: an older resource sample says how old it is

clock = time.time  # "now" for elapsed times and sample ages (snapshot tests fix it)


def layer_variance(layer: LayerRecord) -> Spread | None:
    """``Var[x^2]`` of the layer's inputs: the median over linears of the per-column median, and the
    largest column; None when the method gathered no activations (magnitude) or the run predates the
    statistic."""
    spreads = [linear.act_stats.x2_var for linear in layer.linears if linear.act_stats and linear.act_stats.x2_var]
    if not spreads:
        return None
    return Spread(
        min=min(s.min for s in spreads), median=median(s.median for s in spreads), max=max(s.max for s in spreads)
    )


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


def fmt_time(seconds: float | None, form: str = "%Y-%m-%d %H:%M") -> str:
    return "–" if seconds is None else time.strftime(form, time.localtime(seconds))


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "–"
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def fmt_count(number: int) -> str:
    return f"{number / 1e9:.2f} B" if number >= 1e9 else f"{number / 1e6:.1f} M" if number >= 1e5 else f"{number:,}"


def cost_text(plans: list[Plan]) -> str:
    """What the costliest of a form's runs will need (``acetui plan``'s figures), on one line."""
    first = plans[0]
    about = "≥" if any(p.zeroshot_uncounted for p in plans) else "≈"  # zero-shot's batches are not counted
    parts = [
        f"{fmt_count(first.parameters)} parameters",
        f"checkpoint {fmt_mb(first.checkpoint_bytes / 2**20)}",
        f"peak CPU {about} {fmt_mb(max(p.peak_cpu_bytes for p in plans) / 2**20)}",
    ]
    gpu = [p.peak_gpu_bytes for p in plans if p.peak_gpu_bytes is not None]
    if gpu:
        parts.append(
            f"peak GPU {about} {fmt_mb(max(gpu) / 2**20)}"
            + (" (planned for an 80 GB card)" if first.gpu_assumed else "")
        )
    if about == "≥":
        parts.append("zero-shot not counted")
    parts.append("layers streamed from disk" if any(p.streaming for p in plans) else "whole model in memory")
    return "Cost: " + " · ".join(parts)


def ppl_text(run: RunRecord) -> str:
    """The run's perplexity with the partial mark (†: over part of the test set), or – without one."""
    return "–" if run.ppl is None else f"{run.ppl:.2f}" + ("†" if run.ppl_partial else "")


def sparsity_order(run: RunRecord) -> tuple:
    """Where a run sorts by sparsity: unstructured before N:M, then by fraction, then by experts removed (a
    run of ``--sparsity 0 --expert-sparsity F`` has a sparsity of 0, which the strict parser refuses)."""
    spec = run.config.sparsity_spec
    return spec.is_nm, spec.fraction, run.config.expert_sparsity


def run_name(run: RunRecord) -> str:
    """A run in a few characters, for plot legends and captions: method, sparsity and the id's start."""
    return f"{run.label} {run.config.target} {run.id[:4]}"


def elapsed_seconds(run: RunRecord, now: float) -> float | None:
    """Time since the run started: up to now while it runs, up to its end after."""
    if run.started is None:
        return None
    return max(0.0, (run.finished if run.finished is not None and not run.active else now) - run.started)


def resource_line(run: RunRecord, here: str, now: float) -> str:
    """What the run's process used at its last heartbeat, in one line, or why there is nothing to show."""
    if run.resources is None:
        if run.status == RunStatus.QUEUED:
            return "resources: the run has not started"
        if run.host and run.host != here and run.active:
            return f"resources: no sample recorded yet (the run is on {run.host})"
        return "resources: no sample recorded" + (" yet" if run.active else " for this run")
    try:
        sample = from_dict(ResourceSample, run.resources)
    except Exception:  # a sample from a newer acetui, or damaged: say so, never fail the screen
        return "resources: the recorded sample cannot be read"
    parts = [f"RSS {fmt_mb(sample.rss_mb)}", f"CPU {sample.cpu_percent:.0f}%"]
    if sample.gpu is not None:
        gpu = f"{sample.gpu} {fmt_mb(sample.gpu_used_mb)}/{fmt_mb(sample.gpu_total_mb)}"
        if sample.gpu_util_percent is not None:
            gpu += f" {sample.gpu_util_percent:.0f}%"
        parts.append(gpu)
    if not run.active:
        when = "last sample"
    elif now - sample.taken > STALE_SAMPLE:
        when = f"sampled {fmt_seconds(now - sample.taken)} ago"
    else:
        when = None
    on = f" on {run.host}" if run.host and run.host != here else ""
    return "resources" + on + ": " + " · ".join(parts) + (f" ({when})" if when else "")


def batch_of(runs: list[RunRecord], run: RunRecord) -> tuple[str, ...]:
    """The runs queued together with ``run`` (its batch in the store: one comparison), in creation order."""
    if run.batch is None:
        return (run.id,)
    return tuple(r.id for r in sorted(runs, key=lambda r: (r.created, r.id)) if r.batch == run.batch)


def run_to_show(runs: list[RunRecord], current: str | None) -> str | None:
    """The run F2 shows: the one shown already while it is active; else the newest active run; else the
    one shown already; else the newest run (None in an empty store)."""
    by_id = {run.id: run for run in runs}
    if current in by_id and by_id[current].active:
        return current
    newest_first = sorted(runs, key=lambda r: (r.created, r.id), reverse=True)
    active = [run for run in newest_first if run.status == RunStatus.RUNNING] or [
        run for run in newest_first if run.active
    ]
    if active:
        return active[0].id
    if current is not None:
        return current
    return newest_first[0].id if newest_first else None


def is_nm(sparsity: str) -> bool:
    """Whether ``sparsity`` is an N:M pattern (False for what does not parse: a damaged record)."""
    try:
        return parse_sparsity(sparsity).is_nm
    except UserError:
        return False


def _evaluation(config: RunConfig) -> str:
    parts = []
    if EvalKind.WIKITEXT2 in config.evals:
        windows = f"first {config.eval_limit} windows" if config.eval_limit else "every window"
        length = f"{config.eval_seqlen} tokens" if config.eval_seqlen else "the model's context (at most 4096 tokens)"
        parts.append(f"WikiText-2 perplexity, {windows} of {length}")
    if EvalKind.ZEROSHOT in config.evals:
        limit = f", first {config.zeroshot_limit} examples each" if config.zeroshot_limit else ""
        parts.append(f"zero-shot {', '.join(config.tasks)}{limit}")
    return "; ".join(parts) or "none"


def config_rows(run: RunRecord, store_folder: Path) -> list[tuple[str, str]]:
    """The configuration the run was started with, and where and with what it executes."""
    config, env = run.config, run.env
    if run.settings_unknown:  # its stand-in settings (``?``) describe nothing: say so, and where it ran
        return [
            ("run", f"{run.id} · {run.status}"),
            ("settings", f"cannot be read: the run store's record of them is damaged ({run.damaged})"),
            *_where_rows(run, store_folder),
        ]
    method = METHODS.get(config.method)
    # a run recorded before its unread settings were put back to their defaults names only those it read
    # (experts unknown before its results: named as recorded)
    unread = unread_settings(config, experts=run.results is None or run.results.experts is not None)
    name = (
        f"{run.label} ({config.method}"
        + (", |W|² variant" if config.squared_weight and "squared_weight" not in unread else "")
        + (f", a = {config.ria_alpha}" if method is not None and "ria_alpha" in method.reads else "")
        + (
            f", VarP scale {config.varp_scale}"
            if config.varp_scale != VarpScale.NONE and "varp_scale" not in unread
            else ""
        )
        + (f", VarP {config.varp_form}" if config.varp_form != VarpForm.SERIES and "varp_form" not in unread else "")
        + (
            f", OWL λ {config.owl_lambda:g} M {config.owl_m:g}"
            + (", weighted mean" if config.owl_mean == OwlMean.WEIGHTED else "")
            if config.allocation == Allocation.OWL
            else ""
        )
        + (f", {config.permute} permutation" if config.permute != Permute.NONE else "")
        + (" kept if better" if config.permute != Permute.NONE and config.permute_guard else "")
        + (", DSnoT" if config.refine == Refine.DSNOT else "")
        + (", OBS update" if config.update == Update.OBS else "")
        + (
            ", experts calibrated on all tokens"
            if config.moe_calibration == MoeCalibration.ALL and "moe_calibration" not in unread
            else ""
        )
        + ")"
    )
    group = (
        "N:M groups of inputs"
        if is_nm(config.sparsity)
        else {"row": "per output row", "layer": "per layer"}.get(config.group, config.group)
    )
    calibration = (
        "none (the method reads no activations)"
        if method and not reads_calibration(config)
        else f"{config.calib}: {config.nsamples} samples × {config.seqlen} tokens, seed {config.seed}"
    )
    device = config.device + (f" → {env['device']}" if env.get("device") and env["device"] != config.device else "")
    if env.get("device_name"):
        device += f" ({env['device_name']})"
    dtype = config.dtype + (
        f" → {run.results.dtype}" if run.results and run.results.dtype and run.results.dtype != config.dtype else ""
    )
    versions = ", ".join(
        f"{package} {env[package]}" for package in ("torch", "transformers", "python") if env.get(package)
    )
    rows = [
        ("run", f"{run.id} · {run.status}"),
        ("model", config.model),
        ("method", name),
        ("sparsity", f"{config.target}, no mask" if config.removes_experts_alone else f"{config.target}, {group}"),
        ("calibration", calibration),
        ("evaluation", _evaluation(config)),
        ("device", device),
        ("dtype", dtype),
        ("batch size", str(config.batch_size)),
        ("save", config.save or "–"),
        ("acetui", env.get("acetui") or "–"),
        ("versions", versions or "–"),
        *_where_rows(run, store_folder),
    ]
    return rows


def _where_rows(run: RunRecord, store_folder: Path) -> list[tuple[str, str]]:
    """Where and when the run executes, and its log file (relative to the run store when beside it)."""
    log = run.env.get("log")
    if log and Path(log).is_relative_to(store_folder):
        log = f"{Path(log).relative_to(store_folder)} (beside the run store)"
    return [
        ("host", f"{run.host or '–'}" + (f", pid {run.pid}" if run.pid else "")),
        ("created", fmt_time(run.created, "%Y-%m-%d %H:%M:%S")),
        ("started", fmt_time(run.started, "%Y-%m-%d %H:%M:%S")),
        ("log", log or "–"),
    ]


def config_text(run: RunRecord, store_folder: Path) -> str:
    """``config_rows`` as Textual markup: names in bold, values verbatim."""
    rows = config_rows(run, store_folder)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"[b]{name.ljust(width)}[/b]  {escape(value)}" for name, value in rows)


def run_experts(run: RunRecord, layers: list[LayerRecord]) -> Experts | None:
    """A mixture-of-experts run's token load: the finished result's, or while it runs, what its pruned
    ``layers`` recorded so far."""
    if run.results and run.results.experts:
        return run.results.experts
    return Experts.joined([layer.experts for layer in layers if layer.experts])


def expert_removal(experts: Experts) -> list[tuple[str, list[str]]]:
    """Per MoE layer whose experts ``--expert-sparsity`` removed, every expert's score in expert order (dense
    model's numbering); a removed expert is marked ``x``, which reads without colour too."""
    return [
        (
            f"layer {r.layer} {r.experts} {r.score}",
            [f"{score:.4g}{'x' if e in r.removed else ''}" for e, score in enumerate(r.scores)],
        )
        for r in experts.removal
    ]


def expert_tokens_use(config: RunConfig, experts: Experts) -> str:
    """What the tokens routed to the experts were for: each expert's mask statistics, or, where the run
    removes whole experts and masks nothing, the removal's scores alone (no statistics are gathered)."""
    if config.removes_experts_alone:
        return f"no mask: the tokens scored the experts for {config.label}"
    return f"statistics from {experts.calibration} tokens"


def expert_load(experts: Experts) -> list[tuple[str, list[str]]]:
    """Per experts module of each MoE layer, the calibration tokens routed to each expert, in expert order;
    a starved expert (its statistics came from all tokens instead) is marked ``*``, which reads without
    colour too."""
    starved = {(f.layer, f.expert) for f in experts.fallbacks}
    return [
        (
            f"layer {load.layer} {load.experts}",
            [f"{n}*" if (load.layer, f"{load.experts}.{e}") in starved else str(n) for e, n in enumerate(load.tokens)],
        )
        for load in experts.load
    ]
