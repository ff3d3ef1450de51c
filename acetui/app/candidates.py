"""Models the New run form offers as completions: recently used ones, the bundled SmolLM2 GGUF,
checkpoint folders and ``.gguf`` files near the working directory, and the Hugging Face cache. Only
what could run is offered: paths that exist (and are models) and hub ids, never a path that is gone."""

from __future__ import annotations

import os
from pathlib import Path

from acetui_core.basics.errors import UserError
from acetui_core.basics.imports import HEAVY_IMPORTS
from acetui_core.basics.paths import bundled_model, default_model
from acetui_core.modeling.models import model_source

SCAN_DEPTH = 2  # folders below the working directory searched for checkpoints and .gguf files
SKIP = {".git", ".venv", "node_modules", "__pycache__", ".cache"}


def _hub_cache() -> Path:
    with HEAVY_IMPORTS:  # read from a thread, beside the cost estimate's transformers
        from huggingface_hub.constants import HF_HUB_CACHE

    return Path(HF_HUB_CACHE)


def cached_hub_models(cache: Path | None = None) -> list[str]:
    """``org/name`` of every model in the Hugging Face cache (folders ``models--org--name``)."""
    cache = cache or _hub_cache()
    if not cache.is_dir():
        return []
    return sorted(
        p.name.removeprefix("models--").replace("--", "/") for p in cache.iterdir() if p.name.startswith("models--")
    )


def local_models(root: Path, depth: int = SCAN_DEPTH) -> list[str]:
    """Checkpoint folders (with a ``config.json``) and ``.gguf`` files under ``root``, as ``./``-relative paths."""
    found = []
    for folder, subdirs, files in os.walk(root):
        here = Path(folder)
        level = len(here.relative_to(root).parts)
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP and level < depth)
        if "config.json" in files and here != root:
            found.append(here)
        found += [here / f for f in sorted(files) if f.endswith(".gguf")]
    return sorted(f"./{p.relative_to(root)}" for p in found)


def usable(model: str) -> bool:
    """Whether ``model`` names something that exists: a model folder or ``.gguf`` file, or a hub id."""
    try:
        model_source(model)
    except UserError:
        return False
    return True


def model_candidates(recent: list[str], root: Path | None = None) -> list[str]:
    """Completions, most useful first and without repeats: recent, bundled, local, cached."""
    bundled = bundled_model()
    return list(
        dict.fromkeys(
            [
                *(model for model in recent if usable(model)),
                *([str(bundled)] if bundled else []),
                *local_models(root or Path.cwd()),
                *cached_hub_models(),
            ]
        )
    )


def starting_model(last: str | None) -> str:
    """What the model field starts with: the model last started here while it still exists, else the
    default model, else nothing (the form says what is missing when the run starts)."""
    if last and usable(last):
        return last
    try:
        return default_model()
    except UserError:
        return ""


def shorten(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters, keeping its end (the file or folder name): ``…/name.gguf``."""
    home = str(Path.home())
    if path.startswith(home + os.sep):
        path = "~" + path[len(home) :]
    return path if len(path) <= width else "…" + path[-(width - 1) :]
