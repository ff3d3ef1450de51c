"""``acetui overlap RUN_A RUN_B``: how much two runs' masks agree, per layer and per kind of linear."""

from __future__ import annotations

import re
from dataclasses import asdict

from acetui import options
from acetui_core.basics.jsontext import json_text
from acetui_core.basics.texttable import text_table
from acetui_core.run.config import model_name
from acetui_core.run.records import linear_kind
from acetui_core.scores.maskfile import LinearOverlap, removal_difference, run_overlap, scope_difference, total
from acetui_core.storage.store import Store

EXPERT = re.compile(r"experts\.(\d+)\.")  # a routed expert's linear: mlp.experts.3.gate_up_proj


def _header(name: str) -> str:
    """A column's heading: the linear's kind, after its expert's number for a routed expert's linear
    (``mlp.experts.3.gate_up_proj`` -> ``e3 gate_up``), so that two experts' columns differ."""
    expert = EXPERT.search(name)
    return f"e{expert[1]} {linear_kind(name)}" if expert else linear_kind(name)


def _columns(rows: list[LinearOverlap]) -> list[str]:
    """The linears in the model's order, each kind of expert linear in expert order (a layer that removed
    an expert another layer kept would otherwise put that expert's column last)."""
    kinds = list(dict.fromkeys(EXPERT.sub("experts.*.", r.name) for r in rows))
    expert = {r.name: int(m[1]) if (m := EXPERT.search(r.name)) else -1 for r in rows}
    return sorted(expert, key=lambda name: (kinds.index(EXPERT.sub("experts.*.", name)), expert[name]))


def _table(rows: list[LinearOverlap], value) -> str:
    names = _columns(rows)
    present = {(r.layer, r.name) for r in rows}

    def cell(layer: int, name: str | None) -> str:  # "-": a linear this layer lacks (an expert removed there)
        return f"{value(total(rows, layer, name)):.3f}" if name is None or (layer, name) in present else "-"

    body = [[str(layer), *(cell(layer, name) for name in [*names, None])] for layer in sorted({r.layer for r in rows})]
    body.append(["all", *(f"{value(total(rows, name=name)):.3f}" for name in [*names, None])])
    return text_table(["layer", *(_header(n) for n in names), "all"], body)


def overlap(
    run_a: options.RunId, run_b: options.RunId, store: options.StoreOption = None, as_json: options.JsonOption = False
) -> None:
    """Compare the masks of two runs kept with --keep-masks: per layer and kind of linear, the fraction of
    RUN_A's pruned positions RUN_B prunes too, and the Jaccard index of the two sets of pruned positions."""
    opened = Store(store, create=False)
    a, b = opened.get_run(run_a, layers=False), opened.get_run(run_b, layers=False)
    rows = run_overlap(a, b, (opened.masks_kept(a), opened.masks_kept(b)))
    removal, scope = removal_difference(a, b), scope_difference(a, b)
    if as_json:
        linears = [asdict(r) for r in rows]
        print(json_text({"run_a": a.id, "run_b": b.id, "experts": removal, "scope": scope, "linears": linears}))
        return
    print(f"Masks of {a.id} ({a.title}) and {b.id} ({b.title}), {model_name(a.config.model)}.")
    for note in filter(None, (removal, scope)):
        print(note)
    print(f"\nShared: of {a.id}'s pruned positions, the fraction {b.id} prunes too")
    print(_table(rows, lambda r: r.shared_fraction))
    print("\nJaccard: pruned by both over pruned by either")
    print(_table(rows, lambda r: r.jaccard))
