"""The sequential layer loop (ACE.md, "The pipeline"): capture the inputs of decoder layer 0, then for
each layer gather activation statistics, score and mask its linears, and feed the pruned layer's
outputs to the next layer. Progress goes to a callback as typed events; ``cancel`` is checked between
layers."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn

from acetui_core import histograms
from acetui_core.allocation import outlier_ratio, owl_sparsities
from acetui_core.checkpoint import save_checkpoint
from acetui_core.config import RunConfig
from acetui_core.data import calibration_windows, tokenized_calibration, wikitext2_test_ids
from acetui_core.dsnot import DSnoTSettings, refine
from acetui_core.errors import Cancelled, UserError
from acetui_core.evaluate import EVAL_TOKENS_PER_BATCH, perplexity, ppl, window_losses, windows_nll
from acetui_core.events import LayerPruned, LayerStarted, RunFinished, RunStarted, Stage
from acetui_core.fidelity import OutputAgreement, linear_fidelity
from acetui_core.layouts import (
    check_layout,
    decoder_layers,
    expert_layout,
    prunable_linears,
    set_weight_matrix,
    weight_matrix,
)
from acetui_core.maskfile import mask_writer
from acetui_core.masks import check_nm_fits, nm_mask, prune_mask
from acetui_core.metrics import get_method
from acetui_core.models import Loaded, device_name
from acetui_core.paths import content_identity
from acetui_core.permute import channel_permutation, retained_fraction, write_permutations
from acetui_core.plugins import check_scores
from acetui_core.records import (
    Calibration,
    Experts,
    LayerAllocation,
    LayerRecord,
    LinearRecord,
    LinearSparsity,
    MaskChoice,
    RunResult,
    TaskAccuracy,
    TaskOutcomes,
    WindowLosses,
    kind_sparsity,
)
from acetui_core.resources import peak_rss_mb
from acetui_core.routing import expert_load, fallbacks, record_expert_inputs, starved
from acetui_core.sparsegpt import obs_update, sparsegpt_prune
from acetui_core.sparsity import Sparsity
from acetui_core.stats import ColumnStats
from acetui_core.streaming import LayerFeed, PrunedLayers, load_for_run, load_offloaded
from acetui_core.validate import check_against_model, check_config, resolve_seqlen

# Calibration windows go through a layer in batches of about this many tokens: enough rows for full-speed
# matmuls (on one CPU core, SmolLM2's linears run at the same speed from 128 to 4096 rows), few enough
# that a batch's temporaries (MLP intermediates, attention, the statistics' squares) stay small next to
# the activations kept between layers (on SmolLM2, 4096 -> 1024 tokens: ~100 MB less peak RSS).
CALIB_TOKENS_PER_BATCH = 512


class _StopForward(Exception):
    """Ends a forward pass early: once layer 0's inputs are captured, or a layer's last linear input is recorded."""


def _to(value, device):
    """Move tensors (also inside tuples, lists and dicts) to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def _module_device(module) -> torch.device:
    return next(module.parameters()).device


def _move_all_but_layers(model, layers, device) -> None:
    """Put embeddings, rotary tables, norms and the head on ``device``; decoder layers stay where they are."""
    inside = {id(m) for layer in layers for m in layer.modules()}
    for module in model.modules():
        if id(module) in inside:
            continue
        for param in module.parameters(recurse=False):
            param.data = param.data.to(device)
        for name, buffer in module.named_buffers(recurse=False):
            module._buffers[name] = buffer.to(device)


def _activation_device(loaded: Loaded, windows: torch.Tensor, hidden_size: int) -> torch.device:
    """Keep calibration activations on the GPU only when two copies (the most the loop holds: with output
    fidelity or OWL) use under a quarter of its free memory."""
    if loaded.device.type != "cuda":
        return loaded.device
    need = 2 * windows.numel() * hidden_size * torch.finfo(loaded.dtype).bits // 8
    free, _ = torch.cuda.mem_get_info(loaded.device)
    return loaded.device if need < free / 4 else torch.device("cpu")


def _keep(hidden: torch.Tensor, keep_on: torch.device) -> torch.Tensor:
    """Hidden states where the layer loop keeps them: a GPU run whose activations do not fit on the GPU
    keeps them in pinned CPU memory, so each batch's copy to the GPU is fast."""
    if keep_on.type == "cpu" and hidden.device.type == "cuda":
        return hidden.to("cpu").pin_memory()
    return hidden.to(keep_on)


@torch.no_grad()
def _capture_layer0_inputs(loaded: Loaded, windows: torch.Tensor, batch: int, keep_on) -> list[tuple]:
    """Run the model up to decoder layer 0 and keep, per batch, its hidden states and keyword arguments
    (attention mask, position ids, rotary embeddings)."""
    model, layers = loaded.model, decoder_layers(loaded.model)
    if not hasattr(model, "hf_device_map"):
        _move_all_but_layers(model, layers, loaded.device)
    captured = []

    def grab(module, args, kwargs):
        hidden = args[0] if args else kwargs.pop("hidden_states")
        kwargs = {k: v for k, v in kwargs.items() if k not in ("past_key_value", "past_key_values", "use_cache")}
        captured.append((_keep(hidden.contiguous(), keep_on), _to(kwargs, keep_on)))  # written over in place
        raise _StopForward

    hook = layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        for start in range(0, len(windows), batch):
            with contextlib.suppress(_StopForward):
                model(input_ids=windows[start : start + batch].to(loaded.device), use_cache=False)
    finally:
        hook.remove()
    return captured


def _layer_forward(layer, hidden, kwargs, device):
    out = layer(hidden.to(device), **_to(kwargs, device))
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()  # with autograd on, the accumulators would keep every batch's activations alive
def _gather_stats(
    layer,
    linears,
    inputs,
    device,
    hessian: bool = False,
    inverse_scales: dict | None = None,
    dense_outputs: list | None = None,
    moe_calibration: str = "routed",
) -> dict[str, ColumnStats]:
    """One pass of the calibration inputs through ``layer``, recording what enters every linear (an
    expert's slices: the tokens ``moe_calibration`` gives it, ``acetui_core.routing``).

    Linears fed the same tensor (q/k/v, gate/up) share one computation of its column sums. Once the
    last linear's input is recorded the pass stops: its output, and the rest of the layer, feed no
    linear of this layer (the pruned pass recomputes them), which saves that linear's matmul. Unless
    ``dense_outputs`` is a list (output fidelity): the pass then runs to the end and appends each batch's
    dense output to it, for the pruned pass to compare with and drop (at most one extra copy of the
    activations, which the pruned pass replaces as it goes)."""
    scales = inverse_scales or {}
    stats = {
        name: ColumnStats(weight_matrix(m).shape[1], device, hessian=hessian, inverse_scale=scales.get(name))
        for name, m in linears.items()
    }
    last = {"input": None, "sums": None}
    seen: set[str] = set()

    def record(name, x):
        if x is not None:  # None: an expert this batch sent no token
            if last["input"] is not x:
                last["input"], last["sums"] = x, ColumnStats.column_sums(x, gram=hessian)
            stats[name].add(x, last["sums"])
        seen.add(name)
        if len(seen) == len(linears) and dense_outputs is None:
            raise _StopForward

    hooks = [
        m.owner.register_forward_pre_hook(lambda m, args, n=name: record(n, args[0]))
        for name, m in linears.items()
        if m.param == "weight"
    ]
    try:
        with record_expert_inputs(linears, record, moe_calibration):
            for hidden, kwargs in inputs:
                seen.clear()
                with contextlib.suppress(_StopForward):
                    out = _layer_forward(layer, hidden, kwargs, device)
                    if dense_outputs is not None:
                        dense_outputs.append(out.to(hidden.device))
    finally:
        for h in hooks:
            h.remove()
        last.clear()
    return stats


def _layer_stats(
    index,
    layer,
    linears,
    inputs,
    loaded,
    config,
    method,
    device,
    dense_outputs: list | None = None,
    experts: Experts | None = None,
) -> dict[str, ColumnStats]:
    """Every linear's calibration statistics, checked finite. ``--varp-form inverse`` needs the scale of
    a linear's whole input before its ``E[1/(1 - (x/s)^2)]`` can be summed: with ``--varp-scale rms|max``
    a first pass measures it. ``dense_outputs``: see ``_gather_stats``. An expert that the router starved
    (``acetui_core.routing``) is gathered again over every token; ``experts`` receives the token load and
    which experts fell back."""
    if not method.calibrated(config):
        return {}
    hessian = method.score is None or config.update == "obs" or config.fidelity

    def gather(matrices, calibration, outputs=None):
        scales = None
        if config.varp_form == "inverse":
            if config.varp_scale == "none":
                scales = dict.fromkeys(matrices, 1.0)
            else:
                measured = _gather_stats(layer, matrices, inputs, device, moe_calibration=calibration)
                scales = {name: s.scale(config.varp_scale) for name, s in measured.items()}
        return _gather_stats(
            layer, matrices, inputs, device, hessian, scales, dense_outputs=outputs, moe_calibration=calibration
        )

    stats = gather(linears, config.moe_calibration, dense_outputs)
    routed = {name: s.tokens for name, s in stats.items()}
    hungry = starved(linears, routed) if config.moe_calibration == "routed" else {}
    if hungry:
        stats.update(gather({name: linears[name] for name in hungry}, "all"))
    if experts is not None:
        experts.load += expert_load(index, linears, routed)
        experts.fallbacks += fallbacks(index, hungry)
    for name, s in stats.items():
        if not s.is_finite():
            hint = "" if loaded.dtype == torch.float32 else " (try --dtype float32)"
            raise UserError(
                f"Calibration activations entering layer {index} {name} contain NaN or inf; "
                f"nothing was pruned there{hint}."
            )
    return stats


def _dense_weight(index, name, matrix) -> torch.Tensor:
    W = weight_matrix(matrix).float()  # the weight itself when it is float32, else a float32 copy
    if not torch.isfinite(W).all():
        raise UserError(
            f"The weights of layer {index} {name} contain NaN or inf; the checkpoint is damaged "
            f"and nothing was pruned there."
        )
    return W


def _scores(method, W, stats, config, where: str) -> torch.Tensor:
    scores = method.score(W, stats, config)  # a plug-in scores a copy of W (acetui_core.plugins)
    if method.source != "built-in":
        check_scores(method, scores, W.shape, where)
        scores = scores.to(W.device)  # a plug-in may answer on another device than the weight's
    return scores


def _choose_mask(
    W, scores, stats: ColumnStats | None, config, sparsity
) -> tuple[torch.Tensor, float | None, MaskChoice]:
    """The metric's mask and how it was chosen: an N:M pattern's groups taken in a permuted input order
    (``--permute``), then DSnoT's swaps (``--refine dsnot``, in that same order so N:M groups stay whole).
    ``--update obs`` comes after, on the refined mask."""
    order = None
    if config.permute != "none":
        order = channel_permutation(scores, sparsity.n, sparsity.m, config.permute)
    mask, threshold = prune_mask(scores, sparsity, config.group, order)
    choice = MaskChoice(retained=retained_fraction(scores, mask))
    if order is not None:
        choice.retained_unpermuted = retained_fraction(scores, nm_mask(scores, sparsity.n, sparsity.m)[0])
        choice.permutation = order.tolist()
    if config.refine == "dsnot":
        assert stats is not None, "--refine dsnot reads calibration statistics (Method.calibrated)"
        columns = order if order is not None else torch.arange(W.shape[1], device=W.device)
        settings = DSnoTSettings(config.dsnot_cycles, config.dsnot_threshold, config.dsnot_var_power)
        mean = stats.s / config.nsamples  # the reference code's scale: summed over tokens, averaged over windows
        refined, choice.refinement = refine(
            W[:, columns],
            mask[:, columns],
            scores[:, columns],
            mean[columns],
            stats.variance[columns],
            settings,
            m=sparsity.m,
        )
        mask[:, columns] = refined
    return mask, threshold, choice


def _prune_layer(index, layer, inputs, loaded, config, method, sparsity, device, masks, dense_outputs, experts):
    """Gather statistics over every calibration token, then score, mask and write back each linear
    (and its pruned positions to ``masks`` when kept)."""
    linears = prunable_linears(layer)
    stats = _layer_stats(index, layer, linears, inputs, loaded, config, method, device, dense_outputs, experts)
    records = []
    for name, matrix in linears.items():
        start = time.perf_counter()
        W = _dense_weight(index, name, matrix)
        histogram, fidelity, choice = None, None, None
        dense = W.clone() if config.fidelity and name in stats else None
        if method.score is None:
            W = sparsegpt_prune(W, stats[name].hessian, sparsity, f"layer {index} {name}")
        else:
            scores = _scores(method, W, stats.get(name), config, f"layer {index} {name}")
            mask, threshold, choice = _choose_mask(W, scores, stats.get(name), config, sparsity)
            if config.update == "obs":
                W = obs_update(W, stats[name].hessian, mask, f"layer {index} {name}")
            else:
                W.masked_fill_(mask, 0)
            histogram = histograms.histogram(scores, threshold, pruned=mask)
        stored = matrix.weight
        if W.data_ptr() != stored.data_ptr():
            set_weight_matrix(matrix, W.to(stored.dtype))
        achieved = 1 - torch.count_nonzero(stored).item() / stored.numel()  # counted from the weight itself
        if dense is not None:
            fidelity = linear_fidelity(dense, W, stats[name].xtx)
        if masks is not None:
            masks.add(index, name, weight_matrix(matrix) == 0)
        records.append(
            LinearRecord(
                name=name,
                d_out=W.shape[0],
                d_in=W.shape[1],
                sparsity=achieved,
                seconds=time.perf_counter() - start,
                act_stats=stats[name].summary() if name in stats else None,
                histogram=histogram,
                fidelity=fidelity,
                choice=choice,
                kind=matrix.kind,
                tokens=stats[name].tokens if name in stats else None,
            )
        )
    return records, stats


@torch.no_grad()
def _owl_allocation(loaded, layers, inputs, config, method, sparsity, emit) -> list[LayerAllocation]:
    """OWL's statistics pass (as OWL's code does it): every decoder layer, dense, on the outputs of the
    dense layers before it, scored with the chosen metric; then each layer's sparsity from its outlier
    ratio (``acetui_core.allocation``). Costs one more pass of statistics and forwards than pruning."""
    ratios = []
    inputs = [(hidden.clone(), kwargs) for hidden, kwargs in inputs]  # advanced here; pruning starts from layer 0's
    feed = _feed(loaded)  # layers reach the compute device as in the pruning loop (streamed, or to a GPU)
    try:
        for index, layer in enumerate(layers):
            emit(Stage("outlier ratios", index, len(layers)))
            device = _module_device(layer) if feed is None else loaded.device
            if feed is not None:
                feed.enter(index)
            linears = prunable_linears(layer)
            stats = _layer_stats(index, layer, linears, inputs, loaded, config, method, device)
            scores = [
                _scores(method, _dense_weight(index, name, m), stats.get(name), config, f"layer {index} {name}")
                for name, m in linears.items()
            ]
            ratios.append(outlier_ratio(scores, config.owl_m))
            del scores
            _advance(layer, inputs, device)
            if feed is not None:
                feed.leave(index)
    finally:
        if feed is not None:
            feed.close()
    emit(Stage("outlier ratios", len(layers), len(layers)))
    sizes = [sum(weight_matrix(m).numel() for m in prunable_linears(layer).values()) for layer in layers]
    allocated = owl_sparsities(ratios, sizes, sparsity.ratio, config.owl_lambda)
    return [LayerAllocation(i, r, s) for i, (r, s) in enumerate(zip(ratios, allocated, strict=True))]


def _peak_memory(device: torch.device) -> tuple[float, float | None]:
    rss_mb = peak_rss_mb()
    gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return rss_mb, gpu_mb


@dataclass
class Pruned:
    """What the layer loop reports: the fields of ``RunResult`` it knows."""

    layers: list[LinearSparsity]
    overall_sparsity: float
    prune_seconds: float
    calibration: Calibration | None
    allocation: list[LayerAllocation] | None = None
    permutations: dict[str, list[int]] | None = None  # --permute: each linear's input order, by weight name
    kinds: dict[str, float] | None = None
    experts: Experts | None = None


@dataclass
class Evaluation:
    """What evaluation reports: the fields of ``RunResult`` it knows."""

    ppl_wikitext2: float | None = None
    ppl_windows: int | None = None
    ppl_partial: bool = False
    ppl_seqlen: int | None = None
    zeroshot: dict[str, TaskAccuracy] | None = None
    window_losses: WindowLosses | None = None
    task_outcomes: dict[str, TaskOutcomes] | None = None


def prune(
    loaded: Loaded,
    config: RunConfig,
    on_event=None,
    cancel: threading.Event | None = None,
    masks_path: Path | None = None,
    release=None,
) -> Pruned:
    """Prune ``loaded.model`` in place; return the per-linear sparsities and timing. With
    ``config.keep_masks`` the masks go to ``masks_path`` (``acetui_core.maskfile``). ``release(index,
    layer)`` sees each pruned layer before it leaves the compute device (a streamed run writes it out)."""
    if config.keep_masks and masks_path is None:
        raise UserError("--keep-masks needs a run store to keep the masks beside; run it through acetui prune.")
    emit = on_event or (lambda event: None)
    method, sparsity = get_method(config.method), config.sparsity_spec
    layers = decoder_layers(loaded.model)
    check_layout(loaded.model)  # a weight the table of layouts does not know stops the run before any work
    for index, layer in enumerate(layers):  # an N:M pattern that does not fit fails here, before calibration
        for name, module in prunable_linears(layer).items():
            check_nm_fits(sparsity, weight_matrix(module).shape[1], f"layer {index} {name}")
    layout = expert_layout(loaded.model)
    experts = Experts(layout, config.moe_calibration) if layout is not None and method.calibrated(config) else None
    emit(
        RunStarted(
            config.model, config.method, config.sparsity, len(layers), str(loaded.device), device_name(loaded.device)
        )
    )

    windows, calibration = None, None
    if method.calibrated(config):
        seqlen = resolve_seqlen(config.seqlen, loaded.context_length)
        emit(Stage("calibration", 0, config.nsamples))
        ids, source = tokenized_calibration(loaded.tokenizer, config.calib)
        windows = calibration_windows(ids, config.nsamples, seqlen, config.seed)
        calibration = Calibration(
            source=source,
            nsamples=config.nsamples,
            seqlen=seqlen,
            seed=config.seed,
            fingerprint=content_identity(source),
        )
        emit(Stage("calibration", config.nsamples, config.nsamples))

    started = time.perf_counter()
    inputs = []
    if windows is not None:
        hidden_size = loaded.model.config.hidden_size
        keep_on = _activation_device(loaded, windows, hidden_size)
        batch = max(1, CALIB_TOKENS_PER_BATCH // windows.shape[1])
        inputs = _capture_layer0_inputs(loaded, windows, batch, keep_on)

    allocation = None
    if config.allocation == "owl":
        allocation = _owl_allocation(loaded, layers, inputs, config, method, sparsity, emit)
    summaries: list[LinearSparsity] = []
    permutations: dict[str, list[int]] = {}
    prefixes = {id(module): name for name, module in loaded.model.named_modules()}
    feed = _feed(loaded, release)
    try:
        with mask_writer(masks_path if config.keep_masks else None) as masks:
            for index, layer in enumerate(layers):
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                emit(LayerStarted(index, len(layers)))
                layer_start = time.perf_counter()
                device = _module_device(layer) if feed is None else loaded.device
                if feed is not None:
                    feed.enter(index)
                dense_outputs: list[torch.Tensor] | None = [] if config.fidelity and inputs else None
                target = sparsity if allocation is None else Sparsity(ratio=allocation[index].sparsity)
                linears, stats = _prune_layer(
                    index, layer, inputs, loaded, config, method, target, device, masks, dense_outputs, experts
                )
                agreement = OutputAgreement() if dense_outputs is not None else None
                if calibration is not None:
                    calibration.tokens_per_linear = max(s.tokens for s in stats.values())
                # The last layer's outputs feed no layer: computed only to compare them with the dense ones.
                if index < len(layers) - 1 or agreement is not None:
                    _advance(layer, inputs, device, dense_outputs, agreement)
                if feed is not None:
                    feed.leave(index)
                fidelity = agreement.result() if agreement else None
                seconds = time.perf_counter() - layer_start
                emit(LayerPruned(LayerRecord(index, len(layers), seconds, linears, fidelity=fidelity)))
                summaries += [LinearSparsity(index, r.name, r.sparsity, r.seconds, r.kind, r.size) for r in linears]
                for r in linears:
                    if r.choice is not None and r.choice.permutation is not None:
                        permutations[f"{prefixes[id(layer)]}.{r.name}.weight"] = r.choice.permutation
    finally:
        if feed is not None:
            feed.close()
    prune_seconds = time.perf_counter() - started
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device)

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
        permutations if permutations else None,
        kind_sparsity(summaries),
        experts,
    )


@torch.no_grad()
def _advance(layer, inputs, device, dense_outputs=None, agreement=None) -> bool:
    """Run every batch of ``inputs`` through ``layer`` and write its output over the batch's input, which
    nothing needs any more: the loop holds one copy of the activations, not two (Wanda's code keeps
    inputs and outputs). Outputs are compared on the way with the dense outputs when there are some,
    each dropped once compared. Returns whether the layer returns a tuple (``_Replay`` must do the same)."""
    as_tuple = False
    for hidden, kwargs in inputs:
        out = layer(hidden.to(device), **_to(kwargs, device))
        as_tuple = isinstance(out, tuple)
        hidden.copy_(out[0] if as_tuple else out)
        if agreement is not None:
            agreement.add(dense_outputs.pop(0), hidden)
    return as_tuple


def _feed(loaded: Loaded, release=None) -> LayerFeed | None:
    """How layers reach the compute device: a ``LayerFeed``, or None for a model accelerate has already
    spread over devices (compare/sweep reuse a model placed for evaluation), whose layers run where they are."""
    if hasattr(loaded.model, "hf_device_map"):
        return None
    return LayerFeed(loaded.model, loaded.device, loaded.streamed, release)


def _linear_sizes(layers) -> list[int]:
    return [weight_matrix(m).numel() for layer in layers for m in prunable_linears(layer).values()]


def place_for_eval(loaded: Loaded) -> None:
    """Put the whole model on the compute device for evaluation when it fits; otherwise let accelerate
    spread it over GPU and CPU."""
    model: torch.nn.Module = loaded.model  # as a Module: transformers' wrapper of ``to`` confuses mypy
    if hasattr(model, "hf_device_map") or loaded.device.type != "cuda":
        return
    need = sum(p.numel() * p.element_size() for p in model.parameters())
    free, _ = torch.cuda.mem_get_info(loaded.device)
    if need < free * 0.8:
        model.to(loaded.device)
    else:
        from accelerate import dispatch_model, infer_auto_device_map

        device_map = infer_auto_device_map(
            model, max_memory={loaded.device.index or 0: int(free * 0.8), "cpu": "1000GiB"}
        )
        dispatch_model(model, device_map=device_map)


class _Replay(nn.Module):
    """Stands in for the decoder stack: returns the hidden states a layer-by-layer pass already computed,
    one batch per call, so the model's own forward applies its final norm and head (and whatever its
    family adds there, such as Gemma's logit soft-capping)."""

    def __init__(self, outputs: list[torch.Tensor], as_tuple: bool, device: torch.device):
        super().__init__()
        self.outputs, self.as_tuple, self.device = iter(outputs), as_tuple, device

    def forward(self, *args, **kwargs):
        hidden = next(self.outputs).to(self.device)  # one batch at a time on the GPU, not every window's
        return (hidden,) if self.as_tuple else hidden


@torch.no_grad()
def streamed_perplexity(loaded: Loaded, streamed, ids, seqlen, limit=None, on_event=None, cancel=None):
    """WikiText-2 perplexity of a model whose layers are read from ``streamed`` one at a time: every window
    goes through layer 0, then all of them through layer 1, and so on, in the same batches as
    ``evaluate.perplexity``'s full forward pass (and to the same numbers). Returns what it returns."""
    total = ids.numel() // seqlen
    windows = min(total, limit) if limit else total
    tokens = ids[: windows * seqlen].reshape(windows, seqlen)
    batch = max(1, EVAL_TOKENS_PER_BATCH // seqlen)
    hidden_size = loaded.model.config.hidden_size
    inputs = _capture_layer0_inputs(loaded, tokens, batch, _activation_device(loaded, tokens, hidden_size))
    layers = decoder_layers(loaded.model)
    feed = LayerFeed(loaded.model, loaded.device, streamed)
    as_tuple = False
    try:
        for index in range(len(layers)):
            if cancel is not None and cancel.is_set():
                raise Cancelled()
            if on_event:
                on_event(Stage("wikitext2", index, len(layers)))
            as_tuple = _advance(feed.enter(index), inputs, loaded.device)
            feed.leave(index)
    finally:
        feed.close()
    stack = layers._modules
    layers._modules = {"0": _Replay([hidden for hidden, _ in inputs], as_tuple, loaded.device)}
    nll: list[float] = []
    try:
        for start in range(0, windows, batch):
            window = tokens[start : start + batch].to(loaded.device)
            nll += windows_nll(loaded.model(input_ids=window, use_cache=False).logits, window)
    finally:
        layers._modules = stack
    if on_event:
        on_event(Stage("wikitext2", len(layers), len(layers)))
    return window_losses(nll, seqlen, limit), total


def evaluate(loaded: Loaded, config: RunConfig, on_event=None, cancel=None, pruned_folder=None) -> Evaluation:
    """Perplexity and zero-shot of the pruned model: ``loaded`` itself or, for a streamed run, the pruned
    checkpoint in ``pruned_folder`` (perplexity layer by layer; zero-shot through accelerate's offloading)."""
    results = Evaluation()
    if not config.evals:
        return results
    streamed = loaded.streamed.reading(pruned_folder) if loaded.streamed is not None else None
    if streamed is None:
        place_for_eval(loaded)
    device = loaded.device if not hasattr(loaded.model, "hf_device_map") else None
    if "wikitext2" in config.evals:
        seqlen = resolve_seqlen(config.eval_seqlen, loaded.context_length, "--eval-seqlen")
        ids = wikitext2_test_ids(loaded.tokenizer)
        if streamed is None:
            losses, total = perplexity(loaded.model, ids, seqlen, config.eval_limit, device, on_event, cancel)
        else:
            losses, total = streamed_perplexity(loaded, streamed, ids, seqlen, config.eval_limit, on_event, cancel)
        used = len(losses.nll)
        results = replace(
            results,
            ppl_wikitext2=ppl(losses),
            ppl_windows=used,
            ppl_partial=used < total,
            ppl_seqlen=seqlen,
            window_losses=losses,
        )
    if "zeroshot" in config.evals:
        from acetui_core.zeroshot import evaluate_zeroshot

        model = loaded.model
        if streamed is not None:
            model = load_offloaded(pruned_folder, loaded.dtype, loaded.device)
        results.zeroshot, results.task_outcomes = evaluate_zeroshot(
            model,
            loaded.tokenizer,
            config.tasks,
            limit=config.zeroshot_limit,
            batch_size=config.batch_size,
            on_event=on_event,
            cancel=cancel,
        )
    return results


def run(
    config: RunConfig,
    on_event=None,
    cancel: threading.Event | None = None,
    loaded: Loaded | None = None,
    masks_path: Path | None = None,
) -> RunResult:
    """Check, load (unless given), prune, save, evaluate; emit ``RunFinished`` and return the result.
    ``masks_path``: where ``--keep-masks`` keeps the masks."""
    config = check_config(config)
    if loaded is None:
        loaded = load_for_run(
            config.model, device=config.device, dtype=config.dtype, offload=config.offload, on_event=on_event
        )
    check_against_model(config, loaded.context_length)
    with contextlib.ExitStack() as cleanup:
        out = None  # a streamed run writes each pruned layer as it leaves: to --save, or to scratch for evaluation
        if loaded.streamed is not None and (config.save or config.evals):
            out = PrunedLayers(loaded, config.save, config.overwrite)
            cleanup.callback(out.close)
        pruned = prune(loaded, config, on_event, cancel, masks_path, release=out.release if out else None)
        # Saved before evaluation, so a failed or cancelled evaluation never loses the pruned model.
        pruned_folder = out.finish() if out else None
        saved_to: str | None
        if out is None and config.save:
            saved_to = save_checkpoint(loaded.model, loaded.tokenizer, config.save, config.overwrite)
        else:
            saved_to = str(pruned_folder) if config.save else None
        if saved_to and pruned.permutations:
            write_permutations(saved_to, config.sparsity_spec, pruned.permutations)
        try:
            scores = evaluate(loaded, config, on_event, cancel, pruned_folder)
        except Cancelled:
            raise
        except Exception as error:  # the layers are recorded; say where the pruned weights are, or how to keep them
            what = (
                str(error) if isinstance(error, UserError) else f"Evaluation failed ({type(error).__name__}: {error})."
            )
            kept = (
                f"The pruned model is saved in {saved_to}."
                if saved_to
                else "The pruned weights were not kept; pass --save DIR to keep them next time."
            )
            raise UserError(f"{what} {kept}") from error
    rss_mb, gpu_mb = _peak_memory(loaded.device)
    result = RunResult(
        model=config.model,
        method=config.method,
        label=config.label,
        sparsity=config.sparsity,
        group=config.group,
        **{k: v for k, v in _fields(pruned).items() if k != "permutations"},  # they go to --save's sidecar
        **_fields(scores),
        peak_rss_mb=rss_mb,
        peak_gpu_mb=gpu_mb,
        device=str(loaded.device),
        dtype=str(loaded.dtype).removeprefix("torch."),
        saved_to=saved_to,
        model_fingerprint=loaded.fingerprint,
        masks=str(masks_path) if config.keep_masks else None,
        method_fingerprint=get_method(config.method).fingerprint,
        config=config,
    )
    if on_event:
        on_event(RunFinished(result))
    return result


def _fields(record) -> dict:
    """A dataclass's fields as keyword arguments, nested records kept as they are."""
    return {f.name: getattr(record, f.name) for f in fields(record)}
