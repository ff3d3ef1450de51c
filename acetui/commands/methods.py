"""``acetui methods``: what each method is, under the paper's name."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from acetui import preferences
from acetui_core.basics.errors import UserError
from acetui_core.scores.metrics import METHODS
from acetui_core.scores.plugins import available_methods


def methods() -> None:
    """List the pruning methods with a one-line description, the paper's name, and where each comes from
    (built in, an installed package's ``acetui.methods`` entry point, or a remembered plug-in). A
    remembered plug-in that cannot be imported is named after the table, with exit code 2."""
    table = Table(title="Pruning methods (group: which weights compete for unstructured sparsity unless --group)")
    table.add_column("method", overflow="fold")
    table.add_column("paper name")
    table.add_column("group")
    table.add_column("score (higher = keep)")
    table.add_column("from", overflow="fold")
    unusable: list[str] = []
    user = preferences.load()
    if user.problem:  # a remembered entry that is no plug-in is left out of the list, and said
        print(f"acetui: {user.problem}", file=sys.stderr)
    for method in available_methods(METHODS, user.plugins, unusable).values():
        group = method.group if method.score is not None else "blocks"  # SparseGPT masks per 128 columns
        table.add_row(method.name, method.paper_name, group, escape(method.description), escape(method.source))
    Console().print(table)
    if unusable:
        more = f" ({len(unusable) - 1} more remembered plug-in(s) cannot be used either)" if len(unusable) > 1 else ""
        raise UserError(f"{unusable[0].removesuffix('.')}{more}; the table lists the methods that can be used.")
