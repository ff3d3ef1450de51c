"""Running a configuration as a recorded run. (First version: runs the pipeline directly; the run store
replaces this body.)"""

from __future__ import annotations

from core import pipeline
from core.config import RunConfig


def run_recorded(config: RunConfig, on_event=None, store=None) -> dict:
    return pipeline.run(config, on_event)
