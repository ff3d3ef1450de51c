"""Typed progress events the pipeline hands to a callback; it knows nothing of who listens.

Every event is a plain dataclass of JSON-friendly values (``acetui_core.run.records``), so a store or a job
folder can persist it and a UI can render it without the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from acetui_core.run import records
from acetui_core.run.records import LayerRecord, RunResult


@dataclass
class RunStarted:
    model: str
    method: str
    sparsity: str
    num_layers: int
    device: str  # e.g. "cuda:0"
    device_name: str = ""  # the hardware, e.g. "NVIDIA H100 80GB HBM3"


@dataclass
class Stage:
    """A named long step outside the layer loop: loading, calibration data, evaluation."""

    name: str  # a StageName (acetui_core.basics.choices), or "zeroshot:<task>"
    done: int
    total: int | None


@dataclass
class LayerStarted:
    index: int
    total: int


@dataclass
class LayerPruned:
    layer: LayerRecord


@dataclass
class RunFinished:
    result: RunResult


Event: TypeAlias = RunStarted | Stage | LayerStarted | LayerPruned | RunFinished
OnEvent: TypeAlias = Callable[[Event], None]  # hears one run's events
OnRunEvent: TypeAlias = Callable[[str, Event], None]  # hears the events of several runs: (run id, event)

EVENTS: dict[str, type[Event]] = {
    cls.__name__: cls for cls in (RunStarted, Stage, LayerStarted, LayerPruned, RunFinished)
}


def event_to_dict(event: Event) -> dict:
    """An event as one JSON object, tagged with its type (a job folder's events file holds one per line)."""
    return {"event": type(event).__name__, **records.to_dict(event)}


def event_from_dict(data: dict) -> Event:
    data = dict(data)
    return records.from_dict(EVENTS[data.pop("event")], data)
