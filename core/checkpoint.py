"""Saving a pruned model as a Hugging Face checkpoint (safetensors, config, tokenizer).

acetui deletes nothing it did not make: ``--overwrite`` replaces only a folder that holds nothing but a
checkpoint acetui could have written, never the working folder or the home folder. The checkpoint is
written to a hidden sibling folder and renamed into place, so a full disk or an OS refusal leaves no
half checkpoint behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from acetui_core.errors import UserError
from acetui_core.models import quiet_transformers

# What ``save_pretrained`` of a model and its tokenizer writes (weights possibly sharded).
_CHECKPOINT_FILE = re.compile(
    r"config\.json|generation_config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|chat_template\.jinja"
    r"|vocab\.json|vocab\.txt|merges\.txt|tokenizer\.model|sentencepiece\.bpe\.model"
)
_TEMP_PREFIX = ".acetui-save-"


def _replaceable(path: Path, save: str) -> None:
    """Refuse to replace ``path`` unless it holds a checkpoint acetui could have written and nothing else."""
    resolved = path.resolve()
    for place, name in ((Path.cwd(), "the working folder"), (Path.home(), "the home folder")):
        if resolved == place.resolve() or resolved in place.resolve().parents:
            raise UserError(f"--save {save} is {name} or holds it; --overwrite replaces only a checkpoint folder.")
    entries = list(path.iterdir())
    foreign = [entry.name for entry in entries if not (entry.is_file() and _CHECKPOINT_FILE.fullmatch(entry.name))]
    names = {entry.name for entry in entries}
    if foreign or "config.json" not in names or not any(name.endswith(".safetensors") for name in names):
        foreign.sort()
        what = f"holds {', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}" if foreign else "holds no model"
        raise UserError(
            f"--save folder {save} {what}; --overwrite replaces only a checkpoint folder acetui could have "
            "written (config, weights and tokenizer files, nothing else)."
        )


def check_save_dir(save: str | None, overwrite: bool) -> None:
    """Refuse an unusable folder before hours of pruning, not after."""
    if save is None:
        return
    path = Path(save).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"--save {save} is a file, not a folder.")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise UserError(f"--save folder {save} exists and is not empty; pass --overwrite to replace it.")
        _replaceable(path, save)
    # The checkpoint is written beside the folder, then renamed: that place must take a new folder.
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--save folder {save} cannot be written.")
    try:  # access() says yes to root everywhere; making a folder is the real test
        os.rmdir(tempfile.mkdtemp(prefix=".acetui-check-", dir=existing))
    except OSError as error:
        raise UserError(f"--save folder {save} cannot be written ({error.strerror or error}).") from None


def save_checkpoint(model, tokenizer, save: str, overwrite: bool) -> str:
    """Write the checkpoint to a hidden sibling of ``save``, then rename it into place; return its path.

    A failure (a full disk, a refusal of the OS) removes the partial copy and is one sentence."""
    path = Path(save).expanduser().absolute()
    check_save_dir(save, overwrite)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=path.parent))
        with quiet_transformers():
            model.save_pretrained(temporary, safe_serialization=True)
            tokenizer.save_pretrained(temporary)
        if path.is_dir() and any(path.iterdir()):  # checked by check_save_dir: a checkpoint, and --overwrite
            previous = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=path.parent))
            os.replace(path, previous)  # the empty folder mkdtemp made is replaced
            os.replace(temporary, path)
            shutil.rmtree(previous, ignore_errors=True)
        else:
            if path.is_dir():
                path.rmdir()
            os.replace(temporary, path)
    except Exception as error:  # OSError, or the writers' own wrappers of one (safetensors raises its own type)
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
        raise UserError(
            f"Saving the pruned model to {save} failed ({reason}); no partial checkpoint was left."
        ) from None
    return str(path.resolve())
