"""The app in a real terminal: a tmux session of a given size running ``acetui``, keys sent to it the way
SSH delivers them (one ``send-keys`` call: one read), and the screen read back as text
(``capture-pane``). Pilot waits for the app between keys, so it never shows what a burst of keys does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """``acetui --store STORE`` in a detached tmux session of ``width`` x ``height``, on its own tmux server."""

    def __init__(self, store: Path, home: Path, size: tuple[int, int] = (80, 24), env: dict | None = None) -> None:
        self.socket = f"acetui-test-{uuid.uuid4().hex[:8]}"
        self.session = "app"
        width, height = size
        inherited = {name: value for name, value in os.environ.items() if name not in ("TMUX", "NO_COLOR")}
        environment = {**inherited, "TERM": "xterm-256color", **(env or {})}
        command = f"{sys.executable} -m acetui --store {store}"
        subprocess.run(
            [
                "tmux",
                "-L",
                self.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                self.session,
                "-x",
                str(width),
                "-y",
                str(height),
                command,
            ],
            check=True,
            env=environment,
            cwd=home,
        )

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True)
        return done.stdout

    def keys(self, *keys: str) -> None:
        """``keys`` (tmux's names: ``BSpace``, ``End``, ``C-u``, or text) in one ``send-keys``: one read."""
        self.tmux("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session)

    def wait_for(self, shown: Callable[[str], bool] | str, what: str, timeout: float = 120) -> str:
        """The screen once ``shown`` (a predicate of its text, or a string it contains) holds."""
        check = shown if callable(shown) else lambda text: shown in text
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if check(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not shown within {timeout} s; the screen:\n{text}")
            time.sleep(0.1)

    def app_pid(self) -> int:
        """The process of ``acetui`` (tmux starts it through a shell, which may or may not exec it)."""
        shell = int(self.tmux("display-message", "-p", "-t", self.session, "#{pane_pid}"))
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        return int(children[0]) if children else shell

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
