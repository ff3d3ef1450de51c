"""The user's preferences: the remembered theme, notification, plug-ins, export folder and last New run
values (not run settings: those are ``acetui_core.run.config``).

One small JSON file, ``settings.json`` in the user config folder (platformdirs), or in
``$ACETUI_CONFIG_DIR`` when set (the file keeps the name it had, so no one's choices are lost). A missing file means defaults; an unreadable one also means defaults,
with ``problem`` saying why (shown once, and the file is rewritten on the next save).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal, get_type_hints

from acetui_core.basics.errors import UserError
from acetui_core.basics.outputs import write_text_atomic
from acetui_core.basics.paths import user_path
from acetui_core.scores.metrics import METHODS

CONFIG_DIR_ENV = "ACETUI_CONFIG_DIR"
FILENAME = "settings.json"


def preferences_path() -> Path:
    folder = os.environ.get(CONFIG_DIR_ENV)
    if folder:
        return user_path(folder) / FILENAME
    import platformdirs

    return Path(platformdirs.user_config_dir("acetui", appauthor=False)) / FILENAME


@dataclass
class Preferences:
    theme: str | None = None  # None: dark (ansi under NO_COLOR)
    notify: Literal["bell", "osc", "none"] = "osc"  # how a run's end is announced: bell, osc (bell + OSC 9/777), none
    new_run: dict = field(default_factory=dict)  # the New run form's values when a run was last started there
    plugins: list[str] = field(default_factory=list)  # plug-in metrics (module:function, file.py:function) to list
    export_dir: str | None = None  # where the app saves exports (None: ~/Documents/acetui; see acetui.app.exports)
    problem: str | None = field(default=None, compare=False)  # why the file could not be read (not saved)
    # why the file is there but holds no JSON object ("could not be read (...)"); None: read (not saved)
    unreadable: str | None = field(default=None, compare=False)


UNSAVED = ("problem", "unreadable")  # what a load found, never written back

# The New run values whose type the form relies on (the others it checks itself as it restores them).
NEW_RUN_TYPES = {"model": str | None, "metrics": list[str]}


def _valid(value, kind) -> bool:
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(kind).validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


def load() -> Preferences:
    """The preferences in the file; each value of the wrong type (a hand edit, an older version) falls back to
    its default, a built-in method remembered as a plug-in is left out, and ``problem`` names them in one
    notice."""
    path = preferences_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as Windows editors write, is no error
    except FileNotFoundError:
        return Preferences()
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "it is not valid JSON"
        return _unreadable(path, f"could not be read ({reason})")
    if not isinstance(data, dict):
        return _unreadable(path, "does not hold a JSON object")
    types = get_type_hints(Preferences)
    known = {f.name: data[f.name] for f in fields(Preferences) if f.name in data and f.name not in UNSAVED}
    bad = [name for name, value in known.items() if not _valid(value, types[name])]
    new_run = known.get("new_run")
    if isinstance(new_run, dict):
        wrong = [key for key, kind in NEW_RUN_TYPES.items() if key in new_run and not _valid(new_run[key], kind)]
        bad += [f"new_run.{key}" for key in wrong]
        known["new_run"] = {key: value for key, value in new_run.items() if key not in wrong}
    preferences = Preferences(**{name: value for name, value in known.items() if name not in bad})
    problems = [f"a value of the wrong type for {', '.join(bad)}; using the default for each"] if bad else []
    built_in = [name for name in preferences.plugins if name in METHODS]  # listed anyway: a plug-in of no use
    if built_in:
        preferences.plugins = [name for name in preferences.plugins if name not in built_in]
        problems.append(f"built-in methods among its plug-ins ({', '.join(built_in)}); leaving them out")
    if problems:
        preferences.problem = f"The settings file {path} has {', and '.join(problems)}."
    return preferences


def _unreadable(path: Path, why: str) -> Preferences:
    return Preferences(problem=f"The settings file {path} {why}; using the defaults.", unreadable=why)


def save(preferences: Preferences) -> None:
    """Write the preferences (atomically: a crash never leaves half a file); ``UserError`` if the folder refuses."""
    path = preferences_path()
    data = {k: v for k, v in asdict(preferences).items() if k not in UNSAVED}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"Cannot save the settings to {path}: {error.strerror or error}.") from None


def update(**values) -> Preferences:
    """Load, change ``values``, save; returns the saved preferences. What the file held that could not be
    used is said on stderr before the file is rewritten without it; a file that could not be read at all
    is left as it is (a UserError), never replaced by the defaults."""
    preferences = load()
    if preferences.unreadable:
        raise UserError(
            f"The settings file {preferences_path()} {preferences.unreadable}; it is left as it is, and nothing is "
            f"remembered until it is fixed or removed."
        )
    if preferences.problem:
        print(f"acetui: {preferences.problem}", file=sys.stderr)
    for name, value in values.items():
        setattr(preferences, name, value)
    save(preferences)
    return preferences
