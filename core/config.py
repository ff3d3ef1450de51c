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
    fidelity: bool = False  # record each linear's and layer's output fidelity (``acetui_core.fidelity``)
    keep_masks: bool = False  # keep the run's masks, one bit per weight (``acetui_core.maskfile``)
    varp_scale: str = "none"  # VarP's activations divided per linear input by: none, rms or max (|x|)
    varp_form: str = "series"  # V_j as 1 + E[x^2] + E[x^4] ("series") or the paper's E[1/(1 - x^2)] ("inverse")
    allocation: str = "uniform"  # per-layer sparsity: the target everywhere, or OWL's outlier-weighted spread
    owl_lambda: float = 0.08  # OWL: layer sparsities lie within target +- lambda
    owl_m: float = 5.0  # OWL: a score is an outlier above M x its decoder layer's mean score
    update: str = "none"  # after the mask: "obs" updates the kept weights by SparseGPT's OBS reconstruction
    permute: str = "none"  # N:M only: input channels reordered before the mask ("greedy" or "lsa"; acetui_core.permute)
    refine: str = "none"  # after the mask, before any update: "dsnot" swaps weights (acetui_core.dsnot)
    dsnot_cycles: int = 50  # DSnoT: at most this many swaps per row
    dsnot_threshold: float = 0.1  # DSnoT: a row stops refining once its expected-output error is this small
    dsnot_var_power: float = 1.0  # DSnoT: the power of the input variance dividing a weight's growth key
    moe_calibration: str = "routed"  # an expert's statistics: the tokens its router sends it, or "all" tokens
    save: str | None = None  # folder for the pruned Hugging Face checkpoint
    overwrite: bool = False  # allow ``save`` into a non-empty folder

    @property
    def sparsity_spec(self) -> Sparsity:
        return parse_sparsity(self.sparsity)

    @property
    def label(self) -> str:
        """The paper's row name: method and calibration length, e.g. ``ACE-16`` or ``Wanda-FL``."""
        from acetui_core.metrics import paper_name

        length = "FL" if self.seqlen == "full" else str(self.seqlen)
        name = paper_name(self.method)
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
