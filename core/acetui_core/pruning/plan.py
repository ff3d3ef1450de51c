"""What a run will cost, from the model's config alone (``acetui plan``): parameters, checkpoint size,
whether it streams, the calibration activations, and the peak CPU and GPU memory to expect.

The peaks add up what the layer loop holds at its fullest (ACE.md, "The pipeline"): what stays resident
(the whole model, or with streaming only embeddings, final norm and head), the decoder layers in flight
(the current one, the next one being prefetched, the previous one being written out), the calibration
activations (one copy: each layer's outputs replace its inputs), and the scratch of scoring the largest
linear, or, when larger, the WikiText-2 evaluation's logits, plus for a streamed evaluation the hidden
states of every window it evaluates (from a typical token count of the test split: the plan comes before
any tokenizer runs). Either phase also holds a decoder layer's temporaries for one batch of tokens (its
MLP's intermediates, its attention's projections): while pruning, before a layer is scored, not beside
it. A GGUF file adds a third phase, its loading: every tensor dequantized beside the model being filled.
The process's own memory (Python, torch, transformers) is measured, not guessed: it is this process's RSS
now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from acetui_core.basics.choices import Allocation, Dtype, EvalKind
from acetui_core.basics.errors import UserError
from acetui_core.modeling.layouts import census, decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import (
    check_device_name,
    context_length,
    meta_skeleton,
    model_source,
    resolve_dtype,
)
from acetui_core.modeling.preflight import model_config, preflight
from acetui_core.modeling.shards import checkpoint_bytes, local_checkpoint
from acetui_core.modeling.streaming import streaming_folder
from acetui_core.pruning.evaluate import LOGIT_ENTRIES_PER_CHUNK, eval_batch
from acetui_core.pruning.expertremoval import parameters_removed, stored_size
from acetui_core.pruning.layerloop import calibration_batch
from acetui_core.pruning.slicedscores import Scoring, each_row_alone, scoring_path
from acetui_core.pruning.validate import resolve_seqlen
from acetui_core.run.config import RunConfig
from acetui_core.scores.masks import rows_per_slice
from acetui_core.scores.method import Method
from acetui_core.scores.metrics import get_method

# WikiText-2's test split in tokens, at the upper end of common tokenizers (LLaMA-2's: 166 windows of 2048,
# about 341k; GPT-2's: 287k): a streamed evaluation holds every window's hidden states, and the plan is
# made before any tokenizer runs.
WIKITEXT2_TEST_TOKENS = 342_000
# Scoring one linear (``slicedscores.Scoring``), in bytes per weight. A mask chosen in slices holds the mask
# (1) and 24 per score of one slice (the float32 rows, their scores, the selection's int64 tie count or sort
# indices, its boolean masks). Whole scores hold the score's own height (``Method.score_bytes``) and 6 more
# when each row is chosen alone (the mask, a kept-score product), 22 when a whole layer competes (the
# selection over all its scores at once), and 4 more for the float32 copy of a weight stored in another
# dtype or for output fidelity's dense copy. Measured on a 33.5M-weight linear in float32 on the CPU
# (2026-11-28): Wanda per row 6 to 9 (1 + 24 x 8.4M / 33.5M = 7), CosP+VarP per row 9.0 (2:4: 9.8),
# RIA per row 18.0, per layer 22.4 (RIA, CosP+VarP) and 20.5 (magnitude); from bfloat16 RIA 27.7,
# CosP+VarP 17.2.
SLICE_BYTES_PER_SCORE, MASK_BYTES_PER_WEIGHT = 24, 1
ROW_CHOICE_BYTES, LAYER_CHOICE_BYTES, COPY_BYTES = 6, 22, 4
# What tokenizing the WikiText-2 test split leaves in the process while it is evaluated (measured with
# SmolLM2's fast tokenizer: 91 MB resident for its 305k tokens, 164 MB at its height)
TOKENIZED_BYTES_PER_TOKEN = 300
ASSUMED_GPU_BYTES = 80 * 2**30  # planning for a GPU this machine does not have: an 80 GB card
# A decoder layer's temporaries per token of a batch, in widths of the layer: the MLP's gate, up and their
# product (3 x its widest output), the attention's q, k, v and output and the residual sum (4 x hidden).
# SmolLM2 (CPU, float32) held 129 MiB beyond its logits, hidden states and tokens while it evaluated batches
# of 4096 tokens; this count gives 108 MiB.
MLP_TEMPORARIES, ATTENTION_TEMPORARIES = 3, 4
# transformers dequantizes a GGUF file's tensors (float32) and copies them into the model one at a time:
# at the height of the load about two of the largest beside the model (SmolLM2: 224 MiB over what it holds
# once loaded; its embeddings take 108 MiB), and the file's pages stay in the process (a memory map).
GGUF_TENSORS_IN_FLIGHT = 2


@dataclass
class Plan:
    model: str
    family: str
    parameters: int
    layers: int
    layer_parameters: int  # the largest decoder layer (MoE families mix dense and expert layers)
    resident_parameters: int  # embeddings, final norm and head
    checkpoint_bytes: int
    checkpoint_on_disk: bool  # measured from the files; else parameters times the config's dtype
    device: str
    dtype: str
    streaming: bool
    calibration_bytes: int  # one copy of the hidden states of every calibration token
    calibration_seqlen: int | None  # the window length in tokens, "full" resolved; None: no calibration
    evaluation_bytes: int  # WikiText-2: the logits of a few positions at a time, their log-probabilities, hidden states
    evaluation_tokens: int  # tokens in one evaluation batch (0: no perplexity)
    evaluation_hidden_bytes: int  # a streamed evaluation: the hidden states of every window it evaluates
    activations_on_gpu: bool | None  # None on the CPU
    baseline_bytes: int  # this process: Python, torch, transformers
    peak_cpu_bytes: int
    peak_gpu_bytes: int | None
    gpu_assumed: bool = False  # planned for a GPU this machine does not have (an 80 GB card)
    # zero-shot evaluation is not counted: lm-eval's batches are as long as the tasks' longest documents,
    # which the config does not tell; the peaks are then lower bounds
    zeroshot_uncounted: bool = False
    census: dict[str, int] | None = None  # decoder weights by kind: pruned kinds, routing, norms and biases
    saved_parameters: int | None = None  # --expert-sparsity: what the saved checkpoint keeps
    saved_bytes: int | None = None  # and its size, in the dtype the run saves it in


def _bytes(dtype) -> int:
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."), torch.bfloat16)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else 2


def _scoring_bytes(method: Method, run: RunConfig, shapes, dtype: torch.dtype) -> int:
    """The scratch of scoring the costliest of the linears of ``shapes`` (d_out, d_in) in a run of ``method``
    with ``run`` in a model of ``dtype``, by the way it is scored (``slicedscores.scoring_path``)."""
    sparsity = run.sparsity_spec
    path = scoring_path(method, run, sparsity)
    per_row = each_row_alone(run, sparsity)
    choice = method.score_bytes + ROW_CHOICE_BYTES if per_row else max(method.score_bytes, LAYER_CHOICE_BYTES)
    copies = (path == Scoring.WHOLE_WEIGHT and dtype != torch.float32) + bool(run.fidelity)

    def linear(d_out: int, d_in: int) -> int:
        if path == Scoring.MASK_IN_SLICES:
            return (
                MASK_BYTES_PER_WEIGHT * d_out * d_in + SLICE_BYTES_PER_SCORE * min(d_out, rows_per_slice(d_in)) * d_in
            )
        return (choice + COPY_BYTES * copies) * d_out * d_in

    return max(linear(d_out, d_in) for d_out, d_in in shapes)


def plan_run(run: RunConfig) -> Plan:
    check_device_name(run.device)  # a device this machine lacks may be planned for, an unknown one not
    preflight(run.model)  # a damaged checkpoint gets the sentence prune gives it
    config = model_config(run.model)
    model = meta_skeleton(config)
    layers = decoder_layers(model)
    parameters = stored_size(model)  # a tied head once, persistent buffers too: what a checkpoint stores
    layer_parameters = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
    resident = parameters - sum(p.numel() for layer in layers for p in layer.parameters())
    # the layer with the most prunable weights (DeepSeek's first layers are dense, the rest have experts)
    widest_layer = max(layers, key=lambda layer: sum(m.weight.numel() for m in prunable_linears(layer).values()))
    shapes = [weight_matrix(m).shape for m in prunable_linears(widest_layer).values()]
    widest = max(d_in for _, d_in in shapes)
    temporaries_per_token = MLP_TEMPORARIES * max(d_out for d_out, _ in shapes) + ATTENTION_TEMPORARIES * int(
        config.hidden_size
    )
    linears_in = [d_in for _, d_in in shapes]

    on_gpu = run.device.startswith("cuda") or (run.device == "auto" and torch.cuda.is_available())
    if run.dtype == Dtype.AUTO:  # what resolve_dtype picks, without asking a GPU this machine may not have
        dtype = torch.bfloat16 if on_gpu else torch.float32
    else:
        dtype = resolve_dtype(run.dtype, torch.device("cpu"))
    size = dtype.itemsize
    stored = _bytes(getattr(config, "dtype", None) or torch.bfloat16)
    kind, path = model_source(run.model)
    folder = local_checkpoint(run.model) if kind != "gguf" else None
    if kind == "gguf":
        on_disk = Path(path).stat().st_size
    else:
        on_disk = checkpoint_bytes(folder) if folder is not None else parameters * stored
    streaming = streaming_folder(run.model, run.offload, dtype, evaluates=bool(run.evals)) is not None

    method = get_method(run.method)
    calibration, seqlen, calibration_temporaries = 0, None, 0
    if method.needs_activations or run.expert_sparsity:  # experts are scored on calibration tokens
        seqlen = resolve_seqlen(run.seqlen, context_length(config))
        calibration = run.nsamples * seqlen * int(config.hidden_size) * size
        batch_device = torch.device("cuda" if on_gpu else "cpu")
        batch_tokens = min(run.nsamples, calibration_batch(seqlen, batch_device)) * seqlen
        calibration_temporaries = batch_tokens * temporaries_per_token * size
    scoring = _scoring_bytes(method, run, shapes, dtype)
    # SparseGPT's X^T X per linear, accumulated in float64
    statistics = 8 * sum(d * d for d in linears_in) if method.mask_and_update is not None else 0
    if method.mask_and_update is not None:
        scoring += 3 * 4 * widest * widest  # its Hessian's inverse and Cholesky factor

    # The layer loop writes each layer's outputs over its inputs: one copy of the calibration activations;
    # output fidelity keeps the dense outputs beside them, OWL's pass advances a copy of its own.
    activations = (2 if run.fidelity or run.allocation == Allocation.OWL else 1) * calibration

    evaluation = evaluation_tokens = evaluation_hidden = 0
    if EvalKind.WIKITEXT2 in run.evals:
        eval_seqlen = resolve_seqlen(run.eval_seqlen, context_length(config), "--eval-seqlen")
        windows = eval_batch(eval_seqlen)  # a batch, of at most --eval-limit windows
        windows = min(windows, run.eval_limit) if run.eval_limit else windows
        evaluation_tokens = windows * eval_seqlen
        vocabulary = int(config.vocab_size)
        # the head's logits for a few positions of each window at a time (``evaluate.batch_nll``), their
        # float32 log-softmax and, when they are not float32, a float32 copy; beside them the batch's hidden
        # states (the decoder stack's output, and the normalized copy the head reads)
        positions = min(eval_seqlen - 1, max(1, LOGIT_ENTRIES_PER_CHUNK // (vocabulary * windows)))
        entries = positions * windows * vocabulary
        evaluation = (
            entries * (size + 4 + (4 if size != 4 else 0)) + 2 * evaluation_tokens * int(config.hidden_size) * size
        )
        evaluation += evaluation_tokens * temporaries_per_token * size  # the forward pass through each layer
        evaluation += WIKITEXT2_TEST_TOKENS * TOKENIZED_BYTES_PER_TOKEN
        if streaming:
            evaluated = min(WIKITEXT2_TEST_TOKENS, (run.eval_limit or WIKITEXT2_TEST_TOKENS) * eval_seqlen)
            evaluation_hidden = evaluated * int(config.hidden_size) * size

    gpu_free = None
    if on_gpu:
        gpu_free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else ASSUMED_GPU_BYTES
    # where the pipeline keeps activations (``placement.activation_device``): on the GPU when two copies fit
    # in a quarter of its free memory
    activations_on_gpu = gpu_free is not None and 2 * calibration < gpu_free / 4
    hidden_on_gpu = gpu_free is not None and 2 * evaluation_hidden < gpu_free / 4
    baseline = psutil.Process().memory_info().rss
    layer = layer_parameters * size
    if streaming:
        # resident parts; the current layer and the prefetched next one (each read in the checkpoint's dtype
        # first), on a GPU also their pinned staging copies; the pruned layer cast back to be written out
        held = resident * size + (2 * layer if not on_gpu else 3 * layer) + layer_parameters * stored
    else:
        held = parameters * size
    loading = 0
    if kind == "gguf":
        held += on_disk
        largest_tensor = max(p.numel() for p in model.parameters())
        loading = GGUF_TENSORS_IN_FLIGHT * largest_tensor * 4
    # Evaluation comes after pruning, with the same model held: each peak is the larger of the two phases.
    gpu = None
    if on_gpu:
        assert gpu_free is not None  # measured (or assumed) above for every GPU plan
        cpu = (
            baseline
            + held
            + max(loading, 0 if activations_on_gpu else activations, 0 if hidden_on_gpu else evaluation_hidden)
        )
        pruning = max(scoring, calibration_temporaries) + statistics + (activations if activations_on_gpu else 0)
        # an in-memory model goes to the GPU whole for evaluation when it fits (``placement.place_for_eval``);
        # without an evaluation (--eval none) nothing is placed
        placed = resident * size + 2 * layer if streaming else min(parameters * size, int(0.8 * gpu_free))
        evaluating = (placed + evaluation + (evaluation_hidden if hidden_on_gpu else 0)) if run.evals else 0
        # the embeddings and head are on the GPU only while layer 0's inputs are captured
        # (``placement.all_but_layers_on``), not while layers are pruned
        capturing = resident * size + (activations if activations_on_gpu else 0)
        # the layer being pruned and the next one copied over beside it (a model of one layer has no next)
        gpu = max(min(2, len(layers)) * layer + pruning, capturing, evaluating)
    else:
        pruning = activations + max(scoring, calibration_temporaries) + statistics
        cpu = baseline + held + max(loading, pruning, evaluation + evaluation_hidden)
    saved_parameters = saved_bytes = None
    if run.expert_sparsity:
        saved_parameters = parameters - parameters_removed(model, run.expert_sparsity)
        saved_bytes = saved_parameters * (stored if streaming else size)  # a streamed run writes the source's dtype
    return Plan(
        saved_parameters=saved_parameters,
        saved_bytes=saved_bytes,
        model=run.model,
        family=config.model_type,
        parameters=parameters,
        layers=len(layers),
        layer_parameters=layer_parameters,
        resident_parameters=resident,
        checkpoint_bytes=on_disk,
        checkpoint_on_disk=kind == "gguf" or folder is not None,
        device="cuda" if on_gpu else "cpu",
        dtype=str(dtype).removeprefix("torch."),
        streaming=streaming,
        calibration_bytes=calibration,
        calibration_seqlen=seqlen,
        evaluation_bytes=evaluation,
        evaluation_tokens=evaluation_tokens,
        evaluation_hidden_bytes=evaluation_hidden,
        activations_on_gpu=activations_on_gpu if on_gpu else None,
        baseline_bytes=baseline,
        peak_cpu_bytes=cpu,
        peak_gpu_bytes=gpu,
        gpu_assumed=on_gpu and not torch.cuda.is_available(),
        zeroshot_uncounted=EvalKind.ZEROSHOT in run.evals,
        census=census(model),
    )


def check_fits_memory(config: RunConfig) -> None:
    """The sizes a user chose (calibration windows and their length, the evaluation window, output
    fidelity, OWL) must fit this machine's memory (and swap) as the plan estimates the run's peak: a run
    that cannot is refused before it is recorded (``launch.queue``), not left to grow until the system
    kills it."""
    plan = plan_run(config)
    memory = psutil.virtual_memory().total + psutil.swap_memory().total
    if plan.peak_cpu_bytes > memory:
        raise UserError(
            f"This run would need about {plan.peak_cpu_bytes / 2**30:,.1f} GiB of memory (acetui plan; the "
            f"calibration activations of --nsamples {config.nsamples} windows of {plan.calibration_seqlen or '-'} "
            f"tokens take {plan.calibration_bytes / 2**30:,.1f} GiB), more than this machine's "
            f"{memory / 2**30:,.1f} GiB; use fewer or shorter windows (--nsamples, --seqlen)."
        )
