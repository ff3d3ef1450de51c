"""What the finished runs of a store recorded about their masks and their cost (docs/methods.md), one row
per sparsity, calibration, method and variant (--permute, --refine), averaged over its seeds: the prune
seconds and what the variant adds to the plain run's, the seconds the linears took per layer, the
retained score with and without --permute, DSnoT's swaps per linear and the error it minimizes before and
after. Read from the store, nothing recomputed.

    python bench/methods_summary.py bench.db
"""

import sys
from statistics import fmean

from acetui_core.storage.store import Store

VARIANTS = ("plain", "lsa", "dsnot", "lsa + dsnot")


def variant(config) -> str:
    return " + ".join(part for part in (config.permute, config.refine) if part != "none") or "plain"


def order(cell) -> tuple:
    (sparsity, seqlen, label, name), _ = cell
    return sparsity, seqlen, label, VARIANTS.index(name) if name in VARIANTS else len(VARIANTS)


def mean(values) -> str:
    values = [value for value in values if value is not None]
    return f"{fmean(values):.4f}" if values else "-"


store = Store(sys.argv[1])
cells: dict[tuple, list] = {}
for listed in store.list_runs(status="finished"):
    run = store.get_run(listed.id)
    config = run.config
    cells.setdefault((config.sparsity, config.seqlen, config.label, variant(config)), []).append(run)

print("| sparsity | calibration | method | variant | runs | prune s | extra s | linear s/layer | retained | ", end="")
print("unpermuted | swaps/linear | error before | error after |")
print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (sparsity, seqlen, label, name), runs in sorted(cells.items(), key=order):
    seconds = fmean(run.results.prune_seconds for run in runs)
    plain = cells.get((sparsity, seqlen, label, "plain"))
    extra = f"{seconds - fmean(run.results.prune_seconds for run in plain):+.1f}" if plain and name != "plain" else "-"
    layers = [layer for run in runs for layer in run.layers]
    per_layer = sum(linear.seconds for layer in layers for linear in layer.linears) / len(layers)
    choices = [linear.choice for layer in layers for linear in layer.linears if linear.choice]
    refined = [choice.refinement for choice in choices if choice.refinement]
    swaps = f"{fmean(r.swaps for r in refined):.0f}" if refined else "-"
    print(
        f"| {sparsity} | {runs[0].config.nsamples}x{seqlen} | {label} | {name} | {len(runs)} | {seconds:.1f} | {extra} "
        f"| {per_layer:.1f} | {mean(c.retained for c in choices)} | {mean(c.retained_unpermuted for c in choices)} "
        f"| {swaps} | {mean(r.error_before for r in refined)} | {mean(r.error_after for r in refined)} |"
    )
