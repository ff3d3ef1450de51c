"""Runs in the store: ``acetui runs`` (list, show, watch, cancel, rm), grids of runs (``compare``,
``sweep``) and ``export`` to CSV, LaTeX and Markdown."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from acetui.cli import app
from acetui.commands.prune import config_from_options, split_list
from acetui_core.config import ZEROSHOT_TASKS
from acetui_core.errors import Cancelled, UserError
from acetui_core.export import CELLS, COLUMNS, FORMATS, MEASURES, check_format, comparison, export, to_markdown
from acetui_core.store import STATUSES, TERMINAL, RunRecord, Store, model_name

runs_app = typer.Typer(help="Runs recorded in the store: list, show, watch, cancel, remove.",
                       invoke_without_command=True, no_args_is_help=False)
app.add_typer(runs_app, name="runs")

# Options shared by several commands, declared once.
StoreOption = Annotated[Optional[Path], typer.Option(
    "--store", help="The run store file (default: $ACETUI_HOME/runs.db or the user data folder).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout, for scripts.")]
Group = Annotated[str, typer.Option(help="Which weights compete for unstructured sparsity: row or layer.")]
Calib = Annotated[str, typer.Option(help="c4, wikitext2, or a .txt/.jsonl/.json(.gz) file with a 'text' field.")]
Nsamples = Annotated[int, typer.Option(help="Calibration windows.")]
Eval = Annotated[str, typer.Option("--eval", help="wikitext2, zeroshot, both comma-separated, or none.")]
EvalSeqlen = Annotated[Optional[int], typer.Option(help="Perplexity window length (default: the context, capped at 4096).")]
EvalLimit = Annotated[Optional[int], typer.Option(help="Evaluate the first N perplexity windows only.")]
Tasks = Annotated[str, typer.Option(help="Zero-shot tasks, comma-separated.")]
Limit = Annotated[Optional[int], typer.Option(help="Zero-shot examples per task (a partial result).")]
BatchSize = Annotated[int, typer.Option(help="Zero-shot batch size.")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda[:i]; with auto and several GPUs the grid runs one per GPU.")]
Dtype = Annotated[str, typer.Option(help="auto (float32 on CPU, bf16/fp16 on GPU), float32, float16, bfloat16.")]
Detach = Annotated[bool, typer.Option(help="Run in the background, detached from this terminal; print the run ids.")]
Cells = Annotated[str, typer.Option(help=f"Table cells: {' or '.join(CELLS)} (perplexity | pruning seconds).")]
RunId = Annotated[str, typer.Argument(help="A run id or a unique prefix of one.")]
RunIds = Annotated[list[str], typer.Argument(help="Run ids or unique prefixes.")]


# ---- formatting -----------------------------------------------------------------------------------


def age(seconds: float) -> str:
    """A short age such as ``45s``, ``12m``, ``3h`` or ``2d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def _ppl_text(run: RunRecord) -> str:
    if run.ppl is None:
        return "-"
    return f"{run.ppl:.2f}" + ("*" if run.results.get("ppl_partial") else "")


def _status_text(run: RunRecord) -> str:
    if run.status == "running" and run.num_layers:
        return f"running {run.layers_done}/{run.num_layers}"
    return run.status


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(line[i])) for line in [headers, *rows]) for i in range(len(headers))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in [headers, *rows])


def run_summary(run: RunRecord) -> str:
    """One line about how a run ended."""
    if run.status == "finished":
        windows = run.results.get("ppl_windows")
        partial = f" over {windows} windows (partial)" if run.results.get("ppl_partial") else ""
        ppl = "no perplexity" if run.ppl is None else f"ppl {run.ppl:.3f}{partial}"
        return f"run {run.id} finished: {ppl}, pruned in {run.prune_seconds or 0:.1f} s."
    return f"run {run.id} {run.status}" + (f": {run.error}" if run.error else ".")


# ---- acetui runs ----------------------------------------------------------------------------------


@runs_app.callback()
def runs(
    ctx: typer.Context,
    store: StoreOption = None,
    as_json: JsonOption = False,
    status: Annotated[Optional[str], typer.Option(help="Only runs with this status.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Only runs of this model (path, hub id or its last part).")] = None,
    last: Annotated[Optional[int], typer.Option(help="Only the N most recent runs.")] = None,
) -> None:
    """List the runs (oldest first): id, status, model, method, sparsity, calibration length, ppl, seconds, age."""
    if ctx.invoked_subcommand is not None:
        return
    if status is not None and status not in STATUSES:
        raise UserError(f"Unknown status '{status}'; choose one of: {', '.join(STATUSES)}.")
    records = Store(store).list_runs(status=status, model=model, last=last)
    if as_json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        print("No runs yet (acetui prune, compare or sweep start them).")
        return
    now = time.time()
    rows = [[r.id, _status_text(r), model_name(r.config.model), r.label, r.config.sparsity, str(r.config.seqlen),
             _ppl_text(r), "-" if r.prune_seconds is None else f"{r.prune_seconds:.1f}", age(now - r.created)]
            for r in records]
    print(text_table(["id", "status", "model", "method", "sparsity", "calib", "ppl", "seconds", "age"], rows))
    if any(r.results.get("ppl_partial") for r in records):
        print("* perplexity over part of the WikiText-2 test set (--eval-limit)")


@runs_app.command("show")
def show(run_id: RunId, store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Everything recorded about one run: configuration, environment, status, layers, results."""
    run = Store(store).get_run(run_id)
    if as_json:
        print(json.dumps(run.to_dict(), indent=2))
        return
    times = "  ".join(f"{name} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(value))}"
                      for name, value in (("created", run.created), ("started", run.started), ("finished", run.finished))
                      if value is not None)
    print(f"run {run.id}  {_status_text(run)}  {run.label} at {run.config.sparsity}  {run.config.model}")
    print(times)
    if run.error:
        print(f"error: {run.error}")
    print("config: " + ", ".join(f"{k}={v}" for k, v in run.config.to_dict().items()))
    print("env: " + ", ".join(f"{k}={v}" for k, v in run.env.items()))
    if run.layers:
        print(text_table(["layer", "linears", "sparsity", "seconds"],
                         [[str(l["layer"]), str(len(l["linears"])), f"{l['sparsity']:.4f}" if l["sparsity"] is not None else "-",
                           f"{l['seconds']:.2f}"] for l in run.layers]))
    if run.results:
        print(run_summary(run))


class Follower:
    """Prints a run's progress from the store: stages, each finished layer, and how it ended.

    Reading the store (not the pipeline's callback) is what lets a terminal leave a run and come
    back to it, or follow runs in other processes.
    """

    def __init__(self, store: Store, run_ids: list[str], err: bool = False):
        self.store, self.err = store, err
        self.after = {run_id: -1 for run_id in run_ids}
        self.stage: dict[str, tuple | None] = {run_id: None for run_id in run_ids}
        self.done: dict[str, RunRecord] = {}
        self.prefix = len(run_ids) > 1

    def _print(self, run_id: str, text: str) -> None:
        print(f"[{run_id}] {text}" if self.prefix else text, file=sys.stderr if self.err else sys.stdout, flush=True)

    def poll(self) -> bool:
        """Print what happened since the last poll; True once every run has ended."""
        for run_id in self.after:
            if run_id in self.done:
                continue
            run = self.store.get_run(run_id, layers=False)
            stage = run.stage and (run.stage["name"], run.stage["done"] == run.stage["total"])
            if stage and stage != self.stage[run_id]:
                self.stage[run_id] = stage
                total = run.stage["total"]
                self._print(run_id, f"{run.stage['name']} {run.stage['done']}/{'?' if total is None else total}")
            for layer in self.store.layers_since(run_id, self.after[run_id]):
                self.after[run_id] = layer["layer"]
                sparsity = "-" if layer["sparsity"] is None else f"{layer['sparsity']:.4f}"
                self._print(run_id, f"layer {layer['layer'] + 1}/{layer['total']}  {len(layer['linears'])} linears"
                                    f"  sparsity {sparsity}  {layer['seconds']:.2f} s")
            if run.status in TERMINAL:
                self.done[run_id] = self.store.get_run(run_id, layers=False)
                self._print(run_id, run_summary(self.done[run_id]))
        return len(self.done) == len(self.after)

    def follow(self, interval: float) -> None:
        while not self.poll():
            time.sleep(interval)


@runs_app.command("watch")
def watch(run_id: RunId, store: StoreOption = None,
          interval: Annotated[float, typer.Option(help="Seconds between looks at the store.")] = 0.5) -> None:
    """Follow a run live, layer by layer. Ctrl-C leaves the watch; the run goes on."""
    opened = Store(store)
    run = opened.get_run(run_id, layers=False)
    print(f"run {run.id}: {run.label} at {run.config.sparsity} on {run.config.model} ({_status_text(run)})", flush=True)
    follower = Follower(opened, [run.id])
    try:
        follower.follow(interval)
    except KeyboardInterrupt:
        print(f"\nLeft run {run.id}; it goes on. Come back with: acetui runs watch {run.id}", file=sys.stderr)
        return
    if follower.done[run.id].status != "finished":
        raise typer.Exit(1)


@runs_app.command("cancel")
def cancel(run_ids: RunIds, store: StoreOption = None) -> None:
    """Stop runs: a queued run is cancelled at once, a running one after its current layer."""
    opened = Store(store)
    for full in map(opened.resolve, run_ids):
        if opened.request_cancel(full) == "cancelled":
            print(f"Run {full} cancelled before it started.")
        else:
            print(f"Run {full}: cancel requested; it stops after its current layer.")


@runs_app.command("rm")
def remove(run_ids: RunIds, store: StoreOption = None) -> None:
    """Delete finished, failed, cancelled or interrupted runs from the store."""
    opened = Store(store)
    for full in map(opened.resolve, run_ids):
        opened.delete_run(full)
        print(f"Removed run {full}.")


# ---- compare and sweep ----------------------------------------------------------------------------


def _split(text: str, what: str) -> list[str]:
    items = split_list(text)
    if not items:
        raise UserError(f"{what} needs at least one value.")
    return list(dict.fromkeys(items))


def _seeds(text: str) -> list[int]:
    values = _split(text, "--seeds")
    if not all(v.isdigit() for v in values):
        raise UserError(f"--seeds must be whole numbers separated by commas, not '{text}'.")
    return [int(v) for v in values]


class _QueueProgress:
    """In-process grid progress: the prune command's bars, one set per run."""

    def __init__(self, store: Store, total: int):
        self.store, self.total = store, total
        self.current, self.progress, self.count = None, None, 0

    def __call__(self, run_id: str, event) -> None:
        from acetui.progress import EventProgress

        if run_id != self.current:
            self.close()
            self.count += 1
            run = self.store.get_run(run_id, layers=False)
            print(f"[{self.count}/{self.total}] run {run_id}: {run.label} at {run.config.sparsity} on "
                  f"{model_name(run.config.model)}", file=sys.stderr, flush=True)
            self.current, self.progress = run_id, EventProgress().__enter__()
        self.progress(event)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None


def _spawn_per_gpu(store: Store, run_ids: list[str], gpus: int, detach: bool) -> list:
    """One worker process per GPU, each with a contiguous share of the grid (so runs of one model stay
    together and each worker loads it once); a single worker when there are fewer than two GPUs."""
    from acetui_core.runner import spawn_worker

    if gpus < 2:
        return [spawn_worker(store, run_ids, detach=detach)]
    # Respect a CUDA_VISIBLE_DEVICES the user set: worker i gets the i-th GPU of that list.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = split_list(visible)[:gpus] if visible else [str(i) for i in range(gpus)]
    share = -(-len(run_ids) // len(devices))
    chunks = [run_ids[i:i + share] for i in range(0, len(run_ids), share)]
    return [spawn_worker(store, chunk, detach=detach, env={"CUDA_VISIBLE_DEVICES": device})
            for device, chunk in zip(devices, chunks)]


def _run_in_parallel(store: Store, run_ids: list[str], gpus: int) -> None:
    """Workers on every GPU, followed from here. They share this terminal's process group, so Ctrl-C
    reaches them; SIGTERM is passed on."""
    from acetui_core.runner import stop_signals

    workers = _spawn_per_gpu(store, run_ids, gpus, detach=False)
    print(f"{len(run_ids)} runs on {len(workers)} GPUs (logs in {store.path.parent / 'logs'}).", file=sys.stderr)
    stop = threading.Event()
    with stop_signals(stop):
        follower = Follower(store, run_ids, err=True)
        while not follower.poll() and any(w.poll() is None for w in workers):
            if stop.is_set():
                for worker in workers:
                    worker.terminate()
            time.sleep(0.5)
        for worker in workers:
            worker.wait()
        follower.poll()
    if stop.is_set():
        raise Cancelled()


RUN_OPTIONS = ("group", "calib", "nsamples", "eval", "eval_seqlen", "eval_limit", "tasks", "limit", "batch_size",
               "device", "dtype")


def _run_options(values: dict) -> dict:
    """The options every run of a grid shares, picked from a command's parameters."""
    return {**{name: values[name] for name in RUN_OPTIONS}, "squared_weight": False}


def _grid(models: list[str], methods: list[str], sparsities: list[str], seqlens: list[str], seeds: list[int],
          *, options: dict, columns: str, detach: bool, store: Optional[Path], as_json: bool, cells: str) -> None:
    """Queue every combination as a run, execute them, and print the comparison table."""
    from acetui_core.runner import collect_env, run_queue, visible_gpus

    configs = [config_from_options(model, method, sparsity, seqlen=seqlen, seed=seed, **options)
               for model in dict.fromkeys(models) for method in methods for seqlen in seqlens for seed in seeds
               for sparsity in sparsities]
    opened = Store(store)
    env = collect_env()
    run_ids = [opened.create_run(config, env=env) for config in configs]
    gpus = visible_gpus() if options["device"] in ("auto", "cuda") else 0
    if detach:
        _spawn_per_gpu(opened, run_ids, gpus, detach=True)
        print("\n".join(run_ids))
        print(f"{len(run_ids)} runs queued in the background; follow one with: acetui runs watch ID; "
              f"table with: acetui export --format markdown --last {len(run_ids)}", file=sys.stderr)
        return
    interrupted = False
    try:
        if gpus > 1 and len(run_ids) > 1:
            _run_in_parallel(opened, run_ids, gpus)
        else:
            progress = _QueueProgress(opened, len(run_ids))
            try:
                run_queue(opened, run_ids, on_event=progress)
            finally:
                progress.close()
    except Cancelled:
        interrupted = True
    records = opened.list_runs(ids=run_ids)
    if as_json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
    else:
        for record in records:
            if record.status != "finished":
                print(run_summary(record), file=sys.stderr)
        if any(r.status == "finished" and r.ppl is not None for r in records):
            print(to_markdown(comparison(records, cells=cells, columns=columns)), end="")
    if interrupted:
        raise typer.Exit(130)
    if any(r.status != "finished" for r in records):
        raise typer.Exit(1)


@app.command()
def compare(
    models: Annotated[list[str], typer.Argument(help="One or more models: hub ids, checkpoint folders or .gguf files.")],
    methods: Annotated[str, typer.Option(help="Methods, comma-separated.")] = "wanda,ria,ace",
    sparsity: Annotated[str, typer.Option(help="Sparsities, comma-separated: ratios and N:M patterns.")] = "0.5,4:8,2:4",
    seqlen: Annotated[str, typer.Option(help="Calibration lengths, comma-separated; 'full' for the context.")] = "16",
    seed: Annotated[str, typer.Option(help="Sampler seeds, comma-separated.")] = "0",
    group: Group = "row", calib: Calib = "c4", nsamples: Nsamples = 128, eval: Eval = "wikitext2",
    eval_seqlen: EvalSeqlen = None, eval_limit: EvalLimit = None, tasks: Tasks = ",".join(ZEROSHOT_TASKS),
    limit: Limit = None, batch_size: BatchSize = 8, device: Device = "auto", dtype: Dtype = "auto",
    detach: Detach = False, store: StoreOption = None, as_json: JsonOption = False, cells: Cells = "ppl",
) -> None:
    """Run every method x sparsity x calibration length on MODELS and print the paper-style table."""
    _grid(models, _split(methods, "--methods"), _split(sparsity, "--sparsity"), _split(seqlen, "--seqlen"),
          _seeds(seed), options=_run_options(locals()), columns="sparsity", detach=detach, store=store,
          as_json=as_json, cells=cells)


PAPER_SEQLENS = "16,32,128,512,1024,2048"


@app.command()
def sweep(
    models: Annotated[list[str], typer.Argument(help="One or more models: hub ids, checkpoint folders or .gguf files.")],
    method: Annotated[str, typer.Option(help="Method(s), comma-separated.")] = "ace",
    seqlen: Annotated[Optional[str], typer.Option(
        help=f"Calibration lengths (default: the paper's {PAPER_SEQLENS}, or 16 when several --seeds are given).")] = None,
    seeds: Annotated[str, typer.Option(help="Sampler seeds, comma-separated (the seed-robustness study: 0,1,2).")] = "0",
    sparsity: Annotated[str, typer.Option(help="Sparsities, comma-separated.")] = "0.5",
    group: Group = "row", calib: Calib = "c4", nsamples: Nsamples = 128, eval: Eval = "wikitext2",
    eval_seqlen: EvalSeqlen = None, eval_limit: EvalLimit = None, tasks: Tasks = ",".join(ZEROSHOT_TASKS),
    limit: Limit = None, batch_size: BatchSize = 8, device: Device = "auto", dtype: Dtype = "auto",
    detach: Detach = False, store: StoreOption = None, as_json: JsonOption = False, cells: Cells = "ppl",
) -> None:
    """The paper's appendix studies: perplexity against calibration length (--seqlen) or sampler seed (--seeds)."""
    seed_list = _seeds(seeds)
    seqlens = _split(seqlen if seqlen is not None else ("16" if len(seed_list) > 1 else PAPER_SEQLENS), "--seqlen")
    columns = "seqlen" if len(seqlens) > 1 else "seed" if len(seed_list) > 1 else "sparsity"
    _grid(models, _split(method, "--method"), _split(sparsity, "--sparsity"), seqlens, seed_list,
          options=_run_options(locals()), columns=columns, detach=detach, store=store, as_json=as_json, cells=cells)


# ---- export ---------------------------------------------------------------------------------------


def select_runs(store: Store, runs: Optional[str], model: Optional[str], last: Optional[int]) -> list[RunRecord]:
    """The runs an export names (all of them by default); an empty selection is the user's error."""
    if last is not None and last < 1:
        raise UserError("--last must be at least 1.")
    ids = _split(runs, "--runs") if runs is not None else None
    records = store.list_runs(ids=ids, model=model, last=last)
    if not records:
        chosen = " ".join(f"{flag} {value}" for flag, value in (("--runs", runs), ("--model", model), ("--last", last))
                          if value is not None)
        raise UserError(f"No run in {store.path} matches {chosen or 'the selection'}; acetui runs lists them.")
    return records


def write_output(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    if output.is_dir():
        raise UserError(f"-o {output} is a folder; give a file name.")
    if not output.parent.is_dir():
        raise UserError(f"Cannot write {output}: the folder {output.parent} does not exist.")
    try:
        output.write_text(text)
    except OSError as error:
        raise UserError(f"Cannot write {output}: {error.strerror or error}.") from None


@app.command("export")
def export_runs(
    format: Annotated[str, typer.Option("--format", "-f", help=f"One of: {', '.join(FORMATS)}.")] = "csv",
    runs: Annotated[Optional[str], typer.Option(help="Run ids (or unique prefixes), comma-separated.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Only runs of this model (path, hub id or its last part).")] = None,
    last: Annotated[Optional[int], typer.Option(help="Only the N most recent runs.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    cells: Cells = "ppl",
    columns: Annotated[str, typer.Option(help=f"Table columns: {', '.join(COLUMNS)} (rows are the methods).")] = "sparsity",
    table: Annotated[str, typer.Option(help="What the LaTeX/Markdown table shows: ppl, zeroshot (accuracy per task, "
                                            "Avg. last) or zeroshot-mean (mean accuracy by sparsity).")] = "ppl",
    store: StoreOption = None,
) -> None:
    """Export runs: CSV (every field, one row per run), or a LaTeX/Markdown table in the paper's layout."""
    check_format(format)
    if table not in MEASURES:
        raise UserError(f"Unknown --table '{table}'; choose one of: {', '.join(MEASURES)}.")
    records = select_runs(Store(store), runs, model, last)
    write_output(export(records, format, cells=cells, columns=columns, measure=table), output)
