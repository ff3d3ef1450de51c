"""The first part of the table of run settings, the ones every run names: the model, the method and its
target sparsity, the calibration data, the evaluations, the device and precision. ``RunConfig``
(``acetui_core.run.config``) extends it with the methods' variants (VarP, RIA, OWL, the OBS update, the
permutation, DSnoT, experts) and what a run keeps besides its numbers; both parts make one table
(``SETTINGS``), this part first."""

from __future__ import annotations

from dataclasses import dataclass

from acetui_core.basics import parse
from acetui_core.basics.choices import Dtype, EvalKind, Offload, SparsityGroup
from acetui_core.basics.errors import check_choice
from acetui_core.run import parsers
from acetui_core.run.setting import setting
from acetui_core.scores.metrics import METHODS, reference_group

ZEROSHOT_TASKS = ("boolq", "rte", "hellaswag", "winogrande", "arc_easy", "arc_challenge", "openbookqa")
FULL_CONTEXT_CAP = 4096


@dataclass
class BasicSettings:
    model: str = setting(
        help="Hub id, local checkpoint folder, or .gguf file (default: the bundled SmolLM2-135M).",
        label="Model",
        placed=True,
        placeholder="hub id, checkpoint folder or .gguf (→ completes)",
        axis=True,
        describe=str,
    )
    method: str = setting(
        "ace",
        help=f"One of: {', '.join(METHODS)}; or a plug-in: module:function, path/file.py:function.",
        label="Metrics",
        placed=True,
        flags=("--method", "-m"),
        axis=True,
        grid_flags=("--methods", "--method", "-m"),
    )
    sparsity: str = setting(  # "0.5" or "2:4"; parsed by ``sparsity_spec``
        "0.5",
        help="A ratio in (0, 1) or N:M such as 2:4.",
        label="Sparsity",
        flags=("--sparsity", "-s"),
        parse=parsers.sparsity,
        placeholder="0.5, 2:4, 4:8 …",
        axis=True,
    )
    group: str = setting(  # None only until __post_init__: the method's reference group
        None,
        help="Which weights compete for unstructured sparsity: row or layer (default: the method's reference: "
        "layer for RIA and magnitude, as their reference code; row for the others, as Wanda's code and the ACE paper).",
        label="Group",
        choices=tuple(SparsityGroup),
        placeholder="the method's reference",
        describe=lambda v: f"{v} groups",
    )
    calib: str = setting(
        "c4",
        help="c4, wikitext2, or a .txt/.jsonl/.json(.gz) file with a 'text' field; a mixture joins sources "
        "with + (equal shares of the windows; c4@3+file.jsonl@1 for 3:1).",
        label="Calibration",
        parse=parsers.stripped,
        placeholder="c4, wikitext2 or a file",
        axis=True,
        calibration=True,
    )
    nsamples: int = setting(
        128,
        help="Calibration windows.",
        label="Samples",
        parse=parsers.whole(1),
        metavar="N",
        calibration=True,
        describe=lambda v: f"{v} samples",
    )
    seqlen: int | str = setting(  # an int, or "full" (the model's context capped at FULL_CONTEXT_CAP)
        16,
        help="Calibration window length in tokens, or 'full' (context, capped at 4096).",
        label="Length",
        parse=parse.seqlen,
        presets=("16", "full"),
        placeholder="16, full …",
        axis=True,
        calibration=True,
        describe=lambda v: f"{v}-token calibration",
    )
    seed: int = setting(
        0,
        help="Seed of the window sampler.",
        label="Seed",
        parse=parsers.whole(),
        metavar="N",
        axis=True,
        grid_flags=("--seeds", "--seed"),
        calibration=True,
    )
    evals: list[str] = setting(
        factory=lambda: [EvalKind.WIKITEXT2],
        help="wikitext2, zeroshot, both comma-separated, or none.",
        label="Evaluation",
        placed=True,
        flags=("--eval",),
        choices=tuple(EvalKind),
        parse=parsers.evals,
        result=False,  # which measures a run has, not their values
    )
    eval_seqlen: int | None = setting(
        None,
        help="Perplexity window length (default: the context, capped at 4096).",
        label="Length",
        parse=parsers.optional_whole(2),
        placed=True,
        placeholder="context",
        metavar="N",
        describe=lambda v: f"eval {v} tokens",
    )
    eval_limit: int | None = setting(
        None,
        help="Evaluate the first N perplexity windows only.",
        label="Windows",
        placed=True,
        placeholder="all",
        parse=parsers.optional_whole(1),
        metavar="N",
        describe=lambda v: f"{v} windows",
    )
    tasks: list[str] = setting(
        factory=lambda: list(ZEROSHOT_TASKS),
        help="Zero-shot tasks, comma-separated.",
        label="Tasks",
        placed=True,
        parse=parsers.tasks,
    )
    zeroshot_limit: int | None = setting(
        None,
        help="Zero-shot examples per task (a partial result).",
        label="Examples",
        placed=True,
        placeholder="all",
        flags=("--limit",),
        parse=parsers.optional_whole(1),
        metavar="N",
    )
    batch_size: int = setting(  # calibration windows per forward pass, and lm-eval's batch size
        8,
        help="Zero-shot batch size.",
        label="Batch size",
        group="advanced",
        parse=parsers.whole(1),
        metavar="N",
        result=False,
    )
    device: str = setting(
        "auto",
        help="auto, cpu or cuda[:i]; with auto and several GPUs a grid runs one per GPU.",
        label="Device",
        placed=True,
        result=False,
    )
    dtype: str = setting(
        Dtype.AUTO,
        help="auto (float32 on CPU, bf16/fp16 on GPU), float32, float16, bfloat16.",
        label="dtype",
        placed=True,
        choices=tuple(Dtype),
        parse=lambda value, _flag: check_choice(value, tuple(Dtype), "dtype"),
        describe=str,
    )
    offload: str = setting(
        Offload.AUTO,
        help="Decoder layers read from the safetensors shards one at a time: disk, none, or auto (when the run "
        "evaluates nothing, or the model would take over 70% of available memory).",
        label="Offload",
        group="advanced",
        choices=tuple(Offload),
    )

    def __post_init__(self) -> None:
        if self.group is None:
            self.group = reference_group(self.method)
