"""A run's full configuration: everything needed to repeat it, serialisable to JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from acetui_core.sparsity import Sparsity, parse_sparsity

ZEROSHOT_TASKS = ("boolq", "rte", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "openbookqa")


@dataclass
class RunConfig:
    model: str
    method: str
    sparsity: str  # "0.5" or "2:4"; parsed by ``sparsity_spec``
    group: str = "row"  # which weights compete for unstructured sparsity: "row" or "layer"
    calib: str = "c4"  # "c4", "wikitext2" or a file path
    nsamples: int = 128
    seqlen: int | str = 16  # an int, or "full" (the model's context capped at FULL_CONTEXT_CAP)
    seed: int = 0
    evals: list[str] = field(default_factory=lambda: ["wikitext2"])  # any of "wikitext2", "zeroshot"
    eval_seqlen: int | None = None  # None: the model's context capped at FULL_CONTEXT_CAP
    eval_limit: int | None = None  # first N perplexity windows only
    tasks: list[str] = field(default_factory=lambda: list(ZEROSHOT_TASKS))
    zeroshot_limit: int | None = None  # examples per task
    batch_size: int = 8  # calibration windows per forward pass, and lm-eval's batch size
    device: str = "auto"
    dtype: str = "auto"
    offload: str = (
        "auto"  # decoder layers read from disk one at a time: "auto" (when the model would not fit), "none", "disk"
    )
    squared_weight: bool = False  # VarP/ACE variant: |W|^2 in place of |W| (ACE.md, appendix)
    ria_alpha: float = 0.5
    save: str | None = None  # folder for the pruned Hugging Face checkpoint
    overwrite: bool = False  # allow ``save`` into a non-empty folder

    @property
    def sparsity_spec(self) -> Sparsity:
        return parse_sparsity(self.sparsity)

    @property
    def label(self) -> str:
        """The paper's row name: method and calibration length, e.g. ``ACE-16`` or ``Wanda-FL``."""
        from acetui_core.metrics import METHODS

        length = "FL" if self.seqlen == "full" else str(self.seqlen)
        name = METHODS[self.method].paper_name if self.method in METHODS else self.method
        return name if self.method == "magnitude" else f"{name}-{length}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


FULL_CONTEXT_CAP = 4096


def model_name(model: str) -> str:
    """A short display name: the last component of a path or hub id, without ``.gguf``."""
    return model.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")
