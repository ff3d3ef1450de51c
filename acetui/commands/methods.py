"""``acetui methods``: what each method is, under the paper's name."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from acetui_core.metrics import METHODS


def methods() -> None:
    """List the pruning methods with a one-line description and the paper's name for each."""
    table = Table(title="Pruning methods (unstructured sparsity competes per output row unless --group layer)")
    table.add_column("method")
    table.add_column("paper name")
    table.add_column("score (higher = keep)")
    for method in METHODS.values():
        table.add_row(method.name, method.paper_name, escape(method.description))
    Console().print(table)
