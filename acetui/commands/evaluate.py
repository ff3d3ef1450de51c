"""``acetui eval``: zero-shot accuracy of a dense model or a saved pruned checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, JustifyMethod
from rich.table import Table

from acetui import options
from acetui_core.basics.jsontext import json_text
from acetui_core.run.records import TaskAccuracy, ZeroshotReport, any_partial, mean_accuracy, to_dict


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def zeroshot_table(zeroshot: dict[str, TaskAccuracy], title: str) -> Table:
    """One row per task, as lm-eval reports it; ``n`` shows ``used/total`` when a --limit cut it short."""
    table = Table(title=title)
    columns: list[tuple[str, JustifyMethod]] = [
        ("task", "left"),
        ("acc", "right"),
        ("±", "right"),
        ("acc_norm", "right"),
        ("±", "right"),
        ("n", "right"),
        ("source", "left"),
    ]
    for column, justify in columns:
        table.add_column(column, justify=justify)
    for task, entry in zeroshot.items():
        n = f"{entry.n}/{entry.total}" if entry.partial else str(entry.n)
        source = "hub" if entry.source == "hub" else "local"  # paths are listed under the table (80 columns)
        table.add_row(
            task,
            _number(entry.acc),
            _number(entry.acc_stderr),
            _number(entry.acc_norm),
            _number(entry.acc_norm_stderr),
            n,
            source,
        )
    table.add_section()
    table.add_row(
        "mean acc" + (" (partial)" if any_partial(zeroshot) else ""),
        _number(mean_accuracy(zeroshot)),
        "",
        "",
        "",
        "",
        "",
    )
    return table


@options.with_settings("tasks", "zeroshot_limit", "batch_size", "device", "dtype")
def eval_command(
    model: Annotated[
        str, typer.Argument(help="Hub id, local checkpoint folder (e.g. from prune --save), or .gguf file.")
    ],
    *,
    as_json: options.JsonOption = False,
    **settings,
) -> None:
    """Zero-shot accuracy of MODEL through lm-evaluation-harness (local task files when ACETUI_DATA_DIR is set)."""
    from acetui.progress import EventProgress
    from acetui_core.modeling.models import load_model, resolve_device, resolve_dtype
    from acetui_core.modeling.placement import place_for_eval
    from acetui_core.modeling.preflight import check_runnable, preflight
    from acetui_core.pruning.zeroshot import evaluate_zeroshot, validate_tasks

    tasks, zeroshot_limit, batch_size, device, dtype = (
        settings[name] for name in ("tasks", "zeroshot_limit", "batch_size", "device", "dtype")
    )
    # Every check before a model is loaded.
    task_list = validate_tasks(tasks, zeroshot_limit)
    preflight(model)  # a damaged model, as prune says it
    check_runnable(model)  # a folder without weights or tokenizer
    resolve_dtype(dtype, resolve_device(device))
    with EventProgress() as progress:
        loaded = load_model(model, device=device, dtype=dtype, on_event=progress)
        place_for_eval(loaded)
        started = time.perf_counter()
        zeroshot, _ = evaluate_zeroshot(
            loaded.model, loaded.tokenizer, task_list, limit=zeroshot_limit, batch_size=batch_size, on_event=progress
        )
        seconds = time.perf_counter() - started
    if as_json:
        print(
            json_text(
                to_dict(
                    ZeroshotReport(
                        model=model,
                        family=loaded.family,
                        device=str(loaded.device),
                        dtype=str(loaded.dtype).removeprefix("torch."),
                        limit=zeroshot_limit,
                        batch_size=batch_size,
                        zeroshot=zeroshot,
                        mean_acc=mean_accuracy(zeroshot),
                        eval_seconds=seconds,
                    )
                )
            )
        )
        return
    console = Console()
    console.print(zeroshot_table(zeroshot, f"Zero-shot accuracy of {Path(model).name} ({seconds:.0f}s)"))
    local = sorted({str(Path(entry.source).parent.parent) for entry in zeroshot.values() if entry.source != "hub"})
    if local:
        console.print(f"local task files under {', '.join(local)}")
    for task, entry in zeroshot.items():
        if entry.note:
            console.print(f"note ({task}): {entry.note}.")
