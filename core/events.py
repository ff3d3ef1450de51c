"""Typed progress events the pipeline hands to a callback; it knows nothing of who listens.

Every event is a plain dataclass of JSON-friendly values, so a store can persist it and a UI
can render it without the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Histogram:
    """Scores of one linear, binned; ``log`` when the edges are log-spaced (scores spanning decades)."""

    edges: list[float]
    counts: list[int]
    threshold: float | None  # the score below which weights were pruned (None for N:M and SparseGPT)
    log: bool
    stride: int = 1  # counts are of every stride-th score (1: all of them)


@dataclass
class LinearRecord:
    name: str  # e.g. "self_attn.q_proj"
    d_out: int
    d_in: int
    sparsity: float  # achieved fraction of zeros
    seconds: float
    # Summary of per-column activation statistics E[x^2] and Var[x^2] over calibration tokens:
    # {"x2_mean": {"min":..,"median":..,"max":..}, "x2_var": {...}}
    act_stats: dict = field(default_factory=dict)
    histogram: Histogram | None = None


@dataclass
class RunStarted:
    model: str
    method: str
    sparsity: str
    num_layers: int
    device: str


@dataclass
class Stage:
    """A named long step outside the layer loop: loading, calibration data, evaluation."""

    name: str  # "load", "calibration", "capture", "wikitext2", "zeroshot:<task>"
    done: int
    total: int | None


@dataclass
class LayerStarted:
    index: int
    total: int


@dataclass
class LayerPruned:
    index: int
    total: int
    seconds: float
    linears: list[LinearRecord]


@dataclass
class RunFinished:
    result: dict  # the same object ``acetui prune --json`` prints
