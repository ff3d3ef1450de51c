"""Saving a pruned model as a Hugging Face checkpoint (safetensors, config, tokenizer).

acetui deletes nothing it did not make: ``--overwrite`` replaces only a folder that holds nothing but a
checkpoint acetui could have written, never the working folder or the home folder. Every save is atomic:
it is written into a hidden sibling folder that is renamed to the asked name only once complete, so a
full disk or an OS refusal leaves no half checkpoint that looks whole. A streamed model is written layer
by layer (``LayerwiseCheckpoint``) as its layers are pruned.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from acetui_core.errors import UserError
from acetui_core.models import quiet_transformers

# What ``save_pretrained`` of a model and its tokenizer writes (weights possibly sharded).
_CHECKPOINT_FILE = re.compile(
    r"config\.json|generation_config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|chat_template\.jinja"
    r"|vocab\.json|vocab\.txt|merges\.txt|tokenizer\.model|sentencepiece\.bpe\.model"
    r"|permutations\.json"  # --permute's sidecar (acetui_core.permute)
)
_TEMP_PREFIX = ".acetui-save-"
INDEX_FILE = "model.safetensors.index.json"


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


class AtomicFolder:
    """A folder written under a hidden sibling name and renamed into place by ``commit``; ``discard`` (or
    a failure inside ``writing``) removes it and says, in one sentence, that nothing was saved."""

    def __init__(self, save: str, overwrite: bool):
        check_save_dir(save, overwrite)
        self.path = Path(save).expanduser().absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.temp = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=self.path.parent))

    @contextmanager
    def writing(self):
        try:
            yield self.temp
        except (UserError, KeyboardInterrupt):
            self.discard()
            raise
        except Exception as error:  # a full disk is an OSError from Python, a SafetensorError from safetensors
            self.discard()
            reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:160] or type(error).__name__
            raise UserError(
                f"Saving the pruned model to {self.path} failed ({reason}); no partial checkpoint was left."
            ) from None
        except BaseException:
            self.discard()
            raise

    def commit(self) -> str:
        if self.path.is_dir() and any(self.path.iterdir()):  # a checkpoint, and --overwrite (check_save_dir)
            previous = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=self.path.parent))
            os.replace(self.path, previous)  # replaces the empty folder mkdtemp made
            os.replace(self.temp, self.path)
            shutil.rmtree(previous, ignore_errors=True)
        else:
            if self.path.is_dir():
                self.path.rmdir()
            os.replace(self.temp, self.path)
        return str(self.path.resolve())

    def discard(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


def save_checkpoint(model, tokenizer, save: str, overwrite: bool) -> str:
    folder = AtomicFolder(save, overwrite)
    with folder.writing() as temp, quiet_transformers():
        model.save_pretrained(temp, safe_serialization=True)
        tokenizer.save_pretrained(temp)
    return folder.commit()


class LayerwiseCheckpoint:
    """A sharded safetensors checkpoint written one decoder layer at a time (one shard per layer, the
    resident tensors in a last shard), with the index, config and tokenizer written last:
    ``from_pretrained`` loads it like any other."""

    def __init__(self, save: str, overwrite: bool, layers: int):
        self.folder = AtomicFolder(save, overwrite)
        self.shards = layers + 1
        self.weight_map: dict[str, str] = {}
        self.total = 0

    def _write(self, number: int, tensors: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        name = f"model-{number:05d}-of-{self.shards:05d}.safetensors"
        with self.folder.writing() as temp:
            save_file({k: t.detach().cpu().contiguous() for k, t in tensors.items()}, temp / name, {"format": "pt"})
        self.weight_map.update(dict.fromkeys(tensors, name))
        self.total += sum(t.numel() * t.element_size() for t in tensors.values())

    def write_layer(self, index: int, tensors: dict[str, torch.Tensor]) -> None:
        self._write(index + 1, tensors)

    def finish(self, resident: dict[str, torch.Tensor], model_config, tokenizer) -> str:
        self._write(self.shards, resident)
        with self.folder.writing() as temp:
            index = {"metadata": {"total_size": self.total}, "weight_map": dict(sorted(self.weight_map.items()))}
            model_config.save_pretrained(temp)
            tokenizer.save_pretrained(temp)
            (temp / INDEX_FILE).write_text(json.dumps(index, indent=2))
        return self.folder.commit()

    def discard(self) -> None:
        self.folder.discard()
