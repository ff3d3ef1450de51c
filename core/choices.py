"""The closed sets of names the engine gives values: a run's state (``RunStatus``). Each is a ``StrEnum``:
its members are the plain strings stored in the database and JSON and printed by the CLI, and they
compare equal to those strings, so code names a value by its member and a typo fails at import."""

from __future__ import annotations

import enum


class StrEnum(str, enum.Enum):
    """``enum.StrEnum`` (Python 3.11), kept here while acetui supports 3.10: ``str()`` and f-strings give
    the member's value, not ``Class.MEMBER``."""

    def __str__(self) -> str:
        return str(self.value)


class RunStatus(StrEnum):
    """Where a run stands. ``queued`` and ``running`` are active; the other four are its end."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
