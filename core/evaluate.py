"""WikiText-2 perplexity, computed as Wanda's ``eval_ppl``."""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from acetui_core.events import Stage
from acetui_core.records import WindowLosses

EVAL_TOKENS_PER_BATCH = 4096  # windows per forward pass = this // window length (at least 1)
MAX_EXP = math.log(sys.float_info.max)


@torch.no_grad()
def perplexity(
    model, ids: torch.Tensor, seqlen: int, limit: int | None = None, device=None, on_event=None, cancel=None
) -> tuple[WindowLosses, int]:
    """Cut WikiText-2's test token ids into ``numel // seqlen`` windows (the first ``limit`` if given) and
    return each window's NLL, its mean next-token loss times ``seqlen`` (Wanda's convention), and the
    number of windows the test set holds; ``ppl`` gives the perplexity."""
    total = ids.numel() // seqlen
    windows = min(total, limit) if limit else total
    device = device or next(model.parameters()).device
    batch = max(1, EVAL_TOKENS_PER_BATCH // seqlen)
    nll: list[float] = []
    if on_event:  # before the first batch, so the stage shows for the whole evaluation
        on_event(Stage("wikitext2", 0, windows))
    for start in range(0, windows, batch):
        if cancel is not None and cancel.is_set():
            from acetui_core.errors import Cancelled

            raise Cancelled()
        stop = min(start + batch, windows)
        inputs = ids[start * seqlen : stop * seqlen].reshape(stop - start, seqlen).to(device)
        nll += windows_nll(model(input_ids=inputs, use_cache=False).logits, inputs)
        if on_event:
            on_event(Stage("wikitext2", stop, windows))
    return window_losses(nll, seqlen, limit), total


def window_losses(nll: list[float], seqlen: int, limit: int | None) -> WindowLosses:
    return WindowLosses("wikitext2", "test", seqlen, limit, nll, [seqlen] * len(nll))


def windows_nll(logits: torch.Tensor, inputs: torch.Tensor) -> list[float]:
    """The NLL of each window of a batch: its mean next-token loss times its length.

    One window at a time, into one reused buffer: the batch's logits (tokens x vocabulary, 800 MB for
    4096 tokens of a 49k vocabulary) are the largest tensor of an evaluation; a loss over the whole batch
    would add its float32 copy and log-softmax, and a fresh log-softmax per window, freed by one torch
    thread and allocated by another, grows glibc's per-thread heaps by about as much. log_softmax then
    nll_loss is what cross_entropy computes, to the bit."""
    seqlen = inputs.shape[1]
    log_probs = torch.empty(seqlen - 1, logits.shape[-1], device=logits.device)
    losses = []
    for window, ids in zip(logits, inputs, strict=True):
        torch.log_softmax(window[:-1].float(), dim=-1, out=log_probs)
        losses.append(F.nll_loss(log_probs, ids[1:]))
    return (torch.stack(losses).double() * seqlen).tolist()


def ppl(losses: WindowLosses) -> float:
    """``exp(sum of window NLL / tokens)``, summed exactly (``math.fsum``): the same windows give the
    same perplexity whatever order or batches they were computed in."""
    mean_nll = math.fsum(losses.nll) / sum(losses.tokens)
    # A model pruned to noise can exceed exp's range: its perplexity is reported as infinite, not a crash.
    return math.exp(mean_nll) if mean_nll < MAX_EXP else math.inf
