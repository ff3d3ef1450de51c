"""A study: a comparison declared in one TOML file of run settings (by their names in the settings table,
``acetui_core.run.config.SETTINGS``), where a list is an axis. Its cells are the runs of every combination
(``acetui_core.execution.launch.Grid``, so a method without calibration data runs once whatever the calibration
axes), each with exactly the file's settings and the table's defaults for the rest.

A cell is *done* when the store holds a finished run with exactly its configuration, whoever started it;
*running* while a live process holds one (the store's liveness check tells a killed one); *failed* when
its newest run failed (an error of its own), *interrupted* when that run was cancelled or its process
stopped (a killed `study run` leaves every cell it had queued so, never started); else *missing*. So a study
resumes from the store alone: nothing about a study is stored but its runs. A run that read another
version of a cell's metric plug-in or calibration files (told by their content; for a run that failed or
was stopped, which records none, by when it started) is not a run of that cell: after such a file changes,
the cell is to run again and no report mixes the versions.

Usage::

    study = load_study(Path("study.toml"))
    cells = study.cells(store)
    states = cell_states(cells, store)
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from acetui_core.analysis.rowlabels import as_checked_now, untaken_options
from acetui_core.basics import parse
from acetui_core.basics.choices import EvalKind, RunStatus
from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import data_dir, default_model, mixture, model_identity, model_key, same_model, same_place
from acetui_core.execution.launch import Grid, check
from acetui_core.modeling.models import model_gone
from acetui_core.pruning.validate import MODEL_DECIDED, check_config, check_settings
from acetui_core.run.config import SETTINGS, RunConfig, model_name
from acetui_core.storage.store import Store
from acetui_core.storage.store_rows import RunRecord

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

DONE, RUNNING, FAILED, INTERRUPTED, MISSING = "done", "running", "failed", "interrupted", "missing"
STATES = (DONE, RUNNING, FAILED, INTERRUPTED, MISSING)


@dataclass(frozen=True)
class Study:
    path: Path
    text: str  # the file exactly as read: a report keeps it beside the results
    axes: dict[str, list]  # a setting given as a list of values
    common: dict  # a setting given as one value

    @property
    def name(self) -> str:
        return self.path.stem

    def configs(self) -> list[RunConfig]:
        """Every combination of the file's values, unchecked."""
        given = "model" in self.axes or "model" in self.common
        return Grid(self.axes, self.common if given else {"model": default_model(), **self.common}).configs()

    def cells(self, store: Path | None = None, *, local_device: bool = True) -> list[RunConfig]:
        """The study's runs, each checked and in normal form (the first problem raises its sentence,
        before anything runs); two combinations that check to the same run are one cell. ``store``: the run
        store's path, into which no cell may save."""
        try:
            checked = check(self.configs(), local_device=local_device, store=store)
        except UserError as problem:
            raise UserError(f"{self.path.name}: {problem}") from None
        return list({key(config): config for config in checked}.values())

    def recorded_cells(self, store: Store | None) -> tuple[list[RunConfig], list[str]]:
        """The study's cells as its status and report read them from ``store`` (None: no store yet), with
        the models among them that are gone. Checked as ``cells`` is, less what only running needs (this
        machine's GPUs and memory, the places a run may save to); a cell whose local model was moved or
        deleted after its runs is checked without the model's files, what the model decides
        (``MODEL_DECIDED``) taken from a stored run of the cell, so the finished study still reads."""
        configs = self.configs()
        gone = list(dict.fromkeys(config.model.strip() for config in configs if model_gone(config.model)))
        records = [as_checked_now(record) for record in store.list_runs()] if gone and store is not None else []
        try:
            checked = [
                _as_recorded(check_settings(config, local_device=False), records)
                if config.model.strip() in gone
                else check_config(config, local_device=False)
                for config in configs
            ]
        except UserError as problem:
            raise UserError(f"{self.path.name}: {problem}") from None
        return list({key(config): config for config in checked}.values()), gone


def _as_recorded(cell: RunConfig, recorded: list[RunConfig]) -> RunConfig:
    """A cell checked without its model, with the settings the model decides (``MODEL_DECIDED``: put back
    to their defaults where the model does not read them) as a stored run of the cell recorded them; as
    given where no run is the cell's."""
    for config in recorded:
        decided = replace(cell, **{name: getattr(config, name) for name in MODEL_DECIDED})
        recorded_or_default = all(
            getattr(config, name) in (getattr(cell, name), SETTINGS[name].default) for name in MODEL_DECIDED
        )
        if recorded_or_default and key(decided) == key(config):
            return decided
    return cell


def key(config: RunConfig) -> str:
    """What makes two runs the same cell: their whole configuration, where any installed copy of the
    bundled model is the bundled model (a study that names no model resumes in a new environment), and a
    method that reads no calibration data is one cell whatever its calibration settings (as the tables count
    it: a magnitude run of ``compare --seqlen 16`` is the cell of a study's ``seqlen = [8, 16]``)."""
    from acetui_core.scores.metrics import may_read_calibration

    settings = config.to_dict()
    settings["model"] = model_key(settings["model"])
    if not may_read_calibration(config):
        settings = {
            name: value for name, value in settings.items() if not (name in SETTINGS and SETTINGS[name].calibration)
        }
    return json.dumps(settings, sort_keys=True)


# What every cell's words say (seqlen: in its label); another axis is named after them.
NAMED = {"model", "method", "sparsity", "calib", "seed", "seqlen"}


def cell_text(config: RunConfig, axes=()) -> str:
    """A cell in words; with the study's other axes (``refine``, ``group``...), so no two cells read alike. A
    cell of a method that reads no calibration data (magnitude) says so, without source, seed or sample
    count: the study runs it once whatever they are (``launch.Grid.configs``); nor does it name a setting its
    method never reads (``ria_alpha`` of a Wanda cell), which the study does not vary for it."""
    from acetui_core.scores.metrics import may_read_calibration, unread_settings

    calibrated = may_read_calibration(config)
    # The model is not read here: --moe-calibration is named wherever it may count (experts=True).
    unread = unread_settings(config, experts=True) | untaken_options(config)
    data = f"{config.calib}, seed {config.seed}" if calibrated else "no calibration"
    if calibrated and config.removes_experts_alone:  # its label has no length to say it ("Wanda-16" has)
        data += f", {config.seqlen}-token windows"
    text = f"{config.title} on {model_name(config.model)}, {data}"
    return text + "".join(
        f", {name} {getattr(config, name)}"
        for name in axes
        if name not in NAMED and name not in unread and (calibrated or not SETTINGS[name].calibration)
    )


def _value(name: str, value):
    """One setting of the file through the table's parser; a problem names the key."""
    spec = SETTINGS[name]
    if isinstance(spec.default, bool) and not isinstance(value, bool):
        raise UserError(f"{name} must be true or false, not {value!r}.")
    if spec.parse is None and not isinstance(spec.default, bool) and not isinstance(value, str):
        raise UserError(f"{name} must be a string, not {value!r}.")
    if isinstance(value, dict):
        raise UserError(f"{name} must be a value or a list of values, not a table.")
    return spec.value(value, name)


def _is_axis(name: str, value) -> bool:
    """A list is an axis, except the one value of a setting that is itself a list (``evals``, ``tasks``),
    which becomes an axis as a list of lists."""
    if not isinstance(value, list):
        return False
    if isinstance(SETTINGS[name].default, list):
        return bool(value) and all(isinstance(item, list) for item in value)
    return True


def _option_keys() -> dict[str, str]:
    """Each CLI option written as a key (``--limit``: ``limit``) where that is not its setting's name, to
    that setting: ``limit`` is ``zeroshot_limit``, ``eval`` is ``evals``, ``seeds`` is ``seed``."""
    return {
        key: name
        for name, spec in SETTINGS.items()
        for flag in (*spec.flags, *spec.grid_flags)
        if flag.startswith("--") and (key := flag[2:].replace("-", "_")) != name
    }


def _hint(key: str) -> str:
    """What a key that is not a setting's name may have meant: the setting of the option it names (a
    close setting's name would be another setting: ``limit`` is not ``eval_limit``), else a close name."""
    option = _option_keys().get(key)
    if option is not None:
        return f" (--{key.replace('_', '-')} sets '{option}')"
    close = difflib.get_close_matches(key, list(SETTINGS), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_study(text: str, path: Path) -> Study:
    """The study a TOML text declares; unknown keys and bad values are refused with one sentence naming
    the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path.name} is not valid TOML: {error}.") from None
    if not data:  # an empty or truncated file would be one default cell, launched as if declared
        raise UserError(f"{path.name} sets nothing; a study names its settings, at least its model or methods.")
    axes, common = {}, {}
    for name, value in data.items():
        if name not in SETTINGS:
            raise UserError(
                f"{path.name}: '{name}' is not a run setting{_hint(name)}; the keys are in docs/studies.md."
            )
        if SETTINGS[name].single_run:
            raise UserError(f"{path.name}: '{name}' is for a single run (acetui prune); a study has many.")
        try:
            if _is_axis(name, value):
                if not value:
                    raise UserError(f"{name} is an empty list; give at least one value.")
                axes[name] = parse.each_once([_value(name, item) for item in value], name, key=same_place)
            else:
                common[name] = _value(name, value)
        except UserError as problem:
            raise UserError(f"{path.name}: {problem}") from None
    return Study(path, text, axes, common)


def load_study(path: Path) -> Study:
    if not path.is_file():
        raise UserError(f"Study file {path} does not exist.")
    try:  # bytes, not text mode: its universal newlines would turn CRLF into LF, and the report's copy must be exact
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"Could not read {path}: {error}.") from None
    return parse_study(text, path)


def runs_by_cell(cells: list[RunConfig], store: Store) -> dict[str, list[RunRecord]]:
    """The store's runs of each cell (by ``key``), oldest first; a run that read another version of the
    cell's files (its metric plug-in, its calibration files, the WikiText-2 test text: by content) is not
    one of them."""
    wanted: dict[str, list[RunRecord]] = {key(cell): [] for cell in cells}
    files = _files_now(cells)
    for record in sorted(store.list_runs(), key=lambda r: r.created):
        cell = key(as_checked_now(record))  # a run recorded before a setting was put back is still its cell's
        if cell in wanted and _read_these(record, files[cell]):
            wanted[cell].append(record)
    return wanted


class _Files(NamedTuple):
    """What a cell's run would record of the files it reads now (``_files_now``)."""

    method: str | None  # the metric's file (a plug-in's)
    calibration: str | None  # the calibration files' content (None where the method reads none, or from the hub)
    model: str | None  # the model's files (None for a hub id, and for the bundled model)
    changed: float | None  # when the plug-in or a calibration file was last written (None: no such file)
    text: str | None  # the local WikiText-2 test text a perplexity is evaluated on (None: none, or the hub's)


def _files_now(cells: list[RunConfig]) -> dict[str, _Files]:
    """Per cell, the identities its run would record now, and when its files last changed. The bundled
    model's installed copies differ in time alone, so it has no identity."""
    from acetui_core.modeling.data import calibration_identity, source_place
    from acetui_core.scores.metrics import get_method, reads_calibration

    calibration: dict[str, tuple[str | None, list[Path]]] = {}
    models: dict[str, str | None] = {}
    text = _test_text_now(cells)
    files = {}
    for cell in cells:
        calibrated = reads_calibration(cell)
        if calibrated and cell.calib not in calibration:
            places = [Path(source_place(name)) for name, _ in mixture(cell.calib)]
            calibration[cell.calib] = (calibration_identity(cell.calib), [p for p in places if p.is_file()])
        if cell.model not in models:
            models[cell.model] = model_identity(cell.model) if model_key(cell.model) == cell.model else None
        method = get_method(cell.method)
        identity, read = calibration[cell.calib] if calibrated else (None, [])
        if method.fingerprint is not None and Path(method.source).is_file():  # a plug-in file (a module: no path)
            read = [*read, Path(method.source)]
        changed = max((path.stat().st_mtime for path in read), default=None)
        evaluated = text if EvalKind.WIKITEXT2 in cell.evals else None
        files[key(cell)] = _Files(method.fingerprint, identity, models[cell.model], changed, evaluated)
    return files


def _test_text_now(cells: list[RunConfig]) -> str | None:
    """The identity of the local WikiText-2 test text (``ACETUI_DATA_DIR``) the cells' perplexities would be
    evaluated on; None where no cell evaluates one, or it would come from the hub (not fetched to check)."""
    from acetui_core.modeling.data import wikitext2_test_identity

    if data_dir() is None or not any(EvalKind.WIKITEXT2 in cell.evals for cell in cells):
        return None
    try:
        return wikitext2_test_identity()
    except UserError:  # no test split there: the cells' runs will say so; no evidence of another text
        return None


def _read_these(record: RunRecord, files: _Files) -> bool:
    """Whether a run read the files as they are now: its metric's, its calibration files, and its model's
    (a relative model path read from another folder is another model, though its text is the same). A run
    without results recorded none of them: one under way counts (it is the cell's, running), one that
    failed or was stopped counts only if it started after the files last changed (else it read another
    version, and its error is not the cell's)."""
    results = record.results
    if results is None:
        began = record.started or record.created
        return record.active or files.changed is None or began >= files.changed
    recorded = results.calibration.fingerprint if results.calibration is not None else None
    return (
        (files.method is None or results.method_fingerprint == files.method)
        and _same_content(recorded, files.calibration)
        and same_model(results.model_fingerprint, files.model)
        # evaluated on another copy of the test text; unrecorded before 2026-12-07: no evidence of a change
        and (files.text is None or results.ppl_text is None or results.ppl_text == files.text)
    )


def _same_content(recorded: str | None, now: str | None) -> bool:
    """Whether each source of a calibration sample holds what it held, where both say: a part read from the
    hub (None) or recorded before runs kept their files' content (size and time, ``12345:6789``) is not
    evidence of a change."""
    if recorded is None or now is None:
        return True
    before, after = recorded.split("+"), now.split("+")
    if len(before) != len(after):  # not one sample's parts: nothing to compare
        return True
    return all(a == b for a, b in zip(before, after, strict=True) if _is_content(a) and _is_content(b))


def _is_content(identity: str) -> bool:
    return len(identity) == 16 and all(c in "0123456789abcdef" for c in identity)


def state_of(runs: list[RunRecord]) -> str:
    if any(run.status == RunStatus.FINISHED for run in runs):
        return DONE
    if any(run.active for run in runs):
        return RUNNING
    if not runs:
        return MISSING
    return FAILED if runs[-1].status == RunStatus.FAILED else INTERRUPTED


def cell_states(cells: list[RunConfig], store: Store) -> list[tuple[RunConfig, str, list[RunRecord]]]:
    """Each cell with its state and its runs in the store."""
    by_cell = runs_by_cell(cells, store)
    return [(cell, state_of(by_cell[key(cell)]), by_cell[key(cell)]) for cell in cells]


def shown_run(state: str, runs: list[RunRecord]) -> RunRecord | None:
    """The run a cell is listed with: a done cell's newest finished run (the one its report reads, though a
    newer run of it failed or was stopped since), another cell's newest run."""
    if state == DONE:
        return newest_finished(runs)
    return runs[-1] if runs else None


def finished_runs(cells: list[RunConfig], store: Store) -> list[RunRecord]:
    """The newest finished run of each done cell: what a report reads."""
    return [newest_finished(runs) for _, state, runs in cell_states(cells, store) if state == DONE]


def newest_finished(runs: list[RunRecord]) -> RunRecord:
    """The newest finished run of a done cell's runs (oldest first)."""
    return [run for run in runs if run.status == RunStatus.FINISHED][-1]
