"""``acetui overlap RUN_A RUN_B``: how much two runs' masks agree, per layer and per kind of linear."""

from __future__ import annotations

import json
from dataclasses import asdict

from acetui import options
from acetui_core.basics.texttable import text_table
from acetui_core.run.config import model_name
from acetui_core.run.records import linear_kind
from acetui_core.scores.maskfile import LinearOverlap, run_overlap, total
from acetui_core.storage.store import Store


def _table(rows: list[LinearOverlap], value) -> str:
    names = list(dict.fromkeys(r.name for r in rows))
    layers = sorted({r.layer for r in rows})
    body = [[str(layer), *(f"{value(total(rows, layer, name)):.3f}" for name in [*names, None])] for layer in layers]
    body.append(["all", *(f"{value(total(rows, name=name)):.3f}" for name in [*names, None])])
    return text_table(["layer", *(linear_kind(n) for n in names), "all"], body)


def overlap(
    run_a: options.RunId, run_b: options.RunId, store: options.StoreOption = None, as_json: options.JsonOption = False
) -> None:
    """Compare the masks of two runs kept with --keep-masks: per layer and kind of linear, the fraction of
    RUN_A's pruned positions RUN_B prunes too, and the Jaccard index of the two sets of pruned positions."""
    opened = Store(store, create=False)
    a, b = opened.get_run(run_a, layers=False), opened.get_run(run_b, layers=False)
    rows = run_overlap(a, b, (opened.masks_kept(a), opened.masks_kept(b)))
    if as_json:
        print(json.dumps({"run_a": a.id, "run_b": b.id, "linears": [asdict(r) for r in rows]}, indent=2))
        return
    print(
        f"Masks of {a.id} ({a.label} at {a.config.sparsity}) and {b.id} ({b.label} at {b.config.sparsity}), "
        f"{model_name(a.config.model)}."
    )
    print(f"\nShared: of {a.id}'s pruned positions, the fraction {b.id} prunes too")
    print(_table(rows, lambda r: r.shared_fraction))
    print("\nJaccard: pruned by both over pruned by either")
    print(_table(rows, lambda r: r.jaccard))
