"""Grids of runs: ``acetui compare`` (methods x sparsities x lengths, the paper's tables) and ``acetui
sweep`` (the appendix studies: calibration length, seed). Both go through the launcher."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from acetui import options
from acetui.commands.runs import Follower, run_summary
from acetui_core.analysis import verdicts
from acetui_core.analysis.comparison import check_table, comparison
from acetui_core.analysis.export import to_markdown
from acetui_core.basics.choices import RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.paths import default_model, same_place
from acetui_core.execution.launch import Grid, LocalProcesses, checked_store, gpus_for, launch, run_and_wait
from acetui_core.run.config import SETTINGS, model_name
from acetui_core.run.events import Event
from acetui_core.storage.store import Store

if TYPE_CHECKING:
    from acetui.progress import EventProgress


class QueueProgress:
    """In-process grid progress: the prune command's bars, one set per run."""

    def __init__(self, store: Store):
        self.store = store
        self.current: str | None = None
        self.progress: EventProgress | None = None
        self.count = 0

    def __call__(self, run_id: str, event: Event) -> None:
        from acetui.progress import EventProgress

        if run_id != self.current:
            self.close()
            self.count += 1
            run = self.store.get_run(run_id, layers=False)
            print(
                f"[{self.count}] run {run_id}: {run.title} on {model_name(run.config.model)}",
                file=sys.stderr,
                flush=True,
            )
            self.current, self.progress = run_id, EventProgress().__enter__()
        assert self.progress is not None  # opened above for the first event of each run
        self.progress(event)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None


def _watch_workers(store: Store):
    """How compare follows its workers on several GPUs: from the store, printing each run's layers."""

    def watch(run_ids: list[str], workers: list):
        print(f"{len(run_ids)} runs on {len(workers)} GPUs (logs in {store.folder / 'logs'}).", file=sys.stderr)
        return Follower(store, run_ids, err=True).poll

    return watch


def run_grid(
    grid: Grid, *, device: str, columns: str, detach: bool, cluster, store: str | None, as_json: bool, cells: str
) -> None:
    """Launch every run of the grid, wait for them (unless detached or on a cluster), and print the
    comparison table."""
    check_table(cells, columns)  # before the grid runs, not after
    configs, opened = checked_store(grid.configs(), store, local_device=cluster is None)
    executor = LocalProcesses(detach=True, gpus=gpus_for(device))
    if detach or cluster is not None:
        run_ids = launch(configs, cluster or executor, opened, checked=True)
        print("\n".join(run_ids))
        print(
            f"{len(run_ids)} runs queued in the background; follow one with: acetui runs watch ID; "
            f"table with: acetui export --format markdown --last {len(run_ids)}",
            file=sys.stderr,
        )
        return
    progress = QueueProgress(opened)
    try:
        run_ids, stopped = run_and_wait(
            configs, opened, executor, on_event=progress, watch=_watch_workers(opened), checked=True
        )
    finally:
        progress.close()
    records = opened.list_runs(ids=run_ids)
    if as_json:
        print(json_text([r.to_dict() for r in records]))
    else:
        for record in records:
            if record.status != RunStatus.FINISHED:
                print(run_summary(record), file=sys.stderr)
        if any(r.status == RunStatus.FINISHED and r.ppl is not None for r in records):
            table = verdicts.judge(comparison(records, cells=cells, columns=columns), opened.evidence(run_ids))
            unfinished = [r for r in records if r.status != RunStatus.FINISHED]
            if unfinished:  # said above the table, which is what gets pasted: its missing rows and seeds
                statuses = ", ".join(sorted({str(r.status) for r in unfinished}))
                print(
                    f"Partial: {len(records) - len(unfinished)} of the grid's {len(records)} runs finished; the "
                    f"other {len(unfinished)} ({statuses}) have no place in this table.\n"
                )
            print(to_markdown(table))
            print(verdicts.text(verdicts.report(table)), end="")
        else:  # --eval none (or zero-shot alone): no perplexity to tabulate, but never a silent stdout
            print("\n".join(run_ids))
            print(
                f"No perplexity table: these {len(run_ids)} runs measured no WikiText-2 perplexity; each one: "
                f"acetui runs show ID; all: acetui export --format csv --last {len(run_ids)}",
                file=sys.stderr,
            )
    stopped_runs = sum(1 for r in records if r.status == RunStatus.CANCELLED)
    if stopped is not None and stopped_runs:  # a stop after the last run cancelled none
        stopped.cancelled = stopped_runs  # the current run and the queue's: said once by the CLI
        raise stopped
    if any(r.status != RunStatus.FINISHED for r in records):
        raise typer.Exit(1)


def models_once(models: list[str] | None) -> list[str]:
    """MODELS (the bundled one when none is named), each once: ``tiny ./tiny`` would run one model where
    two were meant, as ``--seeds 0,0`` would one seed."""
    if not models:
        return [default_model()]
    places = [same_place(model) for model in models]  # one folder named two ways is one model
    for index, place in enumerate(places):
        if place in places[:index]:
            first = models[places.index(place)]
            also = "" if first == models[index] else f" (as {first} and {models[index]})"
            raise UserError(f"MODELS gives {first} twice{also}; give each model once.")
    return models


@options.with_settings(grid={"method": "wanda,ria,ace", "sparsity": "0.5,4:8,2:4"})
@options.with_executor
def compare(
    models: options.Models = None,
    *,
    detach: bool = False,
    cluster=None,
    store: options.StoreOption = None,
    as_json: options.JsonOption = False,
    cells: options.Cells = "ppl",
    **settings,
) -> None:
    """Run every method x sparsity x calibration length on MODELS and print the paper-style table."""
    grid = Grid.of({"model": models_once(models), **settings})
    run_grid(
        grid,
        device=settings["device"],
        columns="sparsity",
        detach=detach,
        store=store,
        as_json=as_json,
        cells=cells,
        cluster=cluster,
    )


PAPER_SEQLENS = "16,32,128,512,1024,2048"


@options.with_settings(grid={"seqlen": None})
@options.with_executor
def sweep(
    models: options.Models = None,
    *,
    detach: bool = False,
    cluster=None,
    store: options.StoreOption = None,
    as_json: options.JsonOption = False,
    cells: options.Cells = "ppl",
    **settings,
) -> None:
    """The paper's appendix studies: perplexity against calibration length (--seqlen; by default the
    paper's 16,32,128,512,1024,2048, or 16 when several --seeds are given) or sampler seed (--seeds)."""
    if settings["seqlen"] is None:
        settings["seqlen"] = SETTINGS["seqlen"].values("16" if len(settings["seed"]) > 1 else PAPER_SEQLENS)
    columns = "seqlen" if len(settings["seqlen"]) > 1 else "seed" if len(settings["seed"]) > 1 else "sparsity"
    run_grid(
        Grid.of({"model": models_once(models), **settings}),
        device=settings["device"],
        columns=columns,
        detach=detach,
        store=store,
        as_json=as_json,
        cells=cells,
        cluster=cluster,
    )
