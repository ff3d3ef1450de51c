"""Saving a pruned model as a Hugging Face checkpoint (safetensors, config, tokenizer)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from acetui_core.errors import UserError
from acetui_core.models import quiet_transformers


def check_save_dir(save: str | None, overwrite: bool) -> None:
    """Refuse an unusable folder before hours of pruning, not after."""
    if save is None:
        return
    path = Path(save).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--save {save} is a file, not a folder.")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise UserError(f"--save folder {save} exists and is not empty; pass --overwrite to replace it.")
    existing = path if path.is_dir() else next((p for p in path.parents if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--save folder {save} cannot be written.")
    try:  # access() says yes to root everywhere; making a folder is the real test
        os.rmdir(tempfile.mkdtemp(prefix=".acetui-check-", dir=existing))
    except OSError as error:
        raise UserError(f"--save folder {save} cannot be written ({error.strerror or error}).") from None


def save_checkpoint(model, tokenizer, save: str, overwrite: bool) -> str:
    path = Path(save).expanduser()
    check_save_dir(save, overwrite)
    if path.exists() and overwrite:
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        model.save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
    return str(path.resolve())
