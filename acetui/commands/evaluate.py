"""``acetui eval``: zero-shot accuracy of a dense model or a saved pruned checkpoint."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from acetui.cli import app
from acetui_core.config import ZEROSHOT_TASKS


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def zeroshot_table(zeroshot: dict, title: str) -> Table:
    """One row per task, as lm-eval reports it; ``n`` shows ``used/total`` when a --limit cut it short."""
    from acetui_core.zeroshot import is_partial, mean_accuracy

    table = Table(title=title)
    for column, justify in [("task", "left"), ("acc", "right"), ("±", "right"), ("acc_norm", "right"),
                            ("±", "right"), ("n", "right"), ("source", "left")]:
        table.add_column(column, justify=justify)
    for task, entry in zeroshot.items():
        n = f"{entry['n']}/{entry['total']}" if entry["partial"] else str(entry["n"])
        source = "hub" if entry["source"] == "hub" else "local"  # paths are listed under the table (80 columns)
        table.add_row(task, _number(entry["acc"]), _number(entry["acc_stderr"]), _number(entry["acc_norm"]),
                      _number(entry["acc_norm_stderr"]), n, source)
    table.add_section()
    table.add_row("mean acc" + (" (partial)" if is_partial(zeroshot) else ""), _number(mean_accuracy(zeroshot)), "", "", "", "", "")
    return table


@app.command("eval")
def eval_command(
    model: str = typer.Argument(..., help="Hub id, local checkpoint folder (e.g. from prune --save), or .gguf file."),
    tasks: str = typer.Option(",".join(ZEROSHOT_TASKS), help="Zero-shot tasks, comma-separated."),
    limit: Optional[int] = typer.Option(None, help="Examples per task (the first N; a partial result)."),
    batch_size: int = typer.Option(8, help="lm-eval batch size."),
    device: str = typer.Option("auto", help="auto, cpu or cuda[:i]."),
    dtype: str = typer.Option("auto", help="auto (float32 on CPU, bf16/fp16 on GPU), float32, float16, bfloat16."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
) -> None:
    """Zero-shot accuracy of MODEL through lm-evaluation-harness (local task files when ACETUI_DATA_DIR is set)."""
    from acetui.progress import EventProgress
    from acetui_core.models import load_model
    from acetui_core.pipeline import place_for_eval
    from acetui_core.zeroshot import evaluate_zeroshot, mean_accuracy, validate_batch_size, validate_tasks

    task_list = validate_tasks(tasks, limit)  # bad input fails here, before a model is loaded
    validate_batch_size(batch_size)
    with EventProgress() as progress:
        loaded = load_model(model, device=device, dtype=dtype, on_event=progress)
        place_for_eval(loaded)
        started = time.perf_counter()
        zeroshot = evaluate_zeroshot(loaded.model, loaded.tokenizer, task_list, limit=limit,
                                     batch_size=batch_size, on_event=progress)
        seconds = time.perf_counter() - started
    if as_json:
        print(json.dumps({
            "model": model,
            "family": loaded.family,
            "device": str(loaded.device),
            "dtype": str(loaded.dtype).removeprefix("torch."),
            "limit": limit,
            "batch_size": batch_size,
            "zeroshot": zeroshot,
            "mean_acc": mean_accuracy(zeroshot),
            "eval_seconds": seconds,
        }, indent=2))
        return
    console = Console()
    console.print(zeroshot_table(zeroshot, f"Zero-shot accuracy of {Path(model).name} ({seconds:.0f}s)"))
    local = sorted({str(Path(entry["source"]).parent.parent) for entry in zeroshot.values() if entry["source"] != "hub"})
    if local:
        console.print(f"local task files under {', '.join(local)}")
    for task, entry in zeroshot.items():
        if entry.get("note"):
            console.print(f"note ({task}): {entry['note']}.")
