"""Where the app puts what it exports, and whether a copy to the clipboard can reach the terminal.

Exports go to one documented folder, never the working directory (often a git checkout):
``$ACETUI_EXPORT_DIR``, else the ``export_dir`` setting, else ``acetui`` in the user's documents folder
(platformdirs: ``~/Documents/acetui`` on Linux and macOS). Notices name the full path. The working folder
and the run store's folder are refused as export folders (``refused_folders``), as is any folder the runs
keep or read their files in (``Store.protected_places``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import file_in_the_way, user_path

EXPORT_DIR_ENV = "ACETUI_EXPORT_DIR"
EXPORT_DIR_ADVICE = f"choose another one (${EXPORT_DIR_ENV}, or export_dir in settings.json)."
TMUX_CLIPBOARD_HINT = "tmux passes a copy to your terminal only with `set -g set-clipboard on` in ~/.tmux.conf"


def export_dir(setting: str | None = None) -> Path:
    """The export folder, absolute (see the module docstring for the order); UserError for a path
    naming an unknown user (``~nouser/...``)."""
    chosen = os.environ.get(EXPORT_DIR_ENV) or setting
    if not chosen:
        import platformdirs

        return platformdirs.user_documents_path() / "acetui"
    return user_path(chosen).absolute()


def make_export_dir(setting: str | None = None) -> Path:
    """``export_dir(setting)``, made if missing; UserError in a sentence when it, or a folder above it, is a
    file (``$ACETUI_EXPORT_DIR`` set to the run store or a log): ``mkdir`` said ``[Errno 17] File exists``."""
    folder = export_dir(setting)
    place = file_in_the_way(folder)
    if place is not None:
        if os.environ.get(EXPORT_DIR_ENV):
            named = f"{EXPORT_DIR_ENV}={folder}"
        else:
            named = f"{folder} (export_dir in settings.json)" if setting else str(folder)
        what = "is a file" if place == folder else f"is under {place}, a file"
        raise UserError(f"The export folder {named} {what}, not a folder; {EXPORT_DIR_ADVICE}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def home_short(path: Path) -> str:
    """``path`` with ``~`` for the user's home, as a notice shows it."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


def refused_folders(store_folder: Path) -> list[tuple[Path, str]]:
    """The folders no export is saved in (a folder under them is fine): the working folder, often a git
    checkout, and the run store's folder, beside its database."""
    return [(Path.cwd(), "the working folder"), (store_folder, "the run store's folder")]


def tmux_drops_clipboard(environ=os.environ) -> bool:
    """Inside tmux, whether an application's OSC 52 copy is dropped: tmux forwards it only when its
    ``set-clipboard`` option is ``on`` (the default, ``external``, keeps it from applications)."""
    if not environ.get("TMUX"):
        return False
    try:
        answer = subprocess.run(
            ["tmux", "show-options", "-gv", "set-clipboard"], capture_output=True, text=True, timeout=2, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return True  # cannot ask: assume the default
    return answer.stdout.strip() != "on"
