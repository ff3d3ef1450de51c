"""What the runs of a store recorded about their masks (docs/methods.md): per run, the mean over its linears
of the retained score with and without --permute (and by kind of linear), DSnoT's swaps and error, and the
seconds the linears took per layer. Read from the store, nothing recomputed.

    python bench/methods_summary.py bench.db
"""

import sys
from statistics import fmean

from acetui_core.records import linear_kind
from acetui_core.store import Store

store = Store(sys.argv[1])
for listed in store.list_runs():
    run = store.get_run(listed.id)
    linears = [linear for layer in run.layers for linear in layer.linears]
    choices = [linear.choice for linear in linears if linear.choice]
    if not choices:
        continue
    line = f"{run.id} {run.label} {run.config.sparsity} permute={run.config.permute} refine={run.config.refine}"
    line += f" {run.status} layers={len(run.layers)}"
    line += f" linear-seconds/layer={sum(linear.seconds for linear in linears) / len(run.layers):.1f}"
    line += f" retained={fmean(c.retained for c in choices):.4f}"
    permuted = [c for c in choices if c.retained_unpermuted is not None]
    if permuted:
        line += f" unpermuted={fmean(c.retained_unpermuted for c in permuted):.4f}"
    refined = [c.refinement for c in choices if c.refinement]
    if refined:
        line += f" swaps/linear={fmean(r.swaps for r in refined):.0f}"
        line += f" error {fmean(r.error_before for r in refined):.4f} -> {fmean(r.error_after for r in refined):.4f}"
    print(line)
    if permuted:
        kinds: dict[str, list] = {}
        for linear in linears:
            kinds.setdefault(linear_kind(linear.name), []).append(linear.choice)
        print(
            "  by kind (retained/unpermuted):",
            ", ".join(
                f"{kind} {fmean(c.retained for c in cs):.4f}/{fmean(c.retained_unpermuted for c in cs):.4f}"
                for kind, cs in kinds.items()
            ),
        )
