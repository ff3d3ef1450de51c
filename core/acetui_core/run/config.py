"""A run's full configuration (everything needed to repeat it, serialisable to JSON), and the one table
of run settings.

Each field of ``RunConfig`` (the settings every run names come first, from ``BasicSettings`` in
``acetui_core.run.basic_settings``) is declared with ``setting(...)`` (``acetui_core.run.setting``): its
default, its help, its choices, its group in the New run form (basic or advanced), its parser
(``acetui_core.run.parsers``: the text a user typed to the value, or one sentence naming the option) and
whether it can change a result or is bookkeeping only. Everything else is made from this table
(``SETTINGS``): the options of ``acetui prune``, ``compare`` and ``sweep`` (``acetui.options``), the New
run form's fields, the checks of ``acetui_core.pruning.validate``, the comparison key and the words a row
label uses for a differing value (``acetui_core.analysis.rowlabels``) and the option list of docs/cli.md.
Adding a setting is one field here plus its effect in the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from acetui_core.basics.choices import (
    EXPERT_SCORE_NAMES,
    Allocation,
    DSnoTAccept,
    DSnoTPruneScore,
    DSnoTSkip,
    ExpertScore,
    MoeCalibration,
    OwlMean,
    Permute,
    Refine,
    SparsityGroup,
    SparsityScope,
    Update,
    VarpForm,
    VarpScale,
)
from acetui_core.run import parsers
from acetui_core.run.basic_settings import BasicSettings
from acetui_core.run.setting import Setting, setting, spec_of
from acetui_core.scores.sparsity import Sparsity, parse_sparsity


def _needing(setting_name: str, value: str) -> dict:
    """A setting that matters only when ``setting_name`` is ``value`` (a method's group of parameters)."""
    return {"needs": (setting_name, value), "group": "advanced"}


@dataclass
class RunConfig(BasicSettings):
    squared_weight: bool = setting(
        False,
        help="VarP/ACE variant with |W|^2 in place of |W| (ACE.md).",
        label="|W|^2",
        group="advanced",
        describe=lambda v: "|W|^2" if v else "|W|",
    )
    ria_alpha: float = setting(
        0.5,
        help="RIA: the power of the input norm in its score (the paper's a = 0.5).",
        label="RIA alpha",
        group="advanced",
        parse=parsers.number(minimum=0),  # a negative power would rank quiet inputs above loud ones
        describe=lambda v: f"alpha {v}",
    )
    fidelity: bool = setting(
        False,
        help="Record each linear's and layer's output fidelity (cosine, relative L2 error) on the calibration tokens.",
        label="Fidelity",
        group="advanced",
        flags=("--fidelity",),
        result=False,
    )
    keep_masks: bool = setting(
        False,
        help="Keep the run's masks beside the store (one bit per weight), for acetui overlap.",
        label="Keep masks",
        group="advanced",
        flags=("--keep-masks",),
        result=False,
    )
    varp_scale: str = setting(
        VarpScale.NONE,
        help="VarP's activations divided per linear input by: none, rms or max (|x|) (ACE.md).",
        label="VarP scale",
        group="advanced",
        choices=tuple(VarpScale),
        describe=lambda v: f"VarP scale {v}",
    )
    varp_form: str = setting(
        VarpForm.SERIES,
        help="VarP's V_j: series (1 + E[x^2] + E[x^4]) or inverse (the paper's E[1/(1 - x^2)]).",
        label="VarP form",
        group="advanced",
        choices=tuple(VarpForm),
        describe=lambda v: f"VarP {v}",
    )
    allocation: str = setting(
        Allocation.UNIFORM,
        help="Layer sparsities: uniform, or owl (outlier-weighted, Yin et al. 2024; ratios only).",
        label="Allocation",
        group="advanced",
        choices=tuple(Allocation),
        describe=lambda v: "OWL" if v == Allocation.OWL else "uniform",
    )
    owl_lambda: float = setting(
        0.08,
        help="OWL: the layer sparsities spread over a band 2 x lambda wide that averages the target.",
        label="OWL lambda",
        **_needing("allocation", Allocation.OWL),
        parse=parsers.number(minimum=0),
        describe=lambda v: f"OWL lambda {v:g}",
    )
    owl_m: float = setting(
        5.0,
        help="OWL: outlier = score above M x layer mean.",
        label="OWL M",
        **_needing("allocation", Allocation.OWL),
        parse=parsers.positive,
        describe=lambda v: f"OWL M {v:g}",
    )
    owl_mean: str = setting(
        OwlMean.PLAIN,
        help="OWL: the layer sparsities are centred on the target by the plain mean over the layers (plain, OWL's "
        "code) or by the mean weighted by each layer's masked parameters (weighted: the layer targets then give the "
        "target over all parameters, less each row's count rounded down as OWL's code does); the same where every "
        "layer is equal in size.",
        label="OWL mean",
        **_needing("allocation", Allocation.OWL),
        choices=tuple(OwlMean),
        describe=lambda v: f"OWL {v} mean",
    )
    update: str = setting(
        Update.NONE,
        help="After the mask: none, or obs (SparseGPT's OBS update of the kept weights).",
        label="Update",
        group="advanced",
        choices=tuple(Update),
        describe=lambda v: "OBS update" if v == Update.OBS else "no update",
    )
    permute: str = setting(
        Permute.NONE,
        help="N:M only: reorder each linear's input channels before the mask so its groups keep more score: "
        "none, greedy (RIA's reallocation) or lsa (greedy, then linear sum assignment; docs/methods.md).",
        label="Permute",
        group="advanced",
        choices=tuple(Permute),
        describe=lambda v: "no permutation" if v == Permute.NONE else f"{v} permutation",
    )
    permute_guard: bool = setting(
        False,
        help="With --permute: keep RIA's reallocation, and each assignment step of lsa, only where it keeps more "
        "score than the order before it (a variant: RIA's code always applies them).",
        label="Permute guard",
        group="advanced",
        describe=lambda v: "permutation kept if better" if v else "permutation always applied",
    )
    refine: str = setting(
        Refine.NONE,
        help="After the mask, before --update: none, or dsnot (DSnoT's weight swaps; docs/methods.md).",
        label="Refine",
        group="advanced",
        choices=tuple(Refine),
        describe=lambda v: "DSnoT" if v == Refine.DSNOT else "no refinement",
    )
    dsnot_cycles: int = setting(
        50,
        help="DSnoT: at most N swaps per row.",
        label="DSnoT cycles",
        **_needing("refine", Refine.DSNOT),
        parse=parsers.whole(1),
        metavar="N",
        describe=lambda v: f"DSnoT {v} cycles",
    )
    dsnot_threshold: float = setting(
        0.1,
        help="DSnoT: a row stops once its expected-output error is at most this.",
        label="DSnoT thresh",
        **_needing("refine", Refine.DSNOT),
        parse=parsers.number(minimum=0),
        describe=lambda v: f"DSnoT threshold {v:g}",
    )
    dsnot_var_power: float = setting(
        1.0,
        help="DSnoT: the power of the input variance dividing a weight's growth key.",
        label="DSnoT power",
        **_needing("refine", Refine.DSNOT),
        parse=parsers.number(minimum=0),
        describe=lambda v: f"DSnoT variance power {v:g}",
    )
    dsnot_skip: str = setting(
        DSnoTSkip.MLP,
        help="DSnoT: the linears it leaves unrefined: mlp (every one outside attention, the reference's "
        "default), attention, or none (refine every linear).",
        label="DSnoT skip",
        **_needing("refine", Refine.DSNOT),
        choices=tuple(DSnoTSkip),
        describe=lambda v: "DSnoT on every linear" if v == DSnoTSkip.NONE else f"DSnoT skips {v}",
    )
    dsnot_accept: str = setting(
        DSnoTAccept.THRESHOLD,
        help="DSnoT: the swaps it makes: threshold (the reference's: while the row's error exceeds the "
        "threshold and, for N:M, keeps its sign) or decrease (only swaps that lower the error).",
        label="DSnoT accept",
        **_needing("refine", Refine.DSNOT),
        choices=tuple(DSnoTAccept),
        describe=lambda v: f"DSnoT accepts by {v}",
    )
    dsnot_prune_score: str = setting(
        DSnoTPruneScore.WANDA,
        help="DSnoT, unstructured masks: the score ranking the kept weights to prune: wanda (the reference's) "
        "or metric (the run's own; N:M masks always use the run's metric, as the reference does).",
        label="DSnoT prune by",
        **_needing("refine", Refine.DSNOT),
        choices=tuple(DSnoTPruneScore),
        describe=lambda v: f"DSnoT prunes by {v}",
    )
    moe_calibration: str = setting(
        MoeCalibration.ROUTED,
        help="Mixture-of-experts models: each expert's statistics from the tokens its router sends it (routed), "
        "or from every calibration token (all).",
        label="MoE calib",
        group="advanced",
        choices=tuple(MoeCalibration),
        describe=lambda v: f"experts calibrated on {v} tokens",
    )
    expert_sparsity: float = setting(
        0.0,
        help="Mixture-of-experts models: remove this fraction of each MoE layer's routed experts (whole, before "
        "the mask prunes the rest; docs/moe.md). 0 removes none.",
        label="Experts removed",
        group="advanced",
        parse=parsers.expert_sparsity,
        describe=lambda v: f"{v:g} of experts removed",
    )
    sparsity_scope: str = setting(
        SparsityScope.ALL,
        help="Which projections --sparsity masks: all (every one of the decoder layers) or experts (the routed "
        "experts alone, the parameters --expert-sparsity removes; docs/moe.md).",
        label="Sparsity on",
        group="advanced",
        choices=tuple(SparsityScope),
        describe=lambda v: "sparsity inside the experts only" if v == SparsityScope.EXPERTS else "sparsity on all",
    )
    expert_score: str = setting(
        ExpertScore.REAP,
        help="Which experts --expert-sparsity removes: reap (lowest mean gate x output norm over routed tokens) "
        "or frequency (fewest routed tokens).",
        label="Expert score",
        group="advanced",
        choices=tuple(ExpertScore),
        describe=lambda v: f"experts ranked by {v}",
    )
    save: str | None = setting(
        None,
        help="Save the pruned model as a Hugging Face checkpoint here.",
        label="Save to",
        group="advanced",
        parse=parsers.save_folder,
        placeholder="not saved",
        result=False,
        single_run=True,
        metavar="PATH",
    )
    overwrite: bool = setting(
        False,
        help="Allow --save to replace a checkpoint folder acetui wrote before.",
        label="Overwrite",
        group="advanced",
        result=False,
        single_run=True,
    )

    @property
    def sparsity_spec(self) -> Sparsity:
        return parse_sparsity(self.sparsity, allow_zero=True)

    @property
    def removes_experts_alone(self) -> bool:
        """Whole experts removed and no mask (``--sparsity 0 --expert-sparsity F``): the method changes nothing."""
        return bool(self.expert_sparsity) and self.sparsity_spec.fraction == 0

    @property
    def label(self) -> str:
        """The paper's row name: method and calibration length, e.g. ``ACE-16`` or ``Wanda-FL``; for whole
        experts removed and no mask, the expert score (``REAP expert removal``), since the method is unused."""
        from acetui_core.scores.metrics import paper_name

        if self.removes_experts_alone:
            return f"{EXPERT_SCORE_NAMES.get(self.expert_score, self.expert_score)} expert removal"
        length = "FL" if self.seqlen == "full" else str(self.seqlen)
        name = paper_name(self.method)
        return name if self.method == "magnitude" else f"{name}-{length}"

    @property
    def target(self) -> str:
        """What the run takes away, in a few words: ``0.5``, ``2:4``; with ``--expert-sparsity``, the experts
        too (``0.5 + 25% of experts``, or ``50% of experts`` alone), which ``--sparsity`` alone hid; with
        ``--sparsity-scope experts``, where the mask is (``0.5 in experts``: a third of the decoder's weights
        on a model whose attention and shared experts hold the other two, not a half)."""
        sparsity = f"{self.sparsity} in experts" if self.sparsity_scope == SparsityScope.EXPERTS else self.sparsity
        if not self.expert_sparsity:
            return sparsity
        experts = f"{self.expert_sparsity * 100:g}% of experts"
        return experts if self.removes_experts_alone else f"{sparsity} + {experts}"

    @property
    def title(self) -> str:
        """``Wanda-16 at 0.5``, ``REAP expert removal at 50% of experts``: a run named in a sentence."""
        return f"{self.label} at {self.target}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        if data.get("refine") == Refine.DSNOT and "dsnot_skip" not in data:
            data = {**_dsnot_before_reference(str(data.get("sparsity", ""))), **data}
        if data.get("permute", Permute.NONE) != Permute.NONE and "permute_guard" not in data:
            # recorded before the permutation became RIA's code's (before 2026-12-07): it was
            # used only where it kept more score
            data = {**data, "permute_guard": True}
        if data.get("allocation") == Allocation.OWL and "owl_mean" not in data:
            # recorded before OWL's mean became its code's plain one; where every layer is equal in size
            # the two agree, and a comparison reads it as plain (acetui_core.analysis.rowlabels)
            data = {**data, "owl_mean": OwlMean.WEIGHTED}
        if data.get("group") is None:  # every method competed per row before RIA's default became its code's
            data = {**data, "group": SparsityGroup.ROW}
        return cls(**{k: v for k, v in data.items() if k in known})


def _dsnot_before_reference(sparsity: str) -> dict:
    """How DSnoT ran before its default became the reference code's protocol (acetui 0.1.0 before
    2026-11-26 21:00 UTC): a run recorded then (no dsnot_skip in its configuration) is read back as the
    variant it was. An N:M mask's kept weights were ranked by the run's metric, as the reference does."""
    before = {"dsnot_skip": DSnoTSkip.NONE, "dsnot_accept": DSnoTAccept.DECREASE}
    return before if ":" in sparsity else {**before, "dsnot_prune_score": DSnoTPruneScore.METRIC}


# The table, in the order the CLI's help and the form show it.
SETTINGS: dict[str, Setting] = {f.name: spec_of(f) for f in fields(RunConfig)}
# The settings a grid takes several values of, in the table's order.
AXES: tuple[str, ...] = tuple(name for name, spec in SETTINGS.items() if spec.axis)


def needing(setting_name: str, value: str) -> tuple[str, ...]:
    """The settings that matter only when ``setting_name`` is ``value`` (DSnoT's when --refine dsnot)."""
    return tuple(name for name, spec in SETTINGS.items() if spec.needs == (setting_name, value))


def model_name(model: str) -> str:
    """A short display name: the last component of a path or hub id, without ``.gguf``."""
    return model.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf")
