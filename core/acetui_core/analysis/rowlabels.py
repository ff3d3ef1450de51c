"""Which runs of a comparison may share a cell, and how a row label names where they differ: every
setting of a finished run that can change the number a table shows (``settings``, the comparison key),
and each run's row label with the differences from the other runs of its base label
(``Wanda-16 (32 samples)``), and with any setting another row names where the run is away from its
default (``RIA-128 (OWL)`` beside ``RIA-16 (uniform)``). ``acetui_core.analysis.comparison`` builds the
grid from them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from acetui_core.basics.choices import Allocation, OwlMean, Permute, SparsityGroup
from acetui_core.basics.paths import known_model, model_key
from acetui_core.run.config import SETTINGS, RunConfig, model_name
from acetui_core.run.records import RunResult
from acetui_core.scores.method import SCORE_OPTIONS
from acetui_core.scores.metrics import METHODS, may_read_calibration, reference_group, unread_settings
from acetui_core.storage.store_rows import RunRecord


def result_of(record: RunRecord) -> RunResult:
    """The results of a run the comparison kept (finished, with results)."""
    assert record.results is not None, record.id
    return record.results


# Settings that cannot change a measured number (bookkeeping in the settings table): runs differing only
# in these share a cell. Seeds are the repeats a cell averages over; the table's own axes (sparsity, or
# the chosen columns) are not rows.
_NEVER_SPLIT = {"seed", "sparsity"} | {name for name, spec in SETTINGS.items() if not spec.result}
_PPL_ONLY = {"eval_seqlen", "eval_limit"}
_ZEROSHOT_ONLY = {"tasks", "zeroshot_limit"}
_CALIBRATION = {"calib", "nsamples", "seqlen"}


# What masks the weights: none of it counts for a run that removes whole experts and masks nothing
_MASKING = {"method", "group", "sparsity_scope", "allocation", "update", "permute", "permute_guard", "refine"}


def untaken_options(config: RunConfig) -> set[str]:
    """The settings of an option the run did not take (OWL's lambda on a uniform run, DSnoT's cycles without
    ``--refine dsnot``, the permutation guard without a permutation, output fidelity without calibration
    tokens to measure it on, every masking setting of a run that removes whole experts and masks nothing):
    the checks put most of them back to their defaults, but a run recorded before they did kept them as
    given, and a row label named them beside the one run that took the option
    (``Wanda-16 (uniform, OWL lambda 0.08, OWL M 5)``)."""
    untaken = {
        name for name, spec in SETTINGS.items() if spec.needs and str(getattr(config, spec.needs[0])) != spec.needs[1]
    }
    if config.permute == Permute.NONE:
        untaken.add("permute_guard")
    if not may_read_calibration(config):
        untaken.add("fidelity")
    if config.removes_experts_alone:
        untaken |= _MASKING | SCORE_OPTIONS | {name for name, spec in SETTINGS.items() if spec.needs}
    return untaken


def as_checked_now(record: RunRecord) -> RunConfig:
    """A stored run's settings as the checks would leave them today: a run recorded before a setting was
    put back (``--fidelity`` on magnitude) or before it existed (``--owl-mean``, read back ``weighted``,
    whose targets on equal layers are the plain mean's) is the same cell as its like run now."""
    config = record.config
    if config.fidelity and not may_read_calibration(config):
        config = replace(config, fidelity=False)
    result = record.results
    weighted = config.allocation == Allocation.OWL and config.owl_mean == OwlMean.WEIGHTED
    if weighted and result is not None and not _weighted_mean_mattered(result, config.sparsity_spec.ratio):
        config = replace(config, owl_mean=str(OwlMean.PLAIN))
    return config


def settings(record: RunRecord, measure: str, columns: str) -> dict[str, object]:
    """Every setting of a finished run that can change the number a table shows, except its seed and the
    table's column axis: the configuration (less what the run never reads), with what the run resolved (window lengths, windows counted,
    dtype) and the identity of the files it read (model, calibration)."""
    config, result = as_checked_now(record), result_of(record)
    skip = _NEVER_SPLIT | (_ZEROSHOT_ONLY if measure == "ppl" else _PPL_ONLY) | {columns}
    if columns == "sparsity":  # the column's header names them (``comparison._sparsity_header``)
        skip |= {"expert_sparsity", "sparsity_scope"}
    if columns == "seqlen":  # the calibration budget is the column (comparison names its windows there)
        skip |= {"nsamples"}
    if result.calibration is None:  # no calibration data: its settings cannot matter
        skip |= _CALIBRATION
    # nor can what the run's method, or a dense model, never reads: older runs recorded it as given
    skip |= unread_settings(config, experts=result.experts is not None)
    skip |= untaken_options(config)
    values: dict[str, object] = {f.name: getattr(config, f.name) for f in fields(config) if f.name not in skip}
    if "group" in values:
        group = values["group"]
        if config.sparsity_spec.is_nm:
            # N:M competes within each row's runs of M inputs whatever --group says: the run sits in the row of
            # its method's reference group, beside that method's ratio runs (magnitude's are per layer), not
            # in a half-empty "(row groups)" row of its own.
            method = METHODS.get(config.method)
            group = method.group if method is not None else SparsityGroup.ROW
        values["group"] = str(group)  # text: a run stored without a group reads back as the enum
    if "owl_mean" in values:  # text too: a run stored without it reads back as the enum
        values["owl_mean"] = str(values["owl_mean"])
    values["dtype"] = result.dtype
    if result.device is not None:  # a CPU's seconds and a GPU's are not one cell's (cuda:0 and cuda:1 are)
        values["device kind"] = result.device.split(":")[0]
    values["model"] = record.model_key  # one model however its path was typed; any copy of the bundled one
    bundled = model_key(config.model) != config.model
    values["model file"] = None if bundled else known_model(result.model_fingerprint)  # by content: copies are one
    if result.method_fingerprint is not None:  # a plug-in metric: its file's version
        values["method file"] = result.method_fingerprint
    if result.calibration is not None:  # named by its file, known by its content
        values.pop("calib", None)
        values["calibration"] = (_sample_name(config.calib, result.calibration.source), result.calibration.fingerprint)
        if "seqlen" in values:
            values["seqlen"] = result.calibration.seqlen
    if measure == "ppl":
        values["eval_seqlen"], values["eval_limit"] = result.ppl_seqlen, result.ppl_windows
        # the test text ("eval text") is added by row_labels, which sees the other runs of the model
    else:
        values["tasks"] = tuple((task, entry.n, entry.source) for task, entry in (result.zeroshot or {}).items())
        values.pop("zeroshot_limit", None)
    return values


def _weighted_mean_mattered(result: RunResult, target: float) -> bool:
    """Whether OWL's weighted mean gave other layer sparsities than its plain one: exactly where the plain
    mean of the targets is not the target. A run recorded before ``--owl-mean`` (weighted, every layer
    equal in size for a dense model) is so told from one on layers of different sizes."""
    targets = [a.sparsity for a in result.allocation or [] if not math.isnan(a.outlier_ratio)]
    return bool(targets) and abs(sum(targets) / len(targets) - target) > 1e-9


def model_columns(records: list[RunRecord]) -> dict[str, str]:
    """Each run's model as a table names its column group: the model's short name, or, where two models
    share it (a quantisation in another folder, a hub id beside a local copy), as many of the path's last
    parts as tell them apart. Models are never merged by name: one name, one model."""
    keys = {record.id: record.model_key for record in records}
    models = set(keys.values())
    names = {}
    for key in models:
        parts = key.rstrip("/").split("/")
        namesakes = [
            other.rstrip("/").split("/") for other in models if other != key and model_name(other) == model_name(key)
        ]
        depth = 1
        while depth < len(parts) and any(other[-depth:] == parts[-depth:] for other in namesakes):
            depth += 1
        names[key] = "/".join(parts[-depth:]).removesuffix(".gguf")
    shown = list(names.values())
    for key, name in names.items():  # "/m/x.gguf" and "/m/x" both read "x": such names keep the whole key
        if shown.count(name) > 1:
            names[key] = key
    return {run_id: names[key] for run_id, key in keys.items()}


_SAMPLES = {"c4": "C4 sample", "wikitext2": "WikiText-2 sample"}


def _sample_name(calib: str, source: str) -> str:
    """A calibration sample as a paper names it: ``C4 sample c4_calib_merged``, ``calibration
    c4-train.00000…first1000`` (a long file name keeps its start and end); a mixture as written
    (``calibration c4+domain.jsonl``)."""
    if "+" in calib and " + " in source:
        return f"calibration {calib}"
    stem = source.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".gz", ".jsonl", ".json", ".txt"):
        stem = stem.removesuffix(suffix)
    if len(stem) > 26:
        stem = f"{stem[:14]}…{stem[-9:]}"
    return f"{_SAMPLES.get(calib, 'calibration')} {stem}"


# How a row label names a value where runs differ: the settings table's words, and those of what the runs
# resolved (the calibration sample, the tasks' sizes).
_DESCRIBE: dict[str, Callable[[Any], str]] = {
    **{name: spec.describe for name, spec in SETTINGS.items() if spec.describe is not None},
    "calibration": lambda v: v[0],
    "tasks": lambda v: ", ".join(f"{task} n={n}" for task, n, _ in v),
    "device kind": lambda v: f"on {v}",
    "eval text": lambda v: f"test text {v[:6]}",
}


_DEFAULTS = {f.name: f.default for f in fields(RunConfig) if isinstance(f.default, (str, int, float, bool))}


def test_texts(records: list[RunRecord]) -> dict[str, str | None]:
    """Each run's WikiText-2 test text (``RunResult.ppl_text``). A run recorded before acetui kept it is
    taken to have read the text its model's other runs read where they all read one, and is told apart
    only where they read several."""
    texts = {record.id: result_of(record).ppl_text for record in records}
    known: dict[str, set[str]] = {}
    for record in records:
        if (text := texts[record.id]) is not None:
            known.setdefault(record.model_key, set()).add(text)
    only = {model: next(iter(found)) for model, found in known.items() if len(found) == 1}
    return {record.id: texts[record.id] or only.get(record.model_key) for record in records}


def row_labels(
    records: list[RunRecord],
    base: dict[str, str],
    measure: str,
    columns: str,
    shown: frozenset[str] = frozenset(),
    brief: bool = False,
    others: list[RunRecord] | tuple[RunRecord, ...] = (),
) -> dict[str, str]:
    """Each run's row label: its base label, plus the settings in which it differs from the other runs of
    the same base label in the table, whatever their model (for example ``Wanda-16 (32 samples)``), so that
    runs with different settings never share a cell and one row across two models' columns holds runs of
    the same settings. Once a setting is named in one row, every row of the table whose runs read it away
    from its default (``_said_beside``) names it too: ``RIA-128 (OWL)`` beside ``RIA-16 (uniform)`` and
    ``RIA-16 (OWL)``, where a plain ``RIA-128`` read as uniform. File identities that differ are numbered in
    order of appearance (``model file 2``: another content of the same model), and so are two versions of
    what reads the same (a re-written file).
    ``shown``: settings that other columns of the table already show, which the label leaves out.
    ``brief``: a setting at acetui's default is left unsaid (``Wanda-16`` beside ``Wanda-16 (DSnoT)``):
    still one label per set of settings, for a narrow table.
    ``others``: runs of a table shown beside this one (the paper view's zero-shot table beside its
    perplexity one), which get no label here but whose settings count as the table's own, except what
    only this table measures (``_MEASURED``): a run shown in both tables gets one label in both."""
    labelled = {record.id for record in records}
    everyone = records + [record for record in others if record.id not in labelled]
    texts = test_texts(records)
    values = {}
    shown = shown | {_TARGET}
    for record in everyone:
        values[record.id] = settings(record, measure, columns)
        # what a run takes away: its column, or its column group, tells it apart (never a label's words), so
        # two runs apart in it alone need no label apart (``_differing``)
        values[record.id][_TARGET] = record.config.target
        if record.id not in labelled:  # what this table measures is none of another table's business
            values[record.id] = {k: v for k, v in values[record.id].items() if k not in _MEASURED}
        # an unrecorded text is its model's one known text (``test_texts``), as in the columns
        elif "eval_seqlen" in values[record.id] and texts[record.id] is not None:
            values[record.id]["eval text"] = texts[record.id]
    groups: dict[str, list[RunRecord]] = {}
    for record in everyone:
        groups.setdefault(base[record.id], []).append(record)
    differing = {}
    for label, group in groups.items():
        _within_models(group, values, labelled)
        differing[label] = _differing({r.id: values[r.id] for r in group}, shown, labelled)
    order = list(dict.fromkeys(name for v in values.values() for name in v))
    named = {name for names in differing.values() for name in names}
    found: dict[tuple[str, str], list[str]] = {}

    def peers(name: str, text: str, describe: Callable[[Any], str]) -> list[str]:
        """The values of ``name`` in the table that read ``text``: two versions of what reads the same (a
        file re-written at its path) are numbered among themselves, across the table: dom v1 and dom v2,
        whatever other calibration came first."""
        if (name, text) not in found:
            same = [repr(v[name]) for v in values.values() if name in v and describe(v[name]) == text]
            found[name, text] = list(dict.fromkeys(same))
        return found[name, text]

    labels = {}
    for label, group in groups.items():
        versions = {name: list(dict.fromkeys(repr(values[r.id].get(name)) for r in group)) for name in differing[label]}
        for record in (r for r in group if r.id in labelled):
            its = values[record.id]
            parts = []
            for name in order:
                if name not in its or name not in named or name in shown:  # never read here, or said nowhere
                    continue
                value = its[name]
                if brief and name in differing[label] and name in _DEFAULTS and value == _DEFAULTS[name]:
                    continue
                describe = _DESCRIBE.get(name, lambda v, name=name: f"{name} {v}")
                text = describe(value)
                same = peers(name, text, describe)
                if name not in differing[label] and not _said_beside(name, value, record, len(same)):
                    continue
                if name.endswith(" file"):
                    parts.append(f"{name} {versions[name].index(repr(value)) + 1}")
                    continue
                parts.append(f"{text} v{same.index(repr(value)) + 1}" if len(same) > 1 else text)
            labels[record.id] = f"{label} ({', '.join(parts)})" if parts else label
    return labels


_TARGET = "sparsity target"

# What only one table measures: another table's runs (``row_labels``' ``others``) have none of it.
_MEASURED = _PPL_ONLY | _ZEROSHOT_ONLY | {"eval text"}

# Settings a row names only where its own base label's runs differ in them: the base label carries the
# method and calibration length, a model's column group how it was loaded and evaluated (``_PER_MODEL``),
# and a file's number counts versions of one model's or one method's file, meaningless beside another's.
_NAMED_IN_ITS_ROWS_ONLY = {"method", "seqlen", "model file", "method file"}


def _said_beside(name: str, value: object, record: RunRecord, versions: int) -> bool:
    """Whether a row whose runs all read ``name`` as ``value`` says so where another row of the table names
    the setting: where the value is not acetui's default (the method's reference group for ``group``; the
    C4 sample for ``calibration``, where the table holds one content of it: ``versions`` of what reads the
    same), so that no row reads as the default when it is not; and always for what has no default (the
    kind of device), which a plain label would leave unknown."""
    if name in _NAMED_IN_ITS_ROWS_ONLY or name in _PER_MODEL:
        return False
    if name == "group":
        return value != str(reference_group(record.config.method))
    if name == "calibration":
        return record.config.calib != _DEFAULTS["calib"] or versions > 1
    if name in _DEFAULTS:
        return value != _DEFAULTS[name]
    return True


# What a model's column group carries rather than a row: how the model was stored (the dtype ``auto``
# resolved), loaded and evaluated. A label names these only between runs of one model (two evaluations
# of it), never between two models, whose columns are apart anyway.
_PER_MODEL = ("dtype", "eval_seqlen", "eval_limit", "eval text", "tasks")


def _within_models(
    group: list[RunRecord], values: dict[str, dict[str, object]], labelled: set[str] | None = None
) -> None:
    """Leave in ``values`` only the differences a row may name across models: the model itself is the
    column group, another content of one model (a checkpoint converted again) is ``model file`` numbered
    within that model, and only where every run of the model knows its content (else there is no evidence
    of another model: no row of its own); ``_PER_MODEL`` settings stay only where a model's runs differ
    (in what one table measures, its ``labelled`` runs: another table's runs have none of it)."""
    by_model: dict[str, list[dict[str, object]]] = {}
    own: dict[str, list[dict[str, object]]] = {}
    for record in group:
        by_model.setdefault(record.model_key, []).append(values[record.id])
        if labelled is None or record.id in labelled:
            own.setdefault(record.model_key, []).append(values[record.id])
    for model, runs in by_model.items():
        files = [v.pop("model file", None) for v in runs]
        for v, file in zip(runs, files, strict=True):
            del v["model"]
            if None not in files and len(set(files)) > 1:
                v["model file"] = list(dict.fromkeys(files)).index(file) + 1
        for name in _PER_MODEL:
            judged = own.get(model, []) if name in _MEASURED else runs
            if len({repr(v.get(name)) for v in judged}) <= 1:
                for v in runs:
                    v.pop(name, None)


def _differing(
    values: dict[str, dict[str, object]], shown: frozenset[str], labelled: set[str] | None = None
) -> list[str]:
    """The settings a group's labels name: those whose value differs among the runs that read them (OWL's
    lambda among OWL runs, not against uniform runs, which never read it); or, where that would give two
    of its ``labelled`` runs' sets of settings one label, every setting whose value, or absence, differs.
    What one table measures (``_MEASURED``) is compared among its ``labelled`` runs only."""
    every = list(dict.fromkeys(name for v in values.values() for name in v))
    names = [name for name in every if name not in shown]
    told = [name for name in every if name in shown]  # other columns tell runs apart in these already
    own = [v for run_id, v in values.items() if labelled is None or run_id in labelled]

    def apart(readers_only: bool) -> list[str]:
        return [
            name
            for name in names
            if len(
                {
                    repr(v.get(name))
                    for v in (own if name in _MEASURED else values.values())
                    if name in v or not readers_only
                }
            )
            > 1
        ]

    def signatures(chosen: list[str]) -> int:
        return len({tuple((name, repr(v.get(name))) for name in chosen if name in v) for v in own})

    differing = apart(readers_only=True)
    return differing if signatures([*differing, *told]) == signatures(every) else apart(readers_only=False)


# Settings a caption leaves to other lines: the method is the row's label, the model the caption's own
# subject, the dtype a run resolved its environment's.
_UNSAID = {"method", "model", "dtype"}


def shared_settings(records: list[RunRecord], measure: str, columns: str) -> list[str]:
    """The settings away from acetui's defaults that every run reading them shares, in the labels' words
    (``4 samples``, ``OBS update``, ``DSnoT``; magnitude reads no samples and does not stop Wanda's being
    said). A row label names only where runs differ, so a table of OBS-updated Wanda read as plain Wanda:
    its caption names these."""
    values = [settings(record, measure, columns) for record in records]
    if columns == "seqlen":  # the headers name the sample count only where runs differ in it
        for its, record in zip(values, records, strict=True):
            if result_of(record).calibration is not None:
                its["nsamples"] = record.config.nsamples
    names = list(dict.fromkeys(name for value in values for name in value))
    shared = []
    for name in names:
        if name in _UNSAID or name not in _DEFAULTS:
            continue
        found = {repr(value[name]): value[name] for value in values if name in value}
        if len(found) == 1 and (value := next(iter(found.values()))) != _DEFAULTS[name]:
            shared.append(_DESCRIBE.get(name, lambda v, name=name: f"{name} {v}")(value))
    return shared
