"""What the registry knows of a pruning method, built-in (``acetui_core.metrics``) or plug-in
(``acetui_core.plugins``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    paper_name: str
    description: str
    score: Callable | None  # None: not a score-then-mask method (SparseGPT solves its own update)
    needs_activations: bool = True
    uses_varp: bool = False  # reads V_j, so --varp-scale and --varp-form change it
    source: str = "built-in"  # or where a plug-in came from: a file, a module, an entry point's package
    fingerprint: str | None = None  # a plug-in's file: its SHA-256, recorded with the run

    def calibrated(self, config) -> bool:
        """Whether a run of this method with ``config`` reads calibration activations: ``--update obs``
        needs the Hessian even for magnitude, ``--refine dsnot`` the inputs' means and variances."""
        return self.needs_activations or config.update == "obs" or config.refine == "dsnot"
