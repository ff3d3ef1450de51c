"""``acetui runs``: the runs recorded in the store — list, show, watch, cancel, rm, sync."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from acetui import notify as notifications
from acetui import options
from acetui.app.summary import expert_load, expert_removal, expert_tokens_use, run_experts
from acetui_core.basics import parse
from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.paths import user_path
from acetui_core.basics.texttable import table_rows, text_table
from acetui_core.execution import jobfolder
from acetui_core.execution.kill import WHEN_IT_STOPS
from acetui_core.execution.kill import cancel as cancel_run
from acetui_core.modeling.data import source_names
from acetui_core.run.config import model_name
from acetui_core.run.records import LayerRecord, zeroshot_text
from acetui_core.scores.metrics import may_read_calibration
from acetui_core.storage.store import Store
from acetui_core.storage.store_files import LOG_FOLDER, MASK_FOLDER
from acetui_core.storage.store_reader import saved_checkpoint
from acetui_core.storage.store_rows import RunRecord
from acetui_core.storage.store_schema import STATUSES, TERMINAL

runs_app = typer.Typer(
    cls=options.Group,
    help="Runs recorded in the store: list, show, watch, cancel, remove, sync.",
    invoke_without_command=True,
    no_args_is_help=False,
)


# ---- formatting -----------------------------------------------------------------------------------


def age(seconds: float) -> str:
    """A short age such as ``45s``, ``12m``, ``3h`` or ``2d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def _calibration(config) -> str:
    """The run's calibration source as ``--calib`` names it (a file by its name; its windows' length is in
    the method's label), ``-`` for a run that reads none (magnitude)."""
    return source_names(config.calib) if may_read_calibration(config) else "-"


def _ppl_text(run: RunRecord) -> str:
    if run.ppl is None:
        return "-"
    return f"{run.ppl:.2f}" + ("*" if run.ppl_partial else "")


def _status_text(run: RunRecord) -> str:
    if run.damaged:
        return f"{run.status} (damaged)"
    if run.status == RunStatus.RUNNING and run.num_layers:
        return f"running {run.layers_done}/{run.num_layers}"
    return run.status


def run_summary(run: RunRecord) -> str:
    """One line about how a run ended."""
    if run.status == RunStatus.FINISHED and run.results:
        partial = f" over {run.results.ppl_windows} windows (partial)" if run.ppl_partial else ""
        ppl = "no perplexity" if run.ppl is None else f"ppl {run.ppl:.3f}{partial}"
        # a zero-shot-only run read "no perplexity" alone, its accuracies nowhere but in --json
        accuracy = f"; zero-shot acc {zeroshot_text(run.results.zeroshot)}" if run.results.zeroshot else ""
        return f"run {run.id} finished: {ppl}, pruned in {run.prune_seconds or 0:.1f} s{accuracy}."
    return f"run {run.id} {run.status}" + (f": {run.error}" if run.error else ".")


def _terminal_width() -> int | None:
    """The terminal's width when a person reads the list; piped, each run stays on one line for grep."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _run_list(records: list[RunRecord], width: int | None) -> str:
    """The runs as a table. Where its lines would be wider than the terminal, the model moves out of the
    columns to a line above its runs (stores hold a few models, and a GGUF file's name alone is 31
    characters) and long methods, targets and calibration files wrap within their columns, so that 80 columns show every run whole."""
    now = time.time()
    header = ["id", "status", "model", "method", "sparsity", "calib", "ppl", "seconds", "age"]
    rows = [
        [
            r.id,
            _status_text(r),
            model_name(r.config.model),
            r.label,
            r.config.target,
            _calibration(r.config),
            _ppl_text(r),
            "-" if r.prune_seconds is None else f"{r.prune_seconds:.1f}",
            age(now - r.created),
        ]
        for r in records
    ]
    lines = table_rows(header, rows)
    if width is None or max(len(line) for row in lines for line in row) <= width:
        return "\n".join(line for row in lines for line in row)
    models = [row.pop(2) for row in rows]
    del header[2]
    lines = table_rows(header, rows, width=width, fold=(2, 3, 4))
    out = lines[0]
    for i, (model, row_lines) in enumerate(zip(models, lines[1:], strict=True)):
        if i == 0 or model != models[i - 1]:
            out.append(f"model {model}")
        out.extend(row_lines)
    return "\n".join(out)


# ---- acetui runs ----------------------------------------------------------------------------------


def selection_text(filters) -> str:
    """The filters of a selection of runs that were given, as typed: ``--model llama --last 3``."""
    return " ".join(f"{flag} {value}" for flag, value in filters if value is not None)


def no_run_matches(store: Path, filters) -> UserError:
    """The refusal of filters (``(flag, value)``, None where not given) that match no run in ``store``: one
    sentence and exit 2, the same from ``acetui runs --model`` as from ``export``, ``verdict`` and ``figure``."""
    return UserError(f"No run in {store} matches {selection_text(filters) or 'the selection'}; acetui runs lists them.")


@runs_app.callback()
def runs(
    ctx: typer.Context,
    store: options.StoreOption = None,
    as_json: options.JsonOption = False,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    model: Annotated[str | None, typer.Option(help="Only runs of this model (path, hub id or its last part).")] = None,
    last: options.Last = None,
) -> None:
    """List the runs (newest first, as the app does): id, status, model, method, sparsity, calibration length,
    ppl, seconds, age."""
    if ctx.invoked_subcommand is not None:
        return
    if status is not None and status not in STATUSES:
        raise UserError(f"Unknown status '{status}'; choose one of: {', '.join(STATUSES)}.")
    opened = Store(store, create=False)
    jobfolder.sync(opened)
    records = opened.list_runs(status=status, model=model, last=last)[::-1]  # newest first, as the app lists them
    # a model of which the store holds no run is likely mistyped, and a script must tell it from an empty list
    if not records and model is not None and not opened.list_runs(model=model):
        raise no_run_matches(opened.path, [("--model", model)])
    if as_json:
        print(json_text([r.to_dict() for r in records]))
        return
    if not records:
        asked = selection_text((("--status", status), ("--model", model), ("--last", last)))
        print(f"No run matches {asked}." if asked else "No runs yet (acetui prune, compare or sweep start them).")
        return
    print(_run_list(records, _terminal_width()))
    if any(r.ppl_partial for r in records):
        print("* perplexity over part of the WikiText-2 test set (--eval-limit)")
    for record in records:
        if record.damaged:
            print(f"run {record.id} is damaged in the store: {record.damaged}.")


@runs_app.command("show", cls=options.Command)
def show(run_id: options.RunId, store: options.StoreOption = None, as_json: options.JsonOption = False) -> None:
    """Everything recorded about one run: configuration, environment, status, layers, results."""
    opened = Store(store, create=False)
    run = opened.get_run(run_id)
    if as_json:
        print(json_text(run.to_dict()))
        return
    # an interrupted run's end is its process's last sign of life (the store saw it dead later): not a finish
    ended = "last seen" if run.status == RunStatus.INTERRUPTED else "finished"
    times = "  ".join(
        f"{name} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(value))}"
        for name, value in (("created", run.created), ("started", run.started), (ended, run.finished))
        if value is not None
    )
    print(f"run {run.id}  {_status_text(run)}  {run.title}  {run.config.model}")
    print(times)
    if run.error:
        print(f"error: {run.error}")
    if run.damaged:
        print(f"damaged: {run.damaged}")
    print("config: " + ", ".join(f"{k}={v}" for k, v in run.config.to_dict().items()))
    print("env: " + ", ".join(f"{k}={v}" for k, v in run.env.items()))
    if run.layers:
        headers, extra = mask_choice_columns(run.layers)
        print(
            text_table(
                ["layer", "linears", "sparsity", "seconds", *headers],
                [
                    [
                        str(layer.index),
                        str(len(layer.linears)),
                        "-" if layer.sparsity is None else f"{layer.sparsity:.4f}",
                        f"{layer.seconds:.2f}",
                        *cells,
                    ]
                    for layer, cells in zip(run.layers, extra, strict=True)
                ],
            )
        )
        if headers:
            print(
                "retained: kept score / total score, mean over the layer's linears (unpermuted: the same without "
                "--permute); DSnoT error: ||e|| / ||W mu|| of the expected outputs, mean before -> after "
                "(per linear: runs show --json)"
            )
    if run.results and run.results.kinds:
        print("sparsity by kind: " + ", ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in run.results.kinds.items()))
    experts = run_experts(run, run.layers)  # while a run goes on: what its pruned layers recorded so far
    if experts:
        print(expert_load_text(run.config, experts))
    if run.results:
        print(run_summary(run))
        if run.results.saved_to:
            print(saved_line(run))
        print(kept_for_tests(opened, run))


def saved_line(run: RunRecord) -> str:
    """Where the run's checkpoint is. Its ``--save`` (as typed, from the folder it was started in) is where
    it was asked for, which another run may have filled first: the checkpoint then went beside it."""
    assert run.results is not None and run.results.saved_to is not None
    saved_to, asked = run.results.saved_to, run.config.save
    started_in = Path(run.env.get("folder") or ".")
    elsewhere = (
        f" (not {asked}, which another run filled while this one pruned)"
        if asked and Path(saved_to).resolve() != (started_in / user_path(asked)).resolve()
        else ""
    )
    gone = "" if Path(saved_to).is_dir() else " (no longer there)"
    return f"saved to: {saved_to}{elsewhere}{gone}"


def kept_for_tests(store: Store, run: RunRecord) -> str:
    """What the run kept for tests of a difference (``acetui verdict``), or that it cannot be tested."""
    kept = store.evidence([run.id])[run.id]
    parts = []
    if run.ppl is not None:
        losses = kept.window_losses
        if "wikitext2" in kept.damaged:
            parts.append(f"a damaged per-window record ({kept.damaged['wikitext2']}): its perplexity cannot be tested")
        elif losses:
            parts.append(f"{len(losses.nll)} perplexity windows of {losses.seqlen} tokens")
        else:
            parts.append("no per-window losses (recorded before acetui kept them): its perplexity cannot be tested")
    if run.results and run.results.zeroshot:
        tasks = [task for task in run.results.zeroshot if task in kept.task_outcomes]
        parts.append(
            f"each document's outcome on {len(tasks)} zero-shot task(s)"
            if tasks
            else "no per-document outcomes: its zero-shot accuracy cannot be tested"
        )
        parts += [
            f"a damaged record of {task} ({problem}): it cannot be tested"
            for task, problem in kept.damaged.items()
            if task != "wikitext2"
        ]
    return "kept for tests: " + ("; ".join(parts) if parts else "nothing (no evaluation)")


def mask_choice_columns(layers: list[LayerRecord]) -> tuple[list[str], list[list[str]]]:
    """How each layer's masks were chosen (``records.MaskChoice``), as extra columns of the layer table:
    the retained score, without --permute when it was used, and DSnoT's swaps and error. None for runs
    that recorded none (older runs, SparseGPT)."""
    choices = [[linear.choice for linear in layer.linears if linear.choice] for layer in layers]
    if not any(choices):
        return [], [[] for _ in layers]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    permuted = any(c.retained_unpermuted is not None for layer in choices for c in layer)
    refined = any(c.refinement is not None for layer in choices for c in layer)
    headers = ["retained", *(["unpermuted"] if permuted else []), *(["swaps", "DSnoT error"] if refined else [])]
    rows = []
    for layer in choices:
        if not layer:
            rows.append(["-"] * len(headers))
            continue
        row = [f"{mean([c.retained for c in layer]):.4f}"]
        if permuted:
            row.append(f"{mean([c.retained_unpermuted for c in layer if c.retained_unpermuted is not None]):.4f}")
        if refined:
            done = [c.refinement for c in layer if c.refinement]
            row.append(str(sum(r.swaps for r in done)))
            row.append(f"{mean([r.error_before for r in done]):.4f} -> {mean([r.error_after for r in done]):.4f}")
        rows.append(row)
    return headers, rows


def expert_load_text(config, experts) -> str:
    """Each MoE layer's calibration tokens per expert, starved experts marked, and the fallbacks' sentences."""
    lines = [f"experts: {experts.layout}; {expert_tokens_use(config, experts)}"]
    lines += [f"  {where} tokens: {' '.join(counts)}" for where, counts in expert_load(experts)]
    lines += [f"  * {f.sentence()}" for f in experts.fallbacks]
    lines += [f"  {where} scores: {' '.join(scores)}" for where, scores in expert_removal(experts)]
    if experts.removal:
        lines.append("  x: removed by --expert-sparsity (experts numbered as in the dense model)")
    return "\n".join(lines)


class Follower:
    """Prints a run's progress from the store: stages, each finished layer, and how it ended.

    Reading the store (not the pipeline's callback) is what lets a terminal leave a run and come
    back to it, or follow runs in other processes.
    """

    def __init__(self, store: Store, run_ids: list[str], err: bool = False):
        self.store, self.err = store, err
        self.after = {run_id: -1 for run_id in run_ids}
        self.stage: dict[str, tuple[str, bool] | None] = {run_id: None for run_id in run_ids}
        self.done: dict[str, RunRecord] = {}
        self.prefix = len(run_ids) > 1

    def _print(self, run_id: str, text: str) -> None:
        print(f"[{run_id}] {text}" if self.prefix else text, file=sys.stderr if self.err else sys.stdout, flush=True)

    def poll(self) -> bool:
        """Print what happened since the last poll; True once every run has ended."""
        jobfolder.sync(self.store)  # cluster runs report through their job folders
        for run_id in self.after:
            if run_id in self.done:
                continue
            run = self.store.get_run(run_id, layers=False)
            current = run.stage
            stage = None if current is None else (current.name, current.done == current.total)
            if current is not None and stage != self.stage[run_id]:
                self.stage[run_id] = stage
                total = "?" if current.total is None else current.total
                self._print(run_id, f"{current.name} {current.done}/{total}")
            for layer in self.store.layers_since(run_id, self.after[run_id]):
                self.after[run_id] = layer.index
                self._print(run_id, layer.line)
            if run.status in TERMINAL:
                self.done[run_id] = self.store.get_run(run_id, layers=False)
                self._print(run_id, run_summary(self.done[run_id]))
        return len(self.done) == len(self.after)

    def follow(self, interval: float) -> None:
        while not self.poll():
            time.sleep(interval)


@runs_app.command("watch", cls=options.Command)
def watch(
    run_id: options.RunId,
    store: options.StoreOption = None,
    interval: Annotated[
        float,
        typer.Option(
            parser=lambda text: parse.number(text, "--interval", minimum=0.1),
            metavar="SECONDS",
            help="Seconds between looks at the store.",
        ),
    ] = 0.5,
    notify: options.Notify = None,
) -> None:
    """Follow a run live, layer by layer; ring (or notify) when it ends. Ctrl-C leaves the watch; the run goes on."""
    mode = notifications.remembered_mode(notify)
    opened = Store(store, create=False)
    run = opened.get_run(run_id, layers=False)
    print(f"run {run.id}: {run.title} on {run.config.model} ({_status_text(run)})", flush=True)
    follower = Follower(opened, [run.id])
    try:
        follower.follow(interval)
    except KeyboardInterrupt:
        print(f"\nLeft run {run.id}; it goes on. Come back with: acetui runs watch {run.id}", file=sys.stderr)
        return
    notifications.notify_terminal(mode, "acetui", run_summary(follower.done[run.id]))
    if follower.done[run.id].status != RunStatus.FINISHED:
        raise typer.Exit(1)


@runs_app.command("cancel", cls=options.Command)
def cancel(run_ids: options.RunIds, store: options.StoreOption = None) -> None:
    """Stop runs: a queued run is cancelled at once, a running one at its next check (between calibration
    batches, layers or evaluation batches). A run id
    prefix must be at least 4 characters long."""
    opened = Store(store, create=False)
    # every id resolved before any is touched, and each run once (a prefix and the full id name one run)
    for full in dict.fromkeys(opened.resolve_to_change(run_id, "cancel") for run_id in run_ids):
        if cancel_run(opened, full) == RunStatus.CANCELLED:
            print(f"Run {full} cancelled before it started.")
        else:
            print(f"Run {full}: cancel requested; {WHEN_IT_STOPS}.")


@runs_app.command("sync", cls=options.Command)
def sync(store: options.StoreOption = None) -> None:
    """Import what cluster jobs wrote to their job folders (progress, results, how they ended), and remove
    the unfinished saves and scratch folders of runs whose process is gone."""
    from acetui_core.modeling.checkpoint import sweep_temporaries

    opened = Store(store, create=False)
    opened.check_writable()
    imported = jobfolder.sync(opened)
    runs = opened.list_runs()
    active = [run for run in runs if run.executor == ExecutorKind.SLURM and run.active]
    print(f"Imported {imported} event(s); {len(active)} Slurm run(s) still active.")
    swept = sweep_temporaries(run.config.save for run in runs if run.config.save)
    if swept:
        print(f"Removed {len(swept)} folder(s) that killed runs left: {', '.join(map(str, swept))}.")


def removal_text(run: RunRecord, files: list[Path]) -> str:
    """What ``runs rm`` removed of a run, naming only what existed, and the checkpoint it kept:
    ``Removed run 70609e46 (Wanda-16 at 0.5, finished, ppl 87.62): its record, log and masks.``"""
    kinds = ["record"]
    for path in files:
        kind = {LOG_FOLDER: "log", MASK_FOLDER: "masks"}.get(path.parent.name, "Slurm job files")
        if kind not in kinds:
            kinds.append(kind)
    what = kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"
    saved = saved_checkpoint(run)
    kept = f"; its saved checkpoint {saved} is kept" if saved else ""
    return f"Removed run {run.id} ({run.brief}): its {what}{kept}."


@runs_app.command("rm", cls=options.Command)
def remove(run_ids: options.RunIds, store: options.StoreOption = None) -> None:
    """Delete finished, failed, cancelled or interrupted runs from the store, with their logs, masks and
    Slurm job files (a saved checkpoint is kept). A run id prefix must be at least 4 characters long."""
    for run, files in Store(store, create=False).delete_runs(run_ids):
        print(removal_text(run, files))
