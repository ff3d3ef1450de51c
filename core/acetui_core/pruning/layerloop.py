"""The sequential layer loop (ACE.md, "The pipeline"): capture the inputs of decoder layer 0, then for
each layer gather activation statistics, score and mask its linears (permutation, DSnoT, the OBS update
where asked), and feed the pruned layer's outputs to the next layer. Progress goes to a callback as typed
events; ``cancel`` is checked between layers and in each long loop before them (calibration windows,
layer 0's inputs, OWL's pass). What a whole run does around it is ``acetui_core.pruning.pipeline``."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from acetui_core.basics.choices import (
    Allocation,
    DSnoTPruneScore,
    Permute,
    Refine,
    StageName,
)
from acetui_core.basics.errors import StopFlag, UserError, check_stop
from acetui_core.modeling.conversion import by_saved_name
from acetui_core.modeling.data import calibration_sample, sample_identity
from acetui_core.modeling.layouts import (
    architecture,
    check_layout,
    check_pruned,
    decoder_layers,
    expert_layout,
    masked_linears,
    prunable_linears,
    set_weight_matrix,
    weight_matrix,
)
from acetui_core.modeling.models import Loaded, device_name
from acetui_core.modeling.placement import activation_device, advance, capture_layer0_inputs, layer_feed, module_device
from acetui_core.modeling.routing import expert_of
from acetui_core.pruning import histograms
from acetui_core.pruning.allocation import owl_allocation
from acetui_core.pruning.dsnot import DSnoTSettings, dsnot_refines, refine
from acetui_core.pruning.expertremoval import (
    ExpertScores,
    check_expert_settings,
    cut_layer,
    expert_choice,
    finish_expert_removal,
    moe_blocks,
    score_pass,
    stored_size,
)
from acetui_core.pruning.fidelity import OutputAgreement, linear_fidelity
from acetui_core.pruning.layerstats import LayerWork, dense_weight, layer_stats, method_scores
from acetui_core.pruning.slicedscores import Scoring, mask_in_slices, scores_in_slices, scoring_path
from acetui_core.pruning.stats import ColumnStats
from acetui_core.pruning.validate import resolve_seqlen
from acetui_core.run.config import RunConfig
from acetui_core.run.events import LayerPruned, LayerStarted, OnEvent, RunStarted, Stage
from acetui_core.run.records import (
    Calibration,
    Experts,
    ExpertsRemoved,
    LayerAllocation,
    LayerRecord,
    LinearRecord,
    LinearSparsity,
    MaskChoice,
    kind_sparsity,
)
from acetui_core.scores.maskfile import mask_writer
from acetui_core.scores.masks import check_nm_fits, check_nm_groups, nm_mask, prune_mask
from acetui_core.scores.metrics import get_method, reads_calibration
from acetui_core.scores.permute import channel_permutation, retained_fraction
from acetui_core.scores.sparsity import Sparsity

# Calibration windows go through a layer in batches of about this many tokens: enough rows for full-speed
# matmuls (on one CPU core, SmolLM2's linears run at the same speed from 128 to 4096 rows), few enough
# that a batch's temporaries (MLP intermediates, attention, the statistics' squares) stay small next to
# the activations kept between layers (on SmolLM2, 4096 -> 1024 tokens: ~100 MB less peak RSS).
CALIB_TOKENS_PER_BATCH = 512
# On a GPU a 512-token batch leaves the card idle between kernel launches (LLaMA-7B's FL calibration would
# take 128 batches of one 2048-token window per layer and pass); larger batches cost only their float64
# statistics' squares (24 bytes a value: 1.1 GB for 4096 tokens of a 11008-wide input).
GPU_CALIB_TOKENS_PER_BATCH = 4096


def calibration_batch(seqlen: int, device: torch.device) -> int:
    """Calibration windows per forward pass of a layer on ``device``."""
    tokens = CALIB_TOKENS_PER_BATCH if device.type == "cpu" else GPU_CALIB_TOKENS_PER_BATCH
    return max(1, tokens // seqlen)


def _choose_mask(
    W, scores, stats: ColumnStats | None, config, sparsity, kind: str
) -> tuple[torch.Tensor, float | None, MaskChoice]:
    """The metric's mask and how it was chosen: an N:M pattern's groups taken in a permuted input order
    (``--permute``), then DSnoT's swaps (``--refine dsnot``, in that same order so N:M groups stay whole)
    unless ``--dsnot-skip`` leaves this kind of linear alone. ``--update obs`` comes after, on the refined
    mask."""
    order = None
    if config.permute != Permute.NONE:
        order = channel_permutation(scores, sparsity.n, sparsity.m, config.permute, config.permute_guard)
    mask, threshold = prune_mask(scores, sparsity, config.group, order)
    choice = MaskChoice(retained=retained_fraction(scores, mask))
    if order is not None:
        choice.retained_unpermuted = retained_fraction(scores, nm_mask(scores, sparsity.n, sparsity.m)[0])
        choice.permutation = order.tolist()
    if config.refine == Refine.DSNOT and dsnot_refines(kind, config.dsnot_skip):
        assert stats is not None, "--refine dsnot reads calibration statistics (Method.calibrated)"
        columns = order if order is not None else torch.arange(W.shape[1], device=W.device)
        settings = DSnoTSettings(
            config.dsnot_cycles, config.dsnot_threshold, config.dsnot_var_power, config.dsnot_accept
        )
        mean = stats.s / config.nsamples  # the reference code's scale: summed over tokens, averaged over windows
        # The reference ranks the kept weights it may prune by the mask's metric for N:M, by Wanda's score
        # (|W| times the input's norm) for unstructured masks.
        wanda = not sparsity.is_nm and config.dsnot_prune_score == DSnoTPruneScore.WANDA
        ranks = W.abs() * stats.norm.to(W.device) if wanda else scores
        refined, choice.refinement = refine(
            W[:, columns],
            mask[:, columns],
            ranks[:, columns],
            mean[columns],
            stats.variance[columns],
            settings,
            m=sparsity.m,
        )
        mask[:, columns] = refined
    return mask, threshold, choice


def _prune_layer(
    work: LayerWork, sparsity: Sparsity, masks
) -> tuple[list[LinearRecord], dict[str, ColumnStats], dict[str, str]]:
    """Gather statistics over every calibration token, then score, mask and write back each linear to
    ``sparsity`` (and its pruned positions to ``masks`` when kept). With ``--expert-sparsity`` the experts
    are scored in the same pass, the chosen ones skipped and cut out at the end: the kept experts' new
    names (``mlp.experts.5`` -> ``mlp.experts.4``) come back with the records."""
    config = work.config
    linears = masked_linears(work.layer, config.sparsity_scope)
    scorer = None
    if config.expert_sparsity:
        renormalise = bool(getattr(work.loaded.model.config, "norm_topk_prob", False))
        scorer = ExpertScores(moe_blocks(work.layer), len(work.inputs), renormalise)
    with scorer.hooked() if scorer else contextlib.nullcontext():
        stats = layer_stats(work, linears) if sparsity.fraction > 0 else {}
        if scorer is not None and not scorer.complete:  # no statistics were gathered: a pass for the scores
            score_pass(work.layer, work.inputs, work.device, work.dense_outputs)
    removal: list = []
    if scorer is not None:  # chosen on the dense layer; cut once the kept experts are masked
        removal, gone = expert_choice(work.index, scorer, config.expert_score, config.expert_sparsity)
        linears = {name: m for name, m in linears.items() if expert_of(name) not in gone}
        if work.experts is not None:
            work.experts.removal += removal
    update = work.method.update(config)
    records = [
        _prune_linear(work, name, matrix, stats.get(name), sparsity, update, masks) for name, matrix in linears.items()
    ]
    return records, stats, cut_layer(scorer, removal) if scorer is not None else {}


def _prune_linear(work: LayerWork, name, matrix, stats, sparsity, update, masks) -> LinearRecord:
    """Score, mask and write back one linear. Its float32 copy, scores and mask are this function's
    locals, freed when it returns: in a loop over the linears the previous one's would still be held
    while the next one's are made (on the GPU, twice the scoring scratch of the widest linear)."""
    index, config, method = work.index, work.config, work.method
    start = time.perf_counter()
    histogram, fidelity, choice, dense = None, None, None, None
    # A row-local score needs no whole float32 copy of W: it is scored a slice of rows at a time and the
    # stored weight masked in its own dtype. Anything that reads W whole afterwards takes the copy.
    path = scoring_path(method, config, sparsity)
    W = dense_weight(index, name, matrix) if path == Scoring.WHOLE_WEIGHT else None
    if W is not None and config.fidelity and stats is not None:
        dense = W.clone()
    mask = None  # a method without scores chooses its mask in its mask-and-update hook (SparseGPT)
    if sparsity.fraction == 0:  # --sparsity 0 with --expert-sparsity: the kept experts stay as they are
        pass
    elif path == Scoring.MASK_IN_SLICES:
        mask, threshold, choice, histogram = mask_in_slices(work, name, matrix, stats, sparsity)
    elif method.score is not None:
        where = f"layer {index} {name}"
        scores = scores_in_slices(index, name, matrix, stats, config, method) if W is None else None
        scores = method_scores(method, W, stats, config, where) if scores is None else scores
        mask, threshold, choice = _choose_mask(W, scores, stats, config, sparsity, matrix.kind)
        histogram = histograms.histogram(scores, threshold, pruned=mask)
        del scores
    if sparsity.fraction == 0:
        pass
    elif W is None:
        assert mask is not None, "a row-local method scores"
        weight_matrix(matrix).masked_fill_(mask, 0)  # exact in any dtype
    elif update is not None:
        assert stats is not None, "an update reads the linear's Hessian (Method.calibrated)"
        W = update(W, stats.hessian, f"layer {index} {name}", sparsity=sparsity, mask=mask)
    else:
        assert mask is not None, "a method either scores or has a mask-and-update hook (Method.update)"
        W.masked_fill_(mask, 0)
    stored = matrix.weight
    if W is not None and W.data_ptr() != stored.data_ptr():
        set_weight_matrix(matrix, W)  # copied into the weight in its dtype, with no cast copy first
    d_out, d_in = weight_matrix(matrix).shape
    achieved = 1 - torch.count_nonzero(stored).item() / stored.numel()  # counted from the weight itself
    if sparsity.is_nm:
        order = choice.permutation if choice is not None else None
        check_nm_groups(weight_matrix(matrix), sparsity, order, f"Layer {index}'s {name}")
    if dense is not None:
        assert stats is not None and W is not None, "output fidelity gathers X^T X and keeps W whole"
        fidelity = linear_fidelity(dense, W, stats.xtx)
    if masks is not None:
        masks.add(index, name, weight_matrix(matrix) == 0)
    return LinearRecord(
        name=name,
        d_out=d_out,
        d_in=d_in,
        sparsity=achieved,
        seconds=time.perf_counter() - start,
        act_stats=stats.summary() if stats is not None else None,
        histogram=histogram,
        fidelity=fidelity,
        choice=choice,
        kind=matrix.kind,
        tokens=stats.tokens if stats is not None else None,
    )


@dataclass
class Pruned:
    """What the layer loop reports: the fields of ``RunResult`` it knows."""

    layers: list[LinearSparsity]
    overall_sparsity: float
    prune_seconds: float
    calibration: Calibration | None
    allocation: list[LayerAllocation] | None = None
    permutations: dict[str, list[int]] | None = None  # --permute: each linear's input order, by saved name
    kinds: dict[str, float] | None = None
    experts: Experts | None = None
    experts_removed: ExpertsRemoved | None = None


def prune(
    loaded: Loaded,
    config: RunConfig,
    on_event: OnEvent | None = None,
    cancel: StopFlag | None = None,
    masks_path: Path | None = None,
    release=None,
) -> Pruned:
    """Prune ``loaded.model`` in place; return the per-linear sparsities and timing. With
    ``config.keep_masks`` the masks go to ``masks_path`` (``acetui_core.scores.maskfile``). ``release(index,
    layer)`` sees each pruned layer before it leaves the compute device (a streamed run writes it out)."""
    if config.keep_masks and masks_path is None:
        raise UserError("--keep-masks needs a run store to keep the masks beside; run it through acetui prune.")
    emit = on_event or (lambda event: None)
    method, sparsity = get_method(config.method), config.sparsity_spec
    layers = decoder_layers(loaded.model)
    check_layout(loaded.model)  # a weight the table of layouts does not know stops the run before any work
    check_expert_settings(loaded.model, config)
    for index, layer in enumerate(layers):  # an N:M pattern that does not fit fails here, before calibration
        for name, module in masked_linears(layer, config.sparsity_scope).items():
            check_nm_fits(sparsity, weight_matrix(module).shape[1], f"layer {index} {name}")
    calibrated = reads_calibration(config)
    layout = expert_layout(loaded.model)
    experts = Experts(layout, config.moe_calibration) if layout is not None and calibrated else None
    parameters_before = stored_size(loaded.model)  # as the checkpoint stores it: persistent buffers too
    emit(
        RunStarted(
            config.model, config.method, config.sparsity, len(layers), str(loaded.device), device_name(loaded.device)
        )
    )

    windows, calibration = None, None
    if calibrated:
        seqlen = resolve_seqlen(config.seqlen, loaded.context_length)
        emit(Stage(StageName.CALIBRATION, 0, config.nsamples))
        windows, source = calibration_sample(
            loaded.tokenizer, config.calib, config.nsamples, seqlen, config.seed, cancel
        )
        calibration = Calibration(
            source=source,
            nsamples=config.nsamples,
            seqlen=seqlen,
            seed=config.seed,
            fingerprint=sample_identity(source),
        )
        emit(Stage(StageName.CALIBRATION, config.nsamples, config.nsamples))

    started = time.perf_counter()
    inputs = []
    if windows is not None:
        hidden_size = loaded.model.config.hidden_size
        keep_on = activation_device(loaded, windows, hidden_size)
        batch = calibration_batch(windows.shape[1], loaded.device)
        inputs = capture_layer0_inputs(loaded, windows, batch, keep_on, cancel)

    allocation = None
    if config.allocation == Allocation.OWL:
        allocation = owl_allocation(loaded, layers, inputs, config, method, sparsity, emit, cancel)
    summaries: list[LinearSparsity] = []
    permutations: dict[str, dict[int | None, list[int]]] = {}  # per parameter, per expert slice
    prefixes = {id(module): name for name, module in loaded.model.named_modules()}
    feed = layer_feed(loaded, release)
    try:
        with mask_writer(masks_path if config.keep_masks else None) as masks:
            for index, layer in enumerate(layers):
                done = f"layers 0-{index - 1} are pruned and recorded" if index else "no layer was pruned"
                check_stop(cancel, f"before layer {index} of {len(layers)}; {done}")
                emit(LayerStarted(index, len(layers)))
                layer_start = time.perf_counter()
                device = module_device(layer) if feed is None else loaded.device
                if feed is not None:
                    feed.enter(index)
                dense_outputs: list[torch.Tensor] | None = [] if config.fidelity and inputs else None
                target = sparsity if allocation is None else Sparsity(ratio=allocation[index].sparsity)
                work = LayerWork(index, layer, inputs, loaded, config, method, device, dense_outputs, experts)
                linears, stats, renamed = _prune_layer(work, target, masks)
                masked = {matrix.parameter for matrix in masked_linears(layer, config.sparsity_scope).values()}
                check_pruned(index, layer, architecture(loaded.model), target.fraction, masked)  # before reporting
                agreement = OutputAgreement() if dense_outputs is not None else None
                if calibration is not None and stats:
                    calibration.tokens_per_linear = max(s.tokens for s in stats.values())
                # The last layer's outputs feed no layer: computed only to compare them with the dense ones.
                if index < len(layers) - 1 or agreement is not None:
                    advance(layer, inputs, device, dense_outputs, agreement)
                if feed is not None:
                    feed.leave(index)
                fidelity = agreement.result() if agreement else None
                seconds = time.perf_counter() - layer_start
                layer_experts = experts.of_layer(index) if experts else None
                emit(
                    LayerPruned(
                        LayerRecord(index, len(layers), seconds, linears, fidelity=fidelity, experts=layer_experts)
                    )
                )
                summaries += [LinearSparsity(index, r.name, r.sparsity, r.seconds, r.kind, r.size) for r in linears]
                matrices = prunable_linears(layer)
                for r in linears:
                    if r.choice is not None and r.choice.permutation is not None:  # by the name once experts are cut
                        expert, _, leaf = r.name.rpartition(".")
                        matrix = matrices[f"{renamed[expert]}.{leaf}" if expert in renamed else r.name]
                        parameter = f"{prefixes[id(layer)]}.{matrix.parameter}"
                        permutations.setdefault(parameter, {})[matrix.expert] = r.choice.permutation
    finally:
        if feed is not None:
            feed.close()
    if loaded.device.type == "cuda":  # the GPU's queued work is part of the pruning time
        torch.cuda.synchronize(loaded.device)
    prune_seconds = time.perf_counter() - started

    removed = finish_expert_removal(loaded, config, experts, parameters_before)
    for fallback in experts.fallbacks if experts else []:
        logging.getLogger("acetui").warning(fallback.sentence())
    # Over every prunable weight of the decoder layers, experts included, as counted from each weight.
    weights = sum(summary.weights or 0 for summary in summaries)
    zeros = sum(summary.sparsity * (summary.weights or 0) for summary in summaries)
    return Pruned(
        summaries,
        zeros / weights,
        prune_seconds,
        calibration,
        allocation,
        by_saved_name(loaded.model, permutations) if permutations else None,
        kind_sparsity(summaries),
        experts,
        removed,
    )


def linear_sizes(layers) -> list[int]:
    return [weight_matrix(m).numel() for layer in layers for m in prunable_linears(layer).values()]
