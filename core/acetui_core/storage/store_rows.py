"""The run store's rows as typed records and back: ``RunRecord`` (a run as the store holds it), the
layers and linears of a run, the evidence a run kept. A part of a row that does not parse marks its record
damaged instead of failing the whole listing."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, field

from acetui_core.basics.choices import ExecutorKind, RunStatus
from acetui_core.basics.paths import run_model_key
from acetui_core.run.config import RunConfig, model_name
from acetui_core.run.events import Stage
from acetui_core.run.records import (
    Experts,
    Fidelity,
    LayerRecord,
    LinearRecord,
    RunResult,
    TaskOutcomes,
    WindowLosses,
    from_dict,
    to_dict,
)
from acetui_core.storage.store_schema import ACTIVE


@dataclass
class RunRecord:
    """One run as the store holds it. Times are POSIX seconds (``None`` until they happen).

    ``layers`` is filled by :meth:`Store.get_run` (and ``list_runs(layers=True)``); ``layers_done``
    counts them even when they were not loaded. ``results`` is set once the run finished.
    ``damaged`` says what could not be read when part of the stored row is corrupt.
    """

    id: str
    status: RunStatus
    config: RunConfig
    created: float
    started: float | None = None
    finished: float | None = None
    heartbeat: float | None = None
    env: dict = field(default_factory=dict)
    error: str | None = None
    pid: int | None = None
    host: str | None = None
    cancel_requested: bool = False
    num_layers: int | None = None
    current_layer: int | None = None
    stage: Stage | None = None
    results: RunResult | None = None
    layers_done: int = 0
    layers: list[LayerRecord] = field(default_factory=list)
    executor: str = ExecutorKind.LOCAL  # as recorded: a newer acetui's executor reads as its name, not damaged
    job: dict | None = None  # a Slurm run's job: {"job_id", "folder", "imported"}
    resources: dict | None = None  # the last resource sample of the run's process
    batch: str | None = None  # shared by the runs queued together (one compare, sweep or New run start)
    damaged: str | None = None

    @property
    def label(self) -> str:
        """The paper's row name, e.g. ``CosP+VarP-16``."""
        return self.config.label

    @property
    def settings_unknown(self) -> bool:
        """Whether the run's settings could not be read (its stored configuration is damaged): its
        ``config`` is then a stand-in (``?``) that lists the run but cannot place its numbers in a table."""
        return self.damaged is not None and self.damaged.startswith(UNREADABLE_CONFIG)

    @property
    def results_unknown(self) -> bool:
        """Whether a finished run's results could not be read (their stored row is damaged): it has numbers
        that no table can show, so every table says it left the run out rather than losing it unseen."""
        return self.status == RunStatus.FINISHED and self.results is None and "results (" in (self.damaged or "")

    @property
    def title(self) -> str:
        """The run's name for a sentence: ``Wanda-16 at 0.5``, or that its settings cannot be read (its
        stand-in configuration would read ``?-16 at ?``)."""
        return "settings unreadable" if self.settings_unknown else self.config.title

    @property
    def brief(self) -> str:
        """What the run is, in a few words: ``Wanda-16 at 0.5, finished, ppl 87.62``."""
        ppl = "" if self.ppl is None else f", ppl {self.ppl:.2f}"
        return f"{self.title}, {self.status}{ppl}"

    @property
    def model_key(self) -> str:
        """The model as tables compare runs (``paths.run_model_key``): one model however its path was typed."""
        folder = self.env.get("folder") if isinstance(self.env, dict) else None
        identity = self.results.model_fingerprint if self.results else None
        return run_model_key(self.config.model, identity, folder if isinstance(folder, str) else None)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ppl(self) -> float | None:
        return self.results.ppl_wikitext2 if self.results else None

    @property
    def ppl_partial(self) -> bool:
        return bool(self.results and self.results.ppl_partial)

    @property
    def prune_seconds(self) -> float | None:
        return self.results.prune_seconds if self.results else None

    def to_dict(self) -> dict:
        """JSON-ready: every field, plus ``label``."""
        return {**asdict(self), "label": self.label}


@dataclass
class RunEvidence:
    """What a run kept for tests of a difference (``Store.evidence``): its perplexity windows' losses and
    its zero-shot documents' correctness per task; empty for runs recorded before acetui kept them."""

    window_losses: WindowLosses | None = None
    task_outcomes: dict[str, TaskOutcomes] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)  # evaluation ("wikitext2", a task) -> what is wrong


UNREADABLE_CONFIG = "unreadable config ("  # how ``damaged`` starts when the settings are what failed

SELECT_RUNS = "SELECT runs.*, (SELECT COUNT(*) FROM layers WHERE layers.run_id = runs.id) AS layers_done FROM runs"


def dumps(value) -> str | None:
    return None if value is None else json.dumps(value)


def loads(text, default=None):
    return default if text is None else json.loads(text)


def as_dict(record) -> dict | None:
    return None if record is None else to_dict(record)


def model_names(model: str) -> set[str]:
    """What a user may type to mean ``model``: itself, its last component, its display name."""
    return {model, model.rstrip("/").rsplit("/", 1)[-1], model_name(model)}


def record_from_row(row: sqlite3.Row) -> RunRecord:
    """A stored row as a record. A part that does not parse marks the record damaged instead of failing
    the whole listing."""
    problems = []

    def read(column: str, parse, default=None):
        try:
            return parse(row[column]) if row[column] is not None else default
        except Exception as error:  # JSON or validation: any failure means that column is damaged
            problems.append(f"{column} ({type(error).__name__})")
            return default

    config = read("config", lambda text: RunConfig.from_dict(json.loads(text)))  # first: see UNREADABLE_CONFIG
    record = RunRecord(
        id=row["id"],
        status=RunStatus(row["status"]),
        config=config or RunConfig(model="?", method="?", sparsity="?"),
        created=row["created"],
        started=row["started"],
        finished=row["finished"],
        heartbeat=row["heartbeat"],
        env=read("env", json.loads, {}),
        error=row["error"],
        pid=row["pid"],
        host=row["host"],
        cancel_requested=bool(row["cancel_requested"]),
        num_layers=row["num_layers"],
        current_layer=row["current_layer"],
        stage=read("stage", lambda text: from_dict(Stage, json.loads(text))),
        results=read("results", lambda text: from_dict(RunResult, json.loads(text))),
        layers_done=row["layers_done"],
        executor=row["executor"],
        job=read("job", json.loads),
        resources=read("resources", json.loads),
        batch=row["batch"],
    )
    if problems:
        record.damaged = f"unreadable {', '.join(problems)}"
    return record


def attach_layers(db: sqlite3.Connection, records: list[RunRecord]) -> None:
    damaged: dict[str, str] = {}
    by_run = read_layers(db, [r.id for r in records], damaged)
    for record in records:
        record.layers = by_run[record.id]
        if record.id in damaged and not record.damaged:
            record.damaged = damaged[record.id]


def read_layers(
    db: sqlite3.Connection, run_ids: list[str], damaged: dict | None = None
) -> dict[str, list[LayerRecord]]:
    """The recorded layers of each run; a linear that does not parse is left out and noted in ``damaged``."""
    marks = ",".join("?" * len(run_ids))
    by_run: dict[str, list[LayerRecord]] = {run_id: [] for run_id in run_ids}
    index: dict[tuple[str, int], LayerRecord] = {}
    for row in db.execute(f"SELECT * FROM layers WHERE run_id IN ({marks}) ORDER BY run_id, layer", run_ids):
        layer = LayerRecord(
            index=row["layer"], total=row["total"], seconds=row["seconds"], linears=[], recorded=row["recorded"]
        )
        try:
            layer.fidelity = from_dict(Fidelity, loads(row["fidelity"])) if row["fidelity"] else None
            layer.experts = from_dict(Experts, loads(row["experts"])) if row["experts"] else None
        except Exception as error:  # a damaged value must not hide the rest of the run
            if damaged is not None:
                damaged[row["run_id"]] = (
                    f"unreadable fidelity or token load of layer {row['layer']} ({type(error).__name__})"
                )
        by_run[row["run_id"]].append(layer)
        index[(row["run_id"], row["layer"])] = layer
    for row in db.execute(f"SELECT * FROM linears WHERE run_id IN ({marks}) ORDER BY run_id, layer, position", run_ids):
        try:
            act_stats = loads(row["act_stats"]) or None  # magnitude's runs stored {}
            histogram, fidelity, choice = loads(row["histogram"]), loads(row["fidelity"]), loads(row["choice"])
            linear = LinearRecord(
                name=row["name"], d_out=row["d_out"], d_in=row["d_in"], sparsity=row["sparsity"], seconds=row["seconds"]
            )
            linear = from_dict(
                LinearRecord,
                {
                    **to_dict(linear),
                    "act_stats": act_stats,
                    "histogram": histogram,
                    "fidelity": fidelity,
                    "choice": choice,
                },
            )
        except Exception as error:  # a damaged linear must not hide the rest of the run
            if damaged is not None:
                damaged[row["run_id"]] = (
                    f"unreadable linear {row['name']} of layer {row['layer']} ({type(error).__name__})"
                )
            continue
        index[(row["run_id"], row["layer"])].linears.append(linear)
    return by_run


def write_layer(db: sqlite3.Connection, run_id: str, layer: LayerRecord, now: float) -> None:
    """Replace the rows of one layer of a run (the layer and its linears) by ``layer``'s; ``now`` is when
    it was recorded unless the record says."""
    db.execute("DELETE FROM layers WHERE run_id = ? AND layer = ?", (run_id, layer.index))
    db.execute(
        "INSERT INTO layers (run_id, layer, total, seconds, recorded, fidelity, experts) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            layer.index,
            layer.total,
            layer.seconds,
            layer.recorded or now,
            dumps(as_dict(layer.fidelity)),
            dumps(as_dict(layer.experts)),
        ),
    )
    db.executemany(
        "INSERT INTO linears (run_id, layer, position, name, d_out, d_in, sparsity, seconds, act_stats, histogram,"
        " fidelity, choice) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                run_id,
                layer.index,
                position,
                linear.name,
                linear.d_out,
                linear.d_in,
                linear.sparsity,
                linear.seconds,
                dumps(as_dict(linear.act_stats)),
                dumps(as_dict(linear.histogram)),
                dumps(as_dict(linear.fidelity)),
                dumps(as_dict(linear.choice)),
            )
            for position, linear in enumerate(layer.linears)
        ],
    )
    db.execute("UPDATE runs SET current_layer = NULL WHERE id = ?", (run_id,))


def evidence_rows(result: RunResult) -> list[tuple[str, str]]:
    """The evidence rows of a finished run, ``(evaluation, record as JSON)``: each zero-shot task's
    documents and the perplexity windows' losses."""
    evidence: list[tuple[str, WindowLosses | TaskOutcomes]] = [
        (f"zeroshot:{task}", o) for task, o in (result.task_outcomes or {}).items()
    ]
    if result.window_losses:
        evidence.append(("wikitext2", result.window_losses))
    return [(name, json.dumps(to_dict(record))) for name, record in evidence]


def evidence_from_rows(run_ids: list[str], rows: list) -> dict[str, RunEvidence]:
    """Each run's ``RunEvidence`` from its ``(run_id, evaluation, record)`` rows. A damaged record (one
    that cannot be read, or whose lists disagree) is left out and named in ``damaged`` with what is wrong:
    the run's numbers stand, they just cannot be tested."""
    out = {run_id: RunEvidence() for run_id in run_ids}
    for run_id, evaluation, text in rows:
        kind = WindowLosses if evaluation == "wikitext2" else TaskOutcomes
        name = evaluation.removeprefix("zeroshot:")
        try:
            record = from_dict(kind, json.loads(text))
            problem = record.damage()
        except Exception:  # whatever a damaged row holds, it is one run's record, not the store's
            record, problem = None, "it cannot be read"
        if problem is not None:
            out[run_id].damaged[name] = problem
        elif isinstance(record, WindowLosses):
            out[run_id].window_losses = record
        elif isinstance(record, TaskOutcomes):
            out[run_id].task_outcomes[name] = record
    return out
