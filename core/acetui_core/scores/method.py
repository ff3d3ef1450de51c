"""What the registry knows of a pruning method, built-in (``acetui_core.scores.metrics``) or plug-in
(``acetui_core.scores.plugins``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from acetui_core.basics.choices import Refine, SparsityGroup, Update
from acetui_core.scores import sparsegpt

if TYPE_CHECKING:  # torch at run time only where scores exist: the settings (and the CLI's start) import this
    import torch

# The options of a score that only some methods read (``opts`` of ``acetui_core.scores.metrics``). A built-in
# method names those it reads (``Method.reads``); a run of it has the others put back to their defaults
# (``acetui_core.pruning.validate``) and left out of its comparison key (``acetui_core.analysis.rowlabels``),
# so they never split a cell. A plug-in is handed the options: it may read any of them.
SCORE_OPTIONS = frozenset({"squared_weight", "ria_alpha", "varp_scale", "varp_form"})
VARP_OPTIONS = frozenset({"varp_scale", "varp_form"})  # V_j's scale and form: what every VarP score reads


@dataclass(frozen=True)
class Method:
    name: str
    paper_name: str
    description: str
    score: Callable | None  # None: a method that chooses its own mask in ``mask_and_update`` (SparseGPT)
    needs_activations: bool = True
    reads: frozenset[str] = SCORE_OPTIONS  # which of SCORE_OPTIONS its score reads
    row_local: bool = False  # a row's scores read only that row of W (and the statistics): scored in row slices
    # Bytes per weight the score holds at its height from a float32 W, its scores included (``plan``): 4 for
    # one matrix made in place; RIA's quotients hold four. A plug-in's is not known: assumed four too.
    score_bytes: int = 16
    group: str = SparsityGroup.ROW  # which weights compete for unstructured sparsity in its reference code
    source: str = "built-in"  # or where a plug-in came from: a file, a module, an entry point's package
    fingerprint: str | None = None  # a plug-in's file: its SHA-256, recorded with the run
    # SparseGPT's hook: ``(W, H, where, *, sparsity, mask) -> W`` prunes with the Hessian ``H`` and updates
    # the remaining weights; ``--update obs`` gives a scored method's mask the same hook (``update``).
    mask_and_update: Callable | None = None

    def calibrated(self, config) -> bool:
        """Whether a run of this method with ``config`` reads calibration activations: ``--update obs``
        needs the Hessian even for magnitude, ``--refine dsnot`` the inputs' means and variances."""
        return self.needs_activations or config.update == Update.OBS or config.refine == Refine.DSNOT

    def update(self, config) -> Callable | None:
        """The mask-and-update hook a run of this method with ``config`` applies to each linear: the
        method's own, else under ``--update obs`` SparseGPT's with the method's mask; None: the masked
        weights are zeroed and the others stay."""
        if self.mask_and_update is not None:
            return self.mask_and_update
        return sparsegpt.mask_and_update if config.update == Update.OBS else None


def non_finite(scores: torch.Tensor) -> str | None:
    """ "NaN scores" or "infinite scores" when some score is not a finite number, None when every one is.
    NaN is named first: an overflow to inf times a zero weight makes both."""
    if scores.isfinite().all():
        return None
    return "NaN scores" if scores.isnan().any() else "infinite scores"
