"""Zero-shot accuracy through EleutherAI's lm-evaluation-harness, on the hub or from local files.

The numbers come from the harness itself: each task is the harness's own YAML configuration
(prompts, targets, choices, metrics). Offline (``ACETUI_DATA_DIR`` holds ``zeroshot/``), only
where the data comes from changes: the config's dataset is pointed at the local JSON file through
the ``json`` builder, after converting the file to the hub's field layout where the two differ.

lm_eval is imported inside functions: importing it takes seconds, and ``core`` must import fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from acetui_core.basics.errors import UserError, check_choice, check_stop
from acetui_core.basics.outputs import write_text_atomic
from acetui_core.basics.paths import cache_dir, data_dir
from acetui_core.run.basic_settings import ZEROSHOT_TASKS
from acetui_core.run.events import OnEvent, Stage
from acetui_core.run.records import TaskAccuracy, TaskOutcomes

# Where each task's YAML lives inside ``lm_eval/tasks`` (looking it up avoids the harness's
# TaskManager, which indexes ~15k configs in several seconds on every call).
TASK_YAMLS = {
    "boolq": "super_glue/boolq/default.yaml",
    "rte": "glue/rte/default.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "winogrande": "winogrande/default.yaml",
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "openbookqa": "openbookqa/openbookqa.yaml",
}

# Requests scored between two progress events (and cancel checks), in batches.
PROGRESS_EVERY_BATCHES = 8


def _boolq_row(row: dict) -> dict:
    # The local copy spells the label "true"/"false"; the hub's is a ClassLabel (False=0, True=1).
    label = row["label"]
    return {**row, "label": int(label if isinstance(label, (bool, int)) else label.lower() == "true")}


def _arc_row(row: dict) -> dict:
    # The original AI2 layout nests the stem and choice objects; the hub flattens them.
    question = row["question"]
    return {
        "id": row["id"],
        "question": question["stem"],
        "choices": {
            "text": [choice["text"] for choice in question["choices"]],
            "label": [choice["label"] for choice in question["choices"]],
        },
        "answerKey": row["answerKey"],
    }


def _hellaswag_row(row: dict) -> dict:
    # The local rows are already the output of the harness's process_docs (query, choices, gold);
    # doc_to_target reads the hub's string ``label``, which process_docs keeps.
    return {"query": row["query"], "choices": row["choices"], "gold": row["gold"], "label": str(row["gold"])}


@dataclass(frozen=True)
class LocalCopy:
    file: str  # relative to <ACETUI_DATA_DIR>/zeroshot
    split: str  # the split the harness evaluates this task on: "validation" or "test"
    convert: Callable[[dict], dict] | None = None  # local row -> the hub's field layout
    processed: bool = False  # rows are already process_docs' output, so the config must not apply it again
    note: str | None = None  # how the local copy differs from the hub's, for the result


LOCAL_COPIES = {
    "boolq": LocalCopy("boolq/val.jsonl", "validation", _boolq_row),
    "rte": LocalCopy("rte/glue_rte_validation.jsonl", "validation"),
    "hellaswag": LocalCopy(
        "hellaswag/hellaswag_val_harness_reconstructed.jsonl",
        "validation",
        _hellaswag_row,
        processed=True,
        note="local HellaSwag is reconstructed from a text copy: in about 6% of items an ending lacks the "
        "leading space the hub's copy keeps, so accuracy can differ slightly from the hub's",
    ),
    "winogrande": LocalCopy("winogrande/winogrande_xl_validation.jsonl", "validation"),
    "arc_easy": LocalCopy("arc_easy/ARC-Easy-Test.jsonl", "test", _arc_row),
    "arc_challenge": LocalCopy("arc_challenge/ARC-Challenge-Test.jsonl", "test", _arc_row),
    "openbookqa": LocalCopy("openbookqa/test.jsonl", "test"),
}


def validate_tasks(tasks: str | Iterable[str], limit: int | None = None) -> list[str]:
    """The task names (a list, or one comma-separated string), checked and without repeats, in order.

    Raises UserError for an unknown or missing task name, or a limit below 1.
    """
    names = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    names = [name.strip() for name in names if name.strip()]
    if not names:
        raise UserError(f"No zero-shot task given; choose one of: {', '.join(ZEROSHOT_TASKS)}.")
    for name in names:
        check_choice(name, ZEROSHOT_TASKS, "zero-shot task")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UserError(f"--limit must be a whole number of examples per task, at least 1 (got {limit}).")
    names = list(dict.fromkeys(names))
    root = data_dir()
    if root is not None:  # the tasks read its files (as C4 and WikiText-2 do): checked before any model loads
        missing = [name for name in names if _local_file(name) is None]
        if missing:
            path = root / "zeroshot" / LOCAL_COPIES[missing[0]].file
            raise UserError(f"ACETUI_DATA_DIR ({root}) has no zero-shot data for '{missing[0]}' at {path}.")
    elif _hub_offline():
        # Fail before a model is loaded or pruned, not after: offline, the hub is no fallback.
        missing = [name for name in names if _local_file(name) is None]
        if missing:
            raise UserError(
                f"Zero-shot task '{missing[0]}' has no local data and the hub is switched off (HF_HUB_OFFLINE or "
                f"HF_DATASETS_OFFLINE); set ACETUI_DATA_DIR to a folder with zeroshot/{LOCAL_COPIES[missing[0]].file}."
            )
    return names


def validate_batch_size(batch_size) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"--batch-size must be a whole number, at least 1 (got {batch_size}).")


def _hub_offline() -> bool:
    return any(
        os.environ.get(name, "").upper() in {"1", "ON", "YES", "TRUE"}
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _local_file(task: str) -> Path | None:
    """The task's file under ``ACETUI_DATA_DIR/zeroshot``, or None (no data dir, or no copy there)."""
    root = data_dir()
    path = root / "zeroshot" / LOCAL_COPIES[task].file if root else None
    return path if path is not None and path.is_file() else None


def _converted(task: str, source: Path, convert: Callable[[dict], dict]) -> Path:
    """The local file rewritten in the hub's layout, cached by the source's content."""
    raw = source.read_bytes()
    digest = hashlib.sha256(raw + convert.__name__.encode()).hexdigest()[:16]
    target = cache_dir("zeroshot") / f"{task}-{digest}.jsonl"
    if target.is_file():
        return target
    try:
        rows = [convert(json.loads(line)) for line in raw.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise UserError(
            f"Local zero-shot file {source} is not in the expected layout ({type(error).__name__}: {error})."
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        target, "".join(json.dumps(row) + "\n" for row in rows)
    )  # a concurrent run never reads half a file
    return target


def _harness_config(task: str) -> dict:
    """The harness's own configuration of ``task``, with ``!function`` entries resolved."""
    import lm_eval
    from lm_eval.tasks._yaml_loader import load_yaml

    path = Path(lm_eval.__file__).parent / "tasks" / TASK_YAMLS[task]
    if path.is_file():
        config = load_yaml(path, resolve_func=True)
        if config.get("task") == task:
            return dict(config)
    # Another harness version moved the file: ask its index (slow, but always right).
    from lm_eval.tasks import TaskManager

    entry = TaskManager().task_index.get(task)
    if entry is None or entry.yaml_path is None:
        raise UserError(f"The installed lm-evaluation-harness has no task '{task}'.")
    return dict(load_yaml(entry.yaml_path, resolve_func=True))


def task_source(task: str) -> tuple[dict, str, str | None]:
    """``(config, source, note)`` for one task: the harness config pointed at the local copy when
    ``ACETUI_DATA_DIR`` has one, else unchanged (the hub); ``source`` is the local file or ``"hub"``."""
    config = _harness_config(task)
    copy = LOCAL_COPIES[task]
    local = _local_file(task)
    if local is None:
        return config, "hub", None
    data_file = _converted(task, local, copy.convert) if copy.convert else local
    config.update(
        dataset_path="json",
        dataset_name=None,
        dataset_kwargs={"data_files": {copy.split: str(data_file)}},
        training_split=None,
        validation_split=copy.split if copy.split == "validation" else None,
        test_split=copy.split if copy.split == "test" else None,
    )
    if copy.processed:
        config["process_docs"] = None
    return config, str(local), copy.note


@contextmanager
def _quiet_harness():
    """The harness logs setup chatter at INFO/WARNING (e.g. that a model object was passed) and
    draws its own tqdm bars; our callers render progress from our events, so mute both meanwhile.
    These are process-wide switches: two evaluations in two threads at once would share them."""
    from functools import partial
    from unittest import mock

    import datasets
    from tqdm import tqdm

    loggers = [logging.getLogger(name) for name in ("lm_eval", "datasets")]
    levels = [logger.level for logger in loggers]
    bars_were_on = not datasets.are_progress_bars_disabled()
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    try:
        # The "building contexts" bar has no switch; its module's tqdm name is the only handle.
        with mock.patch("lm_eval.api.task.tqdm", partial(tqdm, disable=True)):
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=False):
            logger.setLevel(level)
        if bars_were_on:
            datasets.enable_progress_bars()


def _make_lm(model, tokenizer, batch_size: int, report: Callable[[int, int | None], None]):
    """The harness's HF wrapper around the in-memory model, scoring requests in slices so that
    progress (and cancellation) can happen inside a task. Each request is scored on its own, so the
    slicing does not change any result."""
    from lm_eval.models.huggingface import HFLM

    class ProgressHFLM(HFLM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            step = batch_size * PROGRESS_EVERY_BATCHES
            scores = []
            report(0, len(requests))
            for start in range(0, len(requests), step):
                scores.extend(super().loglikelihood(requests[start : start + step], disable_tqdm=True))
                report(len(scores), len(requests))
            return scores

    return ProgressHFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)


def _metric(results: dict, name: str) -> float | None:
    value = results.get(f"{name},none")
    return float(value) if isinstance(value, (int, float)) else None  # the harness writes "N/A" for n=1


def evaluate_zeroshot(
    model,
    tokenizer,
    tasks,
    *,
    limit: int | None = None,
    batch_size: int = 8,
    on_event: OnEvent | None = None,
    cancel=None,
) -> tuple[dict[str, TaskAccuracy], dict[str, TaskOutcomes]]:
    """Evaluate ``model`` (a loaded ``transformers`` causal LM, evaluated where it is) on each task.

    Returns ``{task: TaskAccuracy}`` (``acc_norm`` is None for tasks the harness scores by ``acc`` only)
    and ``{task: TaskOutcomes}``, each document's 0/1 correctness, for paired tests. Emits
    ``Stage("zeroshot:<task>", done, total)`` over the task's scored requests, and stops with
    ``Cancelled`` between slices when ``cancel`` is set.
    """
    tasks = validate_tasks(tasks, limit)
    validate_batch_size(batch_size)
    stage = ""  # rebound per task; ``report`` reads the current one

    def report(done: int, total: int | None) -> None:
        check_stop(cancel, f"during the zero-shot evaluation ({stage}, {done} of {total} requests scored)")
        if on_event:
            on_event(Stage(stage, done, total))

    with _quiet_harness():
        from lm_eval.evaluator import evaluate
        from lm_eval.tasks import TaskManager

        lm = _make_lm(model, tokenizer, batch_size, report)
        # An empty index: our tasks arrive as full configs, so the ~15k built-in ones need no scan.
        manager = TaskManager(include_defaults=False)
        out: dict[str, TaskAccuracy] = {}
        outcomes: dict[str, TaskOutcomes] = {}
        for task in tasks:
            stage = f"zeroshot:{task}"
            report(0, None)
            config, source, note = task_source(task)
            try:
                loaded = manager.load([config])
            except Exception as error:  # datasets raises many kinds when the hub is unreachable
                if source == "hub":
                    raise UserError(
                        f"Zero-shot task '{task}' has no local data (set ACETUI_DATA_DIR to a folder with "
                        f"zeroshot/{LOCAL_COPIES[task].file}) and the hub could not be reached ({type(error).__name__})."
                    ) from None
                raise UserError(
                    f"Could not read the local data for '{task}' from {source} ({type(error).__name__}: {error})."
                ) from None
            for harness_task in loaded["tasks"].values():
                harness_task.set_config(key="num_fewshot", value=0)
            # ``evaluate`` rather than ``simple_evaluate``: the latter only adds seeding (unused by
            # loglikelihood tasks) and a `git describe` of the user's cwd that prints errors outside a repo.
            evaluated = evaluate(lm=lm, task_dict=loaded, limit=limit, log_samples=True)
            outcomes[task] = _outcomes(task, evaluated["samples"][task], limit)
            metrics = evaluated["results"][task]
            counts = evaluated["n-samples"][task]
            out[task] = TaskAccuracy(
                acc=_metric(metrics, "acc"),
                acc_stderr=_metric(metrics, "acc_stderr"),
                acc_norm=_metric(metrics, "acc_norm"),
                acc_norm_stderr=_metric(metrics, "acc_norm_stderr"),
                n=counts["effective"],
                total=counts["original"],
                partial=counts["effective"] < counts["original"],
                source=source,
                note=note,
            )
    return out, outcomes


def _outcomes(task: str, samples: list[dict], limit: int | None) -> TaskOutcomes:
    """Each scored document's correctness from the harness's logged samples, in document order."""
    from importlib.metadata import version

    samples = sorted(samples, key=lambda sample: sample["doc_id"])
    norm = all("acc_norm" in sample for sample in samples) and bool(samples)
    return TaskOutcomes(
        task=task,
        lm_eval=version("lm_eval"),
        limit=limit,
        doc_ids=[int(sample["doc_id"]) for sample in samples],
        acc=[int(sample["acc"]) for sample in samples],
        acc_norm=[int(sample["acc_norm"]) for sample in samples] if norm else None,
    )
