"""The records of a mixture-of-experts model's run (part of ``acetui_core.run.records``): the calibration
tokens the router sent each expert, the experts that fell back to every token, and what
``--expert-sparsity`` scored, removed and saved."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ExpertLoad:
    """The calibration tokens the router sent to each expert of one MoE layer."""

    layer: int
    experts: str  # the experts module in the layer, e.g. "mlp.experts"
    tokens: list[int]  # per expert, in index order


@dataclass
class ExpertFallback:
    """An expert whose routed tokens were too few (``acetui_core.modeling.routing``): its statistics came from every
    calibration token instead."""

    layer: int
    expert: str  # its experts module and index, e.g. "mlp.experts.3"
    tokens: int  # routed tokens it received
    min_tokens: int  # the threshold it fell under

    def sentence(self) -> str:
        return (
            f"Layer {self.layer} {self.expert} received {self.tokens} calibration token(s), fewer than "
            f"{self.min_tokens}; its statistics come from all calibration tokens instead (--moe-calibration all "
            f"for this expert)."
        )


@dataclass
class ExpertRemoval:
    """``--expert-sparsity`` in one MoE layer: every routed expert's score and which were removed, numbered
    as in the dense model."""

    layer: int
    experts: str  # the experts module in the layer, e.g. "mlp.experts"
    score: str  # --expert-score: reap or frequency
    scores: list[float]  # per expert, in index order
    removed: list[int]


@dataclass
class ExpertsRemoved:
    """What ``--expert-sparsity`` saved, counted from the checkpoints' files (or, unsaved, from the model in
    memory before and after)."""

    fraction: float
    score: str
    kept: list[int]  # routed experts kept per MoE layer, in layer order
    parameters_before: int
    parameters_after: int
    bytes_before: int | None = None  # the source's safetensors files; None for a GGUF or hub source
    bytes_after: int | None = None  # the --save folder's safetensors files; None unsaved
    counted_from: str = "memory"  # "saved checkpoint" when the parameters come from the saved files

    @property
    def parameters_removed(self) -> int:
        return self.parameters_before - self.parameters_after


@dataclass
class Experts:
    """How a mixture-of-experts model was calibrated and where its tokens went."""

    layout: str  # how its experts are stored, e.g. "fused 3-D [experts, d_out, d_in]"
    calibration: str  # --moe-calibration: routed or all
    load: list[ExpertLoad] = field(default_factory=list)
    fallbacks: list[ExpertFallback] = field(default_factory=list)
    removal: list[ExpertRemoval] = field(default_factory=list)  # --expert-sparsity: scores and removed experts

    def of_layer(self, index: int) -> Experts | None:
        """What decoder layer ``index`` contributed (recorded with the layer, so it shows while the run
        goes on); None for a layer without experts."""
        load = [entry for entry in self.load if entry.layer == index]
        removal = [entry for entry in self.removal if entry.layer == index]
        if not load and not removal:
            return None
        fallbacks = [f for f in self.fallbacks if f.layer == index]
        return Experts(self.layout, self.calibration, load, fallbacks, removal)

    @staticmethod
    def joined(parts: list[Experts]) -> Experts | None:
        """The layers' contributions as one record (the run's so far); None when there is none."""
        if not parts:
            return None
        return Experts(
            parts[0].layout,
            parts[0].calibration,
            [entry for part in parts for entry in part.load],
            [fallback for part in parts for fallback in part.fallbacks],
            [removal for part in parts for removal in part.removal],
        )
