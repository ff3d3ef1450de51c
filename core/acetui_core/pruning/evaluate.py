"""Evaluating a pruned model: WikiText-2 perplexity (computed as Wanda's ``eval_ppl``, by a full forward
pass or, for a streamed model, layer by layer from its pruned checkpoint) and a run's whole evaluation
(perplexity and zero-shot accuracy, ``acetui_core.pruning.zeroshot``) as the fields of ``RunResult`` it fills."""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
from dataclasses import dataclass, replace

import torch
from torch import nn

from acetui_core.basics.choices import EvalKind, StageName
from acetui_core.basics.errors import check_stop
from acetui_core.modeling.data import wikitext2_test_identity, wikitext2_test_ids
from acetui_core.modeling.layerfeed import LayerFeed
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import Loaded
from acetui_core.modeling.placement import (
    StopForward,
    activation_device,
    advance,
    all_but_layers_on,
    capture_layer0_inputs,
    place_for_eval,
)
from acetui_core.modeling.streaming import load_offloaded
from acetui_core.pruning.validate import resolve_seqlen
from acetui_core.run.config import RunConfig
from acetui_core.run.events import OnEvent, Stage
from acetui_core.run.records import TaskAccuracy, TaskOutcomes, WindowLosses

EVAL_TOKENS_PER_BATCH = 4096  # windows per forward pass = this // window length (at least 1)
# The head makes logits for this many (position x vocabulary) entries at a time: 128 MB in float32, 128
# positions of Gemma 3's 262k vocabulary. A batch's whole logits (4096 tokens x 262k, 4.3 GB in float32)
# set the peak of a run that evaluated them at once.
LOGIT_ENTRIES_PER_CHUNK = 1 << 25
MAX_EXP = math.log(sys.float_info.max)


def eval_batch(seqlen: int) -> int:
    """WikiText-2 windows of ``seqlen`` tokens per forward pass (the last batch may hold fewer)."""
    return max(1, EVAL_TOKENS_PER_BATCH // seqlen)


@torch.no_grad()
def perplexity(
    model,
    ids: torch.Tensor,
    seqlen: int,
    limit: int | None = None,
    device=None,
    on_event: OnEvent | None = None,
    cancel=None,
) -> tuple[WindowLosses, int]:
    """Cut WikiText-2's test token ids into ``numel // seqlen`` windows (the first ``limit`` if given) and
    return each window's NLL, its mean next-token loss times ``seqlen`` (Wanda's convention), and the
    number of windows the test set holds; ``ppl`` gives the perplexity."""
    total = ids.numel() // seqlen
    windows = min(total, limit) if limit else total
    device = device or next(model.parameters()).device
    batch = eval_batch(seqlen)
    nll: list[float] = []
    if on_event:  # before the first batch, so the stage shows for the whole evaluation
        on_event(Stage(StageName.WIKITEXT2, 0, windows))
    for start in range(0, windows, batch):
        check_stop(cancel, f"during the WikiText-2 evaluation, after window {start} of {windows}")
        stop = min(start + batch, windows)
        inputs = ids[start * seqlen : stop * seqlen].reshape(stop - start, seqlen).to(device)
        nll += batch_nll(model, inputs)
        if on_event:
            on_event(Stage(StageName.WIKITEXT2, stop, windows))
    return window_losses(nll, seqlen, limit), total


def window_losses(nll: list[float], seqlen: int, limit: int | None) -> WindowLosses:
    return WindowLosses("wikitext2", "test", seqlen, limit, nll, [seqlen] * len(nll))


def batch_nll(model, inputs: torch.Tensor, hidden: torch.Tensor | None = None, as_tuple: bool = False) -> list[float]:
    """The NLL of each window of a batch: its mean next-token loss times its length.

    The decoder stack runs once (or its outputs ``hidden`` come from a layer-by-layer pass, ``as_tuple``
    saying whether a layer returns a tuple); then the model's own forward (its final norm and head, and
    whatever its family adds there, such as Gemma's logit soft-capping) makes the logits of a few
    positions at a time (``logits_to_keep``, ``LOGIT_ENTRIES_PER_CHUNK``), never the whole batch's. A model
    whose forward cannot keep some logits is evaluated on its whole logits (``windows_nll``)."""
    chunked = "logits_to_keep" in inspect.signature(model.forward).parameters
    if hidden is None and not chunked:
        return windows_nll(model(input_ids=inputs, use_cache=False).logits, inputs)
    if hidden is None:
        hidden, as_tuple = _stack_output(model, inputs)
    layers = decoder_layers(model)
    stack = layers._modules
    layers._modules = {"0": _Replay([hidden], as_tuple, hidden.device, repeat=True)}
    try:
        if not chunked:
            return windows_nll(model(input_ids=inputs, use_cache=False).logits, inputs)
        windows, seqlen = inputs.shape
        vocabulary = model.get_output_embeddings().weight.shape[0]
        positions = min(seqlen - 1, max(1, LOGIT_ENTRIES_PER_CHUNK // (vocabulary * windows)))
        losses = torch.empty(windows, seqlen - 1, device=inputs.device)
        log_probs = torch.empty(windows * positions * vocabulary, device=inputs.device)  # reused: see windows_nll
        for start in range(0, seqlen - 1, positions):
            stop = min(start + positions, seqlen - 1)
            keep = torch.arange(start, stop, device=inputs.device)
            logits = model(input_ids=inputs, use_cache=False, logits_to_keep=keep).logits
            buffer = log_probs[: logits.numel()].view(logits.shape)
            losses[:, start:stop] = _token_losses(logits, inputs[:, start + 1 : stop + 1], buffer)
            del logits
    finally:
        layers._modules = stack
    return (losses.mean(dim=1).double() * seqlen).tolist()


def _stack_output(model, inputs: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The last decoder layer's output for ``inputs``; the forward stops there (no norm, no head)."""
    captured: dict = {}

    def grab(module, args, output):
        captured["as_tuple"] = isinstance(output, tuple)
        captured["hidden"] = output[0] if captured["as_tuple"] else output
        raise StopForward

    hook = decoder_layers(model)[-1].register_forward_hook(grab)
    try:
        with contextlib.suppress(StopForward):
            model(input_ids=inputs, use_cache=False)
    finally:
        hook.remove()
    return captured["hidden"], captured["as_tuple"]


def _token_losses(logits: torch.Tensor, targets: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Each position's next-token loss (``-log p(target)``); ``out`` holds the float32 log-probabilities."""
    torch.log_softmax(logits.float(), dim=-1, out=out)
    return -out.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def windows_nll(logits: torch.Tensor, inputs: torch.Tensor) -> list[float]:
    """``batch_nll`` from a batch's whole logits (a model whose forward cannot keep a few), to the same
    numbers: the same per-position losses, averaged the same way.

    One window at a time, into one reused buffer: a loss over the whole batch would add its float32 copy
    and log-softmax, and a fresh log-softmax per window, freed by one torch thread and allocated by
    another, grows glibc's per-thread heaps by about as much."""
    windows, seqlen = inputs.shape
    log_probs = torch.empty(seqlen - 1, logits.shape[-1], device=logits.device)
    losses = torch.empty(windows, seqlen - 1, device=logits.device)
    for row, (window, ids) in enumerate(zip(logits, inputs, strict=True)):
        losses[row] = _token_losses(window[:-1], ids[1:], log_probs)
    return (losses.mean(dim=1).double() * seqlen).tolist()


def ppl(losses: WindowLosses) -> float:
    """``exp(sum of window NLL / tokens)``, summed exactly (``math.fsum``): the same windows give the
    same perplexity whatever order or batches they were computed in."""
    mean_nll = math.fsum(losses.nll) / sum(losses.tokens)
    if math.isnan(mean_nll):  # a NaN loss (an overflow in the model): no perplexity, not an infinite one
        return math.nan
    # A model pruned to noise can exceed exp's range: its perplexity is reported as infinite, not a crash.
    return math.exp(mean_nll) if mean_nll < MAX_EXP else math.inf


@dataclass
class Evaluation:
    """What evaluation reports: the fields of ``RunResult`` it knows."""

    ppl_wikitext2: float | None = None
    ppl_windows: int | None = None
    ppl_partial: bool = False
    ppl_seqlen: int | None = None
    ppl_text: str | None = None
    zeroshot: dict[str, TaskAccuracy] | None = None
    window_losses: WindowLosses | None = None
    task_outcomes: dict[str, TaskOutcomes] | None = None


class _Replay(nn.Module):
    """Stands in for the decoder stack: returns the hidden states a layer-by-layer pass already computed,
    one batch per call, so the model's own forward applies its final norm and head (and whatever its
    family adds there, such as Gemma's logit soft-capping)."""

    def __init__(self, outputs: list[torch.Tensor], as_tuple: bool, device: torch.device, repeat: bool = False):
        super().__init__()
        self.outputs, self.as_tuple, self.device = iter(outputs), as_tuple, device
        self.hidden = outputs[0] if repeat else None  # ``repeat``: the one batch, at every call

    def forward(self, *args, **kwargs):
        hidden = self.hidden if self.hidden is not None else next(self.outputs)
        hidden = hidden.to(self.device)  # one batch at a time on the GPU, not every window's
        return (hidden,) if self.as_tuple else hidden


@torch.no_grad()
def streamed_perplexity(
    loaded: Loaded, streamed, ids, seqlen, limit=None, on_event: OnEvent | None = None, cancel=None
):
    """WikiText-2 perplexity of a model whose layers are read from ``streamed`` one at a time: every window
    goes through layer 0, then all of them through layer 1, and so on, in the same batches as
    ``evaluate.perplexity``'s full forward pass (and to the same numbers). Returns what it returns."""
    total = ids.numel() // seqlen
    windows = min(total, limit) if limit else total
    tokens = ids[: windows * seqlen].reshape(windows, seqlen)
    batch = eval_batch(seqlen)
    hidden_size = loaded.model.config.hidden_size
    inputs = capture_layer0_inputs(
        loaded, tokens, batch, activation_device(loaded, tokens, hidden_size), cancel, "WikiText-2"
    )
    layers = decoder_layers(loaded.model)
    feed = LayerFeed(loaded.model, loaded.device, streamed)
    as_tuple = False
    try:
        for index in range(len(layers)):
            check_stop(
                cancel,
                f"during the WikiText-2 evaluation, at layer {index} of {len(layers)} of its layer-by-layer pass",
            )
            if on_event:
                on_event(Stage(StageName.WIKITEXT2, index, len(layers)))
            as_tuple = advance(feed.enter(index), inputs, loaded.device)
            feed.leave(index)
    finally:
        feed.close()
    nll: list[float] = []
    with all_but_layers_on(loaded.model, loaded.device):  # the final norm and head, for these batches only
        for (hidden, _), start in zip(inputs, range(0, windows, batch), strict=True):
            check_stop(cancel, f"during the WikiText-2 evaluation, after window {start} of {windows}")
            window = tokens[start : start + batch].to(loaded.device)
            nll += batch_nll(loaded.model, window, hidden.to(loaded.device), as_tuple)
    if on_event:
        on_event(Stage(StageName.WIKITEXT2, len(layers), len(layers)))
    return window_losses(nll, seqlen, limit), total


def evaluate(
    loaded: Loaded, config: RunConfig, on_event: OnEvent | None = None, cancel=None, pruned_folder=None
) -> Evaluation:
    """Perplexity and zero-shot of the pruned model: ``loaded`` itself or, for a streamed run, the pruned
    checkpoint in ``pruned_folder`` (perplexity layer by layer; zero-shot through accelerate's offloading)."""
    results = Evaluation()
    if not config.evals:
        return results
    streamed = loaded.streamed.reading(pruned_folder) if loaded.streamed is not None else None
    if streamed is None:
        place_for_eval(loaded)
    device = loaded.device if not hasattr(loaded.model, "hf_device_map") else None
    if EvalKind.WIKITEXT2 in config.evals:
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
            ppl_text=wikitext2_test_identity(),
            window_losses=losses,
        )
    if EvalKind.ZEROSHOT in config.evals:
        from acetui_core.pruning.zeroshot import evaluate_zeroshot

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
