"""The typed records of a run, end to end: the pipeline emits them, the store persists them (as JSON of
these very shapes), and the CLI, the app and the exports read them by attribute.

They are plain dataclasses of JSON-friendly values. ``to_dict`` gives the JSON shape (what
``acetui prune --json`` prints); ``from_dict`` reads it back, validated, through pydantic, so a stored
record that does not fit its type is refused as damaged instead of failing later in a screen.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

from acetui_core.run.config import RunConfig
from acetui_core.run.experts import Experts, ExpertsRemoved


@dataclass
class Spread:
    """Minimum, median and maximum of a per-column statistic."""

    min: float
    median: float
    max: float


@dataclass
class ActStats:
    """Per-column statistics of a linear's calibration inputs: ``E[x^2]`` and ``Var[x^2] = E[x^4] - E[x^2]^2``."""

    x2_mean: Spread
    x2_var: Spread | None = None  # None in runs recorded before acetui 0.1 kept it


@dataclass
class Histogram:
    """Scores of one linear, binned; ``log`` when the edges are log-spaced (scores spanning decades)."""

    edges: list[float]
    counts: list[int]
    threshold: float | None  # the score below which weights were pruned (per-row groups: the median row cut-off;
    #                          None for N:M, which has no single threshold)
    log: bool
    stride: int = 1  # counts are of every stride-th score (1: all of them)
    pruned: list[int] | None = (
        None  # of ``counts``, the pruned scores per bin (None in runs recorded before it was kept)
    )


@dataclass
class Fidelity:
    """How close pruned outputs stay to the dense ones over the calibration tokens (Frobenius norms over
    tokens and output features): ``cosine`` of the two output matrices and ``rel_error =
    ||Y - Y'|| / ||Y||``. For a linear ``Y = WX`` and ``Y' = W'X`` on the inputs it saw in the dense
    layer (bias left out); for a decoder layer, its output hidden states, dense and pruned layer on the
    same inputs."""

    cosine: float
    rel_error: float


@dataclass
class Refinement:
    """What ``--refine dsnot`` did to one linear's mask (``acetui_core.pruning.dsnot``): the swaps it made and the
    error it minimizes before and after, ``||e|| / ||W mu||`` (``e_r``: the change of row ``r``'s expected
    output over the calibration inputs; ``W mu``: the dense expected output)."""

    swaps: int
    error_before: float
    error_after: float


@dataclass
class MaskChoice:
    """How a scoring method's mask was chosen for one linear: the share of the score it keeps (kept score
    over total score, before any refinement), the same share without ``--permute``, the input order its
    N:M groups were taken in (``acetui_core.scores.permute``), and the DSnoT refinement."""

    retained: float
    retained_unpermuted: float | None = None  # only with --permute
    permutation: list[int] | None = None  # only with --permute: group k*M..k*M+M-1 holds these inputs
    refinement: Refinement | None = None  # only with --refine dsnot


@dataclass
class LinearRecord:
    name: str  # e.g. "self_attn.q_proj"
    d_out: int
    d_in: int
    sparsity: float  # achieved fraction of zeros
    seconds: float
    act_stats: ActStats | None = None  # None when the method reads no activations (magnitude)
    histogram: Histogram | None = None  # None when the method solves rather than scores (SparseGPT)
    fidelity: Fidelity | None = None  # None without --fidelity, or without calibration data (magnitude)
    choice: MaskChoice | None = None  # None for methods that solve rather than score (SparseGPT)
    kind: str | None = (
        None  # attention, mlp, experts or shared_experts (``acetui_core.modeling.layouts``); None before 0.2
    )
    tokens: int | None = None  # calibration tokens behind its statistics (an expert: those routed to it)

    @property
    def size(self) -> int:
        return self.d_out * self.d_in


def linear_kind(name: str) -> str:
    """A linear's short kind: ``self_attn.q_proj`` -> ``q``, ``mlp.down_proj`` -> ``down``, ``fc1`` -> ``fc1``."""
    return name.rsplit(".", 1)[-1].removesuffix("_proj")


@dataclass
class LayerRecord:
    """One pruned decoder layer: its linears, and when the store recorded it."""

    index: int
    total: int | None  # decoder layers in the model
    seconds: float
    linears: list[LinearRecord]
    recorded: float | None = None
    fidelity: Fidelity | None = None  # of the layer's output hidden states (see ``Fidelity``)
    experts: Experts | None = None  # a mixture-of-experts layer's token load and fallbacks

    @property
    def sparsity(self) -> float | None:
        """Zeros over weights across the layer's linears."""
        size = sum(linear.size for linear in self.linears)
        return sum(linear.sparsity * linear.size for linear in self.linears) / size if size else None

    @property
    def line(self) -> str:
        """The one line a pruned layer gets in a run's log, ``acetui prune``'s output and ``runs watch``.

        Layers are numbered from 0 everywhere, as stored and as in the model's modules (``model.layers.0``);
        ``k/N done`` counts layers."""
        done = f" ({self.index + 1}/{self.total} done)" if self.total else ""
        sparsity = "-" if self.sparsity is None else f"{self.sparsity:.4f}"
        return (
            f"layer {self.index} pruned{done}: {len(self.linears)} linears, sparsity {sparsity}, {self.seconds:.2f} s"
        )


@dataclass
class LinearSparsity:
    """The sparsity one linear reached: the per-linear summary a result carries."""

    layer: int
    name: str
    sparsity: float
    seconds: float
    kind: str | None = None  # see ``LinearRecord.kind``
    weights: int | None = None  # its number of weights (None in runs recorded before 0.2)


def parameters_removed(linears: list[LinearSparsity], removed: ExpertsRemoved | None, masked: bool) -> int:
    """Parameters a run took from the model: the zeros of each weight its mask covered (``masked``: the run
    had a mask; its sparsity was counted on the weight itself, and a weight already zero in the dense model
    counts as its mask's, as it would in a removed expert), and the parameters of the experts
    ``--expert-sparsity`` removed."""
    zeros = sum(round(linear.sparsity * linear.weights) for linear in linears if linear.weights) if masked else 0
    return zeros + (removed.parameters_removed if removed is not None else 0)


def kind_sparsity(linears: list[LinearSparsity]) -> dict[str, float]:
    """Zeros over weights per kind of projection (attention, mlp, experts, shared_experts), weighted by size."""
    zeros: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for linear in linears:
        if linear.kind is None or not linear.weights:
            continue
        zeros[linear.kind] = zeros.get(linear.kind, 0.0) + linear.sparsity * linear.weights
        sizes[linear.kind] = sizes.get(linear.kind, 0) + linear.weights
    return {kind: zeros[kind] / sizes[kind] for kind in sizes}


@dataclass
class LayerAllocation:
    """A decoder layer's share of the sparsity under ``--allocation owl``."""

    layer: int
    outlier_ratio: float  # share of the layer's scores above M x their mean (OWL)
    sparsity: float  # the target this layer was pruned to


@dataclass
class Calibration:
    """The calibration data a run used."""

    source: str  # a local file, or the hub dataset
    nsamples: int
    seqlen: int  # the window length in tokens ("full" resolved against the model's context)
    seed: int
    tokens_per_linear: int = 0
    # the content of each source file (``sample_identity``: SHA-256 starts joined by "+"; runs recorded before
    # 2026-11-24 kept size and modification time)
    fingerprint: str | None = None


@dataclass
class TaskAccuracy:
    """One zero-shot task as lm-evaluation-harness scored it."""

    acc: float | None
    acc_stderr: float | None
    acc_norm: float | None  # None for tasks the harness scores by acc only
    acc_norm_stderr: float | None
    n: int  # examples scored
    total: int  # examples in the task
    partial: bool  # cut short by --limit
    source: str  # a local file, or "hub"
    note: str | None = None  # how the local copy differs from the hub's


@dataclass
class WindowLosses:
    """The per-window loss of one perplexity evaluation, in window order: what a paired test of two runs
    evaluated on the same windows needs. A window's ``nll`` is its mean next-token loss times ``tokens``
    (Wanda's convention), so ``exp(sum(nll) / sum(tokens))`` is the run's perplexity."""

    dataset: str  # "wikitext2"
    split: str  # "test"
    seqlen: int  # window length in tokens
    limit: int | None  # --eval-limit: the first N windows only
    nll: list[float]
    tokens: list[int]

    def damage(self) -> str | None:
        """What makes this record unusable for a test (a damaged or edited store), or None when it is whole."""
        if len(self.nll) != len(self.tokens) or not self.nll:
            return f"{len(self.nll)} losses for {len(self.tokens)} windows"
        if not all(math.isfinite(n) for n in self.nll):  # not a number at all raises: "it cannot be read"
            return NOT_FINITE
        empty = [t for t in self.tokens if not isinstance(t, (int, float)) or not t > 0]
        if empty:
            return f"a window of {empty[0]} tokens"
        return None


# A window whose loss is infinite or NaN: the model's output, not the record, is at fault (a model pruned to
# noise, a float16 overflow); no test can be made on it.
NOT_FINITE = "a loss that is infinite or NaN"


@dataclass
class TaskOutcomes:
    """Per-example correctness of one zero-shot task (0/1 per document), as lm-evaluation-harness scored it."""

    task: str
    lm_eval: str  # the harness's version
    limit: int | None  # --limit: the first N documents only
    doc_ids: list[int]
    acc: list[int]
    acc_norm: list[int] | None  # None for tasks the harness scores by acc only

    def damage(self) -> str | None:
        """What makes this record unusable for a test (a damaged or edited store), or None when it is whole."""
        if len(self.acc) != len(self.doc_ids) or not self.acc:
            return f"{len(self.acc)} outcomes for {len(self.doc_ids)} documents"
        if any(a not in (0, 1) for a in self.acc):
            return "an outcome that is neither 0 nor 1"
        return None


@dataclass
class RunResult:
    """What a finished run measured: the object ``acetui prune --json`` prints."""

    model: str
    method: str
    label: str  # the paper's row name, e.g. "CosP+VarP-16"
    sparsity: str
    group: str
    # The fields below are always set by this acetui; None only in results recorded by early versions.
    layers: list[LinearSparsity] = field(default_factory=list)
    overall_sparsity: float | None = None
    prune_seconds: float | None = None  # first calibration forward pass to last mask
    calibration: Calibration | None = None  # None for methods without calibration data (magnitude)
    device: str | None = None
    dtype: str | None = None
    ppl_wikitext2: float | None = None
    ppl_windows: int | None = None  # windows evaluated
    ppl_partial: bool = False  # fewer windows than the test set holds (--eval-limit)
    ppl_seqlen: int | None = None  # evaluation window length
    # the WikiText-2 test text evaluated (``wikitext2_test_identity``); None in runs recorded before acetui kept it
    ppl_text: str | None = None
    zeroshot: dict[str, TaskAccuracy] | None = None
    # What a test of a difference needs; the store keeps them apart from the result (``Store.evidence``),
    # so a run read from the store has None here. None also in runs recorded before acetui kept them.
    window_losses: WindowLosses | None = None
    task_outcomes: dict[str, TaskOutcomes] | None = None
    peak_rss_mb: float | None = None  # the whole run's high-water marks, evaluation included
    peak_gpu_mb: float | None = None
    # The marks as the last mask was set, before saving and evaluating: what the method cost, which a table's
    # cost columns compare (a run that also scored zero-shot tasks pruned at the same cost). None in runs
    # recorded before 2026-12-07, whose whole-run marks stand in for them.
    prune_peak_rss_mb: float | None = None
    prune_peak_gpu_mb: float | None = None
    saved_to: str | None = None
    model_fingerprint: str | None = None  # identity of the model's files (or the hub revision)
    masks: str | None = None  # the file of the run's masks (--keep-masks; ``acetui_core.scores.maskfile``)
    method_fingerprint: str | None = None  # a plug-in metric's file: its SHA-256
    allocation: list[LayerAllocation] | None = None  # per-layer targets under --allocation owl
    kinds: dict[str, float] | None = None  # sparsity per kind of projection (``kind_sparsity``)
    experts: Experts | None = None  # a mixture-of-experts model's calibration and token load
    experts_removed: ExpertsRemoved | None = None  # --expert-sparsity: what the removal saved
    # Parameters the run took from the model: the zeros its masks left, counted on each pruned weight, plus
    # the removed experts' parameters (from the checkpoints' files once saved). None before acetui kept it.
    parameters_removed: int | None = None
    config: RunConfig | None = None
    run_id: str | None = None

    @property
    def zeroshot_partial(self) -> bool:
        return any_partial(self.zeroshot or {})

    @property
    def zeroshot_mean(self) -> float | None:
        return mean_accuracy(self.zeroshot) if self.zeroshot else None


@dataclass
class ZeroshotReport:
    """What ``acetui eval --json`` prints: zero-shot accuracy of a model as it is (no pruning)."""

    model: str
    family: str
    device: str
    dtype: str
    limit: int | None
    batch_size: int
    zeroshot: dict[str, TaskAccuracy]
    mean_acc: float
    eval_seconds: float


def mean_accuracy(tasks: dict[str, TaskAccuracy]) -> float:
    """The paper's summary: the plain mean of ``acc`` over the evaluated tasks; NaN where a task has none
    (the harness scored it otherwise): no accuracy, never a 0."""
    if not tasks:
        raise ValueError("no zero-shot results to average")
    return sum(task_accuracy(task) for task in tasks.values()) / len(tasks)


def task_accuracy(task: TaskAccuracy) -> float:
    return task.acc if task.acc is not None else math.nan


def any_partial(tasks: dict[str, TaskAccuracy]) -> bool:
    """Whether any task was cut short by ``--limit``."""
    return any(task.partial for task in tasks.values())


def zeroshot_text(tasks: dict[str, TaskAccuracy]) -> str:
    """``mean 0.5167 (partial): arc_easy 0.600, rte 0.400``: the accuracies as a run's summary lines say them."""
    partial = " (partial)" if any_partial(tasks) else ""
    return f"mean {mean_accuracy(tasks):.4f}{partial}: " + ", ".join(f"{t} {e.acc:.3f}" for t, e in tasks.items())


def to_dict(record) -> dict:
    """The JSON shape of a record."""
    return dataclasses.asdict(record)


def from_dict(cls, data):
    """Read a record of type ``cls`` back from its JSON shape; ``pydantic.ValidationError`` when it does not fit."""
    return _adapter(cls).validate_python(data)


@functools.cache
def _adapter(cls):
    from pydantic import TypeAdapter  # imported on first use: most commands never read a record

    return TypeAdapter(cls)
