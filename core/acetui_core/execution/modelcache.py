"""The model of consecutive runs in one process (a grid's queue), loaded once and reset between runs."""

from __future__ import annotations

import gc
from collections import Counter
from typing import TYPE_CHECKING

from acetui_core.run.config import RunConfig
from acetui_core.run.events import OnEvent

if TYPE_CHECKING:
    from collections.abc import Iterable

    from acetui_core.modeling.models import Loaded


class ModelCache:
    """The model of consecutive runs, loaded once and reset to its dense weights between runs.

    Resetting needs a copy of the dense decoder weights, taken only when a later run of the queue
    (``configs``) uses the same model: a single run would otherwise hold its decoder weights twice
    (on SmolLM2, 425 MB of a 2.5 GB peak)."""

    def __init__(self, configs: Iterable[RunConfig] = ()):
        self.key: tuple | None = None
        self.loaded: Loaded | None = None
        configs = list(configs)
        self.pending = Counter(_model_key(config) for config in configs)
        # a model that some run of the queue evaluates is loaded as an evaluating run's (``streaming_folder``)
        self.evaluated = {_model_key(config) for config in configs if config.evals}

    def get(self, config: RunConfig, on_event: OnEvent | None = None):
        from acetui_core.modeling.streaming import load_for_run

        key = _model_key(config)
        self.pending[key] -= 1
        if key == self.key and self.loaded is not None and self.loaded.can_reset:
            self.loaded.reset(keep_copy=self.pending[key] > 0)
            return self.loaded
        self.key = self.loaded = None
        gc.collect()  # let the previous model go before the next one arrives
        loaded = load_for_run(
            config.model,
            device=config.device,
            dtype=config.dtype,
            offload=config.offload,
            evaluates=bool(config.evals) or key in self.evaluated,
            on_event=on_event,
        )
        if self.pending[key] > 0:
            loaded.snapshot()
        self.key, self.loaded = key, loaded
        return loaded


def _model_key(config: RunConfig) -> tuple:
    return (config.model, config.device, config.dtype, config.offload)
