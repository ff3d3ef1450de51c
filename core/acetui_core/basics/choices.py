"""The closed sets of names the engine gives values: a run's state (``RunStatus``), the values of the run
settings that take one of a few names (``--offload``, ``--update``, ...; the table in
``acetui_core.run.config`` offers them as its choices), the executors and the progress stages. Each is a
``StrEnum``: its members are the plain strings stored in the database and JSON and printed by the CLI,
and they compare equal to those strings, so code names a value by its member and a typo fails at
import."""

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


class SparsityGroup(StrEnum):
    """``--group``: which weights compete for unstructured sparsity."""

    ROW = "row"
    LAYER = "layer"


class EvalKind(StrEnum):
    """``--eval``: what a run measures after pruning."""

    WIKITEXT2 = "wikitext2"
    ZEROSHOT = "zeroshot"


class Dtype(StrEnum):
    """``--dtype``: the weights' precision; ``auto`` picks by device (``models.resolve_dtype``)."""

    AUTO = "auto"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


class Offload(StrEnum):
    """``--offload``: whether decoder layers stream from the checkpoint's shards."""

    AUTO = "auto"
    NONE = "none"
    DISK = "disk"


class VarpScale(StrEnum):
    """``--varp-scale``: what VarP divides a linear's inputs by."""

    NONE = "none"
    RMS = "rms"
    MAX = "max"


class VarpForm(StrEnum):
    """``--varp-form``: VarP's ``V_j`` as the truncated series or the paper's inverse."""

    SERIES = "series"
    INVERSE = "inverse"


class Allocation(StrEnum):
    """``--allocation``: the layers' sparsities, uniform or OWL's."""

    UNIFORM = "uniform"
    OWL = "owl"


class OwlMean(StrEnum):
    """``--owl-mean``: the mean OWL's layer sparsities are centred on."""

    PLAIN = "plain"  # OWL's code (np.mean over the layers)
    WEIGHTED = "weighted"  # each layer weighed by its masked parameters: the overall sparsity is the target


class Update(StrEnum):
    """``--update``: what follows the mask, nothing or SparseGPT's OBS update."""

    NONE = "none"
    OBS = "obs"


class Permute(StrEnum):
    """``--permute``: the input order an N:M mask's groups are taken in."""

    NONE = "none"
    GREEDY = "greedy"
    LSA = "lsa"


class Refine(StrEnum):
    """``--refine``: weight swaps after the mask."""

    NONE = "none"
    DSNOT = "dsnot"


class DSnoTSkip(StrEnum):
    """``--dsnot-skip``: the linears DSnoT leaves as the mask chose them (the reference's ``--skip_layer``)."""

    MLP = "mlp"  # every linear outside attention: the reference code's default
    ATTENTION = "attention"
    NONE = "none"


class DSnoTAccept(StrEnum):
    """``--dsnot-accept``: which of DSnoT's swaps are made."""

    THRESHOLD = "threshold"  # the reference's: while |e_r| exceeds the update threshold (N:M: and keeps its sign)
    DECREASE = "decrease"  # only a swap that lowers |e_r|


class DSnoTPruneScore(StrEnum):
    """``--dsnot-prune-score``: what ranks the kept weights DSnoT may prune in an unstructured mask."""

    WANDA = "wanda"  # the reference's, whatever metric chose the mask
    METRIC = "metric"  # the run's own metric


class ExpertScore(StrEnum):
    """``--expert-score``: how ``--expert-sparsity`` ranks a layer's routed experts (docs/moe.md)."""

    REAP = "reap"
    FREQUENCY = "frequency"


EXPERT_SCORE_NAMES: dict[str, str] = {ExpertScore.REAP: "REAP", ExpertScore.FREQUENCY: "Frequency"}  # a row names them


class SparsityScope(StrEnum):
    """``--sparsity-scope``: which projections the mask of ``--sparsity`` covers (docs/moe.md)."""

    ALL = "all"
    EXPERTS = "experts"


class MoeCalibration(StrEnum):
    """``--moe-calibration``: which tokens calibrate an expert."""

    ROUTED = "routed"
    ALL = "all"


class ExecutorKind(StrEnum):
    """``--executor``: where runs execute (what the store records of each run)."""

    LOCAL = "local"
    SLURM = "slurm"


class StageName(StrEnum):
    """The long steps outside the layer loop that a ``Stage`` event names, besides zero-shot's
    ``zeroshot:<task>`` (one per task)."""

    LOAD = "load"
    CALIBRATION = "calibration"
    OUTLIER_RATIOS = "outlier ratios"
    WIKITEXT2 = "wikitext2"
