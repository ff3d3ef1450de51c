"""The command palette's runs (ctrl+p): type part of a run's id, method, sparsity, model or status to
open it. The list comes from the app's in-memory run list, never from the store."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from acetui_core.run.config import model_name


class RunCommands(Provider):
    def _commands(self):
        for run in sorted(self.app.runs, key=lambda r: (r.created, r.id), reverse=True):
            text = f"Open run {run.id} {run.label} {run.config.target} {model_name(run.config.model)} {run.status}"
            yield text, partial(self.app.follow, run.id)

    async def discover(self) -> Hits:
        for text, open_run in list(self._commands())[:5]:
            yield DiscoveryHit(text, open_run, help="On the Run screen")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, open_run in self._commands():
            if (score := matcher.match(text)) > 0:
                yield Hit(score, matcher.highlight(text), open_run, help="On the Run screen")
