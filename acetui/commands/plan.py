"""``acetui plan``: what a run will cost, from the model's config alone, before starting it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from acetui import options
from acetui.app.summary import fmt_count
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.paths import default_model
from acetui_core.run.config import RunConfig
from acetui_core.run.records import to_dict


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB"


def _evaluation(plan) -> str:
    text = "no perplexity"
    if plan.evaluation_tokens:
        text = f"{_gib(plan.evaluation_bytes)} for WikiText-2 (batches of {plan.evaluation_tokens} tokens, logits a few positions at a time)"
    if plan.evaluation_hidden_bytes:
        text += f", plus {_gib(plan.evaluation_hidden_bytes)} of hidden states of the windows it evaluates"
    if plan.zeroshot_uncounted:
        text += "; zero-shot not counted (lm-eval's batches are as long as the tasks' longest documents)"
    return text


def _at_least(plan) -> str:
    """A peak that leaves zero-shot evaluation out is a lower bound, and says so."""
    return "at least " if plan.zeroshot_uncounted else ""


def _census(plan) -> tuple[str, str]:
    """What will be pruned, per kind with its share of the parameters, and what stays dense."""
    census = plan.census or {}
    share = lambda count: f"{fmt_count(count)} ({count / plan.parameters:.0%})"  # noqa: E731
    dense = ("routing", "norms and biases")
    pruned = ", ".join(f"{kind.replace('_', ' ')} {share(n)}" for kind, n in census.items() if kind not in dense)
    kept = [f"{kind} {share(census[kind])}" for kind in dense if census.get(kind)]
    outside = plan.resident_parameters
    kept.append(f"embeddings, final norm and head {share(outside)}")
    return pruned, ", ".join(kept)


def plan_table(plan, nsamples: int) -> Table:
    table = Table(title=f"plan: {plan.model}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    checkpoint = _gib(plan.checkpoint_bytes) + ("" if plan.checkpoint_on_disk else " (estimated from the config)")
    where = (
        "on the GPU" if plan.activations_on_gpu else "in CPU memory" + (" (pinned)" if plan.device == "cuda" else "")
    )
    rows = [
        (
            "parameters",
            f"{fmt_count(plan.parameters)} ({plan.family}, {plan.layers} layers of up to "
            f"{fmt_count(plan.layer_parameters)})",
        ),
        ("pruned", _census(plan)[0]),
        ("kept dense", _census(plan)[1]),
        ("checkpoint", checkpoint),
        *(
            [
                (
                    "saved checkpoint",
                    f"{fmt_count(plan.saved_parameters)} parameters, {_gib(plan.saved_bytes)} (experts removed: "
                    f"{fmt_count(plan.parameters - plan.saved_parameters)} parameters fewer)",
                )
            ]
            if plan.saved_parameters is not None and plan.saved_bytes is not None
            else []
        ),
        ("device", f"{plan.device} ({plan.dtype})"),
        (
            "streaming",
            "yes: decoder layers read from the shards one at a time"
            if plan.streaming
            else "no: the whole model in memory",
        ),
        (
            "calibration",
            f"{_gib(plan.calibration_bytes)} of activations ({nsamples} x {plan.calibration_seqlen} tokens), {where}"
            if plan.calibration_seqlen is not None
            else "none: the method reads no calibration data",
        ),
        ("evaluation", _evaluation(plan)),
        (
            "peak CPU memory",
            f"{_at_least(plan)}{_gib(plan.peak_cpu_bytes)} (of which {_gib(plan.baseline_bytes)} Python, torch, "
            "transformers)",
        ),
    ]
    if plan.peak_gpu_bytes is not None:
        assumed = " (no GPU here: planned for an 80 GB card)" if plan.gpu_assumed else ""
        rows.append(("peak GPU memory", _at_least(plan) + _gib(plan.peak_gpu_bytes) + assumed))
    for key, value in rows:
        table.add_row(key, value)
    return table


@options.with_settings(
    "method",
    "nsamples",
    "seqlen",
    "device",
    "dtype",
    "offload",
    "evals",
    "eval_seqlen",
    "eval_limit",
    "expert_sparsity",
)
def plan(model: options.Model = None, *, as_json: options.JsonOption = False, **settings) -> None:
    """What a run will cost, from the model's config alone: parameters, checkpoint size, streaming,
    calibration activations, evaluation logits, peak CPU and GPU memory."""
    from acetui_core.pruning.plan import plan_run
    from acetui_core.scores.metrics import get_method

    config = RunConfig(model=default_model() if model is None else model, **settings)  # "" is no model
    config.method = get_method(config.method).name
    result = plan_run(config)
    if as_json:
        print(json_text(to_dict(result)))
    else:
        Console().print(plan_table(result, config.nsamples))
