"""Options shared by the commands, declared once. Every number and list goes through
``acetui_core.parse`` (one parser: a bad value is one sentence naming the option, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from acetui_core import parse
from acetui_core.comparison import CELLS
from acetui_core.config import ZEROSHOT_TASKS
from acetui_core.errors import UserError
from acetui_core.metrics import METHODS


def _whole(flag: str, minimum: int = 0):
    return lambda text: parse.whole(text, flag, minimum)


def _optional_whole(flag: str, minimum: int = 0):
    return lambda text: parse.optional_whole(text, flag, minimum)


StoreOption = Annotated[
    Path | None,
    typer.Option("--store", help="The run store file (default: $ACETUI_HOME/runs.db or the user data folder)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout, for scripts.")]
Model = Annotated[
    str | None,
    typer.Argument(
        help="Hub id, local checkpoint folder, or .gguf file (default: the bundled SmolLM2-135M).", show_default=False
    ),
]
Models = Annotated[
    list[str] | None,
    typer.Argument(
        help="Models: hub ids, checkpoint folders or .gguf files (default: the bundled SmolLM2-135M).",
        show_default=False,
    ),
]
Last = Annotated[
    int | None, typer.Option(parser=_optional_whole("--last", 1), metavar="N", help="Only the N most recent runs.")
]
RunId = Annotated[str, typer.Argument(help="A run id or a unique prefix of one.")]
RunIds = Annotated[list[str], typer.Argument(help="Run ids or unique prefixes.")]

# The settings of a run, named as RunConfig's fields (``run_settings`` picks them from a command's values).
Group = Annotated[str, typer.Option(help="Which weights compete for unstructured sparsity: row or layer.")]
Calib = Annotated[str, typer.Option(help="c4, wikitext2, or a .txt/.jsonl/.json(.gz) file with a 'text' field.")]
Nsamples = Annotated[int, typer.Option(parser=_whole("--nsamples", 1), metavar="N", help="Calibration windows.")]
Seed = Annotated[int, typer.Option(parser=_whole("--seed"), metavar="N", help="Seed of the window sampler.")]
Evals = Annotated[str, typer.Option("--eval", help="wikitext2, zeroshot, both comma-separated, or none.")]
EvalSeqlen = Annotated[
    int | None,
    typer.Option(
        parser=_optional_whole("--eval-seqlen", 2),
        metavar="N",
        help="Perplexity window length (default: the context, capped at 4096).",
    ),
]
EvalLimit = Annotated[
    int | None,
    typer.Option(
        parser=_optional_whole("--eval-limit", 1), metavar="N", help="Evaluate the first N perplexity windows only."
    ),
]
Tasks = Annotated[str, typer.Option(help="Zero-shot tasks, comma-separated.")]
ZeroshotLimit = Annotated[
    int | None,
    typer.Option(
        "--limit",
        parser=_optional_whole("--limit", 1),
        metavar="N",
        help="Zero-shot examples per task (a partial result).",
    ),
]
BatchSize = Annotated[int, typer.Option(parser=_whole("--batch-size", 1), metavar="N", help="Zero-shot batch size.")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda[:i]; with auto and several GPUs a grid runs one per GPU.")]
Dtype = Annotated[str, typer.Option(help="auto (float32 on CPU, bf16/fp16 on GPU), float32, float16, bfloat16.")]
Offload = Annotated[
    str,
    typer.Option(
        help="Decoder layers read from the safetensors shards one at a time: disk, none, or auto (when the model "
        "would take over 70% of available memory)."
    ),
]
SquaredWeight = Annotated[bool, typer.Option(help="VarP/ACE variant with |W|^2 in place of |W| (ACE.md).")]
Fidelity = Annotated[
    bool,
    typer.Option(
        "--fidelity",
        help="Record each linear's and layer's output fidelity (cosine, relative L2 error) on the calibration tokens.",
    ),
]
KeepMasks = Annotated[
    bool,
    typer.Option(
        "--keep-masks", help="Keep the run's masks beside the store (one bit per weight), for acetui overlap."
    ),
]
VarpScale = Annotated[
    str, typer.Option(help="VarP's activations divided per linear input by: none, rms or max (|x|) (ACE.md).")
]
VarpForm = Annotated[
    str, typer.Option(help="VarP's V_j: series (1 + E[x^2] + E[x^4]) or inverse (the paper's E[1/(1 - x^2)]).")
]
Allocation = Annotated[
    str, typer.Option(help="Layer sparsities: uniform, or owl (outlier-weighted, Yin et al. 2024; ratios only).")
]
OwlLambda = Annotated[
    float, typer.Option(parser=lambda t: parse.number(t, "--owl-lambda"), help="OWL: layer sparsities within +-lambda.")
]
OwlM = Annotated[
    float, typer.Option(parser=lambda t: parse.number(t, "--owl-m"), help="OWL: outlier = score above M x layer mean.")
]
Update = Annotated[str, typer.Option(help="After the mask: none, or obs (SparseGPT's OBS update of the kept weights).")]
Permute = Annotated[
    str,
    typer.Option(
        help="N:M only: reorder each linear's input channels before the mask so its groups keep more score: "
        "none, greedy (RIA's reallocation) or lsa (greedy, then linear sum assignment; docs/methods.md)."
    ),
]
Refine = Annotated[
    str, typer.Option(help="After the mask, before --update: none, or dsnot (DSnoT's weight swaps; docs/methods.md).")
]
DsnotCycles = Annotated[
    int, typer.Option(parser=_whole("--dsnot-cycles", 1), metavar="N", help="DSnoT: at most N swaps per row.")
]
DsnotThreshold = Annotated[
    float,
    typer.Option(
        parser=lambda t: parse.number(t, "--dsnot-threshold", minimum=0),
        help="DSnoT: a row stops once its expected-output error is at most this.",
    ),
]
DsnotVarPower = Annotated[
    float,
    typer.Option(
        parser=lambda t: parse.number(t, "--dsnot-var-power", minimum=0),
        help="DSnoT: the power of the input variance dividing a weight's growth key.",
    ),
]
MoeCalibration = Annotated[
    str,
    typer.Option(
        help="Mixture-of-experts models: each expert's statistics from the tokens its router sends it (routed), "
        "or from every calibration token (all)."
    ),
]
Detach = Annotated[bool, typer.Option(help="Run in the background, detached from this terminal; print the run id(s).")]
Executor = Annotated[
    str,
    typer.Option(
        help="Where the runs execute: local (this machine) or slurm (one job array through submitit; implies --detach)."
    ),
]
Partition = Annotated[str | None, typer.Option(help="Slurm partition (--executor slurm).")]
GpusPerJob = Annotated[int, typer.Option(parser=_whole("--gpus-per-job"), metavar="N", help="GPUs per Slurm job.")]
TimeLimit = Annotated[str, typer.Option("--time", help="Slurm time limit per job: 120, 2:00:00, 1-00:00:00.")]

# The lists of a grid, comma-separated (parsed by the commands through acetui_core.parse).
Methods = Annotated[
    str,
    typer.Option(
        help=f"Methods, comma-separated: {', '.join(METHODS)}, or plug-ins (module:function, file.py:function)."
    ),
]
Sparsities = Annotated[str, typer.Option("--sparsity", help="Sparsities, comma-separated: ratios and N:M patterns.")]
Seqlens = Annotated[str, typer.Option("--seqlen", help="Calibration lengths, comma-separated; 'full' for the context.")]
Seeds = Annotated[
    str, typer.Option("--seeds", "--seed", help="Sampler seeds, comma-separated (the seed study: 0,1,2).")
]

Notify = Annotated[
    str | None,
    typer.Option(
        "--notify",
        metavar="bell|osc|none",
        help="When a run ends: the terminal bell, the bell and a desktop notification (OSC 9/777), or nothing; "
        "remembered (default: osc).",
    ),
]

Cells = Annotated[
    str,
    typer.Option(
        help=f"Table cells: {' or '.join(CELLS)} (perplexity | pruning seconds | calibration tokens | peak GB)."
    ),
]

DEFAULT_TASKS = ",".join(ZEROSHOT_TASKS)

# The command parameters that are RunConfig fields of the same name.
RUN_SETTINGS = (
    "group",
    "calib",
    "nsamples",
    "evals",
    "eval_seqlen",
    "eval_limit",
    "tasks",
    "zeroshot_limit",
    "batch_size",
    "device",
    "dtype",
    "offload",
    "squared_weight",
    "fidelity",
    "keep_masks",
    "varp_scale",
    "varp_form",
    "allocation",
    "owl_lambda",
    "owl_m",
    "update",
    "permute",
    "refine",
    "dsnot_cycles",
    "dsnot_threshold",
    "dsnot_var_power",
    "moe_calibration",
)


def run_settings(values: dict) -> dict:
    """The RunConfig fields among a command's parameter values (its ``locals()``), lists parsed."""
    settings = {name: values[name] for name in RUN_SETTINGS if name in values}
    if "evals" in settings:
        settings["evals"] = parse.evals(settings["evals"])
    if "tasks" in settings:
        settings["tasks"] = parse.some(settings["tasks"], "--tasks")
    return settings


def slurm_executor(executor: str, partition: str | None, gpus_per_job: int, time: str):
    """The Slurm executor for ``--executor slurm``, None for ``local``; anything else is refused."""
    if executor == "local":
        return None
    if executor != "slurm":
        raise UserError(f"Unknown --executor '{executor}'; use local or slurm.")
    from acetui_core.slurm import Slurm

    return Slurm(partition=partition, gpus_per_job=gpus_per_job, time=time)


def seqlens(text: str) -> list[int | str]:
    return [parse.seqlen(value) for value in parse.some(text, "--seqlen")]


def seeds(text: str) -> list[int]:
    return [parse.whole(value, "--seeds") for value in parse.some(text, "--seeds")]
