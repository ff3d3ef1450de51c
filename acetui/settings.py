"""The user's remembered choices: the theme, the notification, the last New run values.

One small JSON file, ``settings.json`` in the user config folder (platformdirs), or in
``$ACETUI_CONFIG_DIR`` when set. A missing file means defaults; an unreadable one also means defaults,
with ``problem`` saying why (shown once, and the file is rewritten on the next save).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from acetui_core.errors import UserError
from acetui_core.paths import user_path, write_text_atomic

CONFIG_DIR_ENV = "ACETUI_CONFIG_DIR"
FILENAME = "settings.json"


def settings_path() -> Path:
    folder = os.environ.get(CONFIG_DIR_ENV)
    if folder:
        return user_path(folder) / FILENAME
    import platformdirs

    return Path(platformdirs.user_config_dir("acetui", appauthor=False)) / FILENAME


@dataclass
class Settings:
    theme: str | None = None  # None: dark (ansi under NO_COLOR)
    notify: str = "osc"  # how a run's end is announced in the terminal: bell, osc (bell + OSC 9/777) or none
    new_run: dict = field(default_factory=dict)  # the New run form's values when a run was last started there
    plugins: list = field(default_factory=list)  # plug-in metrics (module:function, file.py:function) to list
    export_dir: str | None = None  # where the app saves exports (None: ~/Documents/acetui; see acetui.app.exports)
    problem: str | None = field(default=None, compare=False)  # why the file could not be read (not saved)


def load() -> Settings:
    path = settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings()
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else "it is not valid JSON"
        return Settings(problem=f"The settings file {path} could not be read ({reason}); using the defaults.")
    if not isinstance(data, dict):
        return Settings(problem=f"The settings file {path} does not hold a JSON object; using the defaults.")
    known = {f.name: data[f.name] for f in fields(Settings) if f.name in data and f.name != "problem"}
    settings = Settings(**known)
    if not isinstance(settings.new_run, dict):
        settings.new_run = {}
    if not isinstance(settings.plugins, list):
        settings.plugins = []
    return settings


def save(settings: Settings) -> None:
    """Write the settings (atomically: a crash never leaves half a file); ``UserError`` if the folder refuses."""
    path = settings_path()
    data = {k: v for k, v in asdict(settings).items() if k != "problem"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    except OSError as error:
        raise UserError(f"Cannot save the settings to {path}: {error.strerror or error}.") from None


def update(**values) -> Settings:
    """Load, change ``values``, save; returns the saved settings."""
    settings = load()
    for name, value in values.items():
        setattr(settings, name, value)
    save(settings)
    return settings
