"""Temporary folders named after the process that owns them, so that a later process can remove the
ones a killed run left behind, and only those: a folder whose owner still runs (or runs on another host,
whose processes this machine cannot see) is never touched."""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
from pathlib import Path

import psutil

from acetui_core.storage.liveness import HOST, process_alive

_OWNER = re.compile(r"(?P<host>[^@]*)@(?P<pid>[0-9]+)@(?P<started>[0-9]+)@")


def owned_tempdir(prefix: str, folder: Path | str | None = None, mode: int = 0o700) -> Path:
    """A new temporary folder in ``folder`` (the system's by default) whose name says which process made
    it; ``mode`` goes through the umask as for any new folder (0o777: the permissions a user's own
    ``mkdir`` would give)."""
    me = psutil.Process()
    owner = f"{prefix}{HOST}@{me.pid}@{round(me.create_time() * 1000)}@"
    root = Path(folder) if folder is not None else Path(tempfile.gettempdir())
    while True:
        path = root / (owner + secrets.token_hex(4))
        try:
            path.mkdir(mode=mode)
            return path
        except FileExistsError:
            continue


def sweep(prefix: str, folder: Path | str | None = None) -> list[Path]:
    """Remove the temporary folders of ``prefix`` in ``folder`` whose owning process on this host is gone;
    returns them. Folders without an owner in their name (older versions) are left alone."""
    root = Path(folder) if folder is not None else Path(tempfile.gettempdir())
    try:
        entries = [entry for entry in root.iterdir() if entry.name.startswith(prefix) and entry.is_dir()]
    except OSError:  # a folder that is gone or unreadable holds nothing of ours to sweep
        return []
    removed = []
    for entry in entries:
        owner = _OWNER.match(entry.name, len(prefix))
        if owner is None or owner["host"] != HOST:
            continue
        if not process_alive(int(owner["pid"]), int(owner["started"]) / 1000):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
