"""WikiText-2 perplexity, computed as Wanda's ``eval_ppl``."""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F

from acetui_core.events import Stage

EVAL_TOKENS_PER_BATCH = 4096  # windows per forward pass = this // window length (at least 1)
MAX_EXP = math.log(sys.float_info.max)


@torch.no_grad()
def perplexity(
    model, ids: torch.Tensor, seqlen: int, limit: int | None = None, device=None, on_event=None, cancel=None
) -> tuple[float, int, int]:
    """Cut the token ids into ``numel // seqlen`` windows (the first ``limit`` if given) and return
    ``(ppl, windows_used, windows_total)`` with ``ppl = exp(sum of window NLL / (windows * seqlen))``,
    where a window's NLL is its mean next-token loss times ``seqlen`` (Wanda's convention)."""
    total = ids.numel() // seqlen
    windows = min(total, limit) if limit else total
    device = device or next(model.parameters()).device
    batch = max(1, EVAL_TOKENS_PER_BATCH // seqlen)
    nll = 0.0
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
    return from_nll(nll, windows, seqlen), windows, total


def windows_nll(logits: torch.Tensor, inputs: torch.Tensor) -> float:
    """The summed NLL of a batch of windows: each window's mean next-token loss times its length.

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
    return (torch.stack(losses) * seqlen).sum().item()


def from_nll(nll: float, windows: int, seqlen: int) -> float:
    mean_nll = nll / (windows * seqlen)
    # A model pruned to noise can exceed exp's range: its perplexity is reported as infinite, not a crash.
    return math.exp(mean_nll) if mean_nll < MAX_EXP else math.inf
