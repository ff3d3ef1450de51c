"""Saving a pruned model as a Hugging Face checkpoint (safetensors, config, tokenizer).

Every save is atomic: it is written into a hidden sibling folder that is renamed to the asked name only
once complete, so a run that fails mid-write (a full disk) leaves no half checkpoint that looks whole.
A streamed model is written layer by layer (``LayerwiseCheckpoint``) as its layers are pruned."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from acetui_core.errors import UserError

INDEX_FILE = "model.safetensors.index.json"


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


class AtomicFolder:
    """A folder written under a hidden sibling name and renamed into place by ``commit``; ``discard`` (or
    a failure inside ``writing``) removes it and says, in one sentence, that nothing was saved."""

    def __init__(self, save: str, overwrite: bool):
        check_save_dir(save, overwrite)
        self.path = Path(save).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.temp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.partial-", dir=self.path.parent))

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
                f"Writing the pruned checkpoint to {self.path} failed ({reason}); nothing was saved there and "
                f"the partial files are removed."
            ) from None
        except BaseException:
            self.discard()
            raise

    def commit(self) -> str:
        if self.path.exists():  # --overwrite, checked before the run started
            shutil.rmtree(self.path)
        os.replace(self.temp, self.path)
        return str(self.path.resolve())

    def discard(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


def save_checkpoint(model, tokenizer, save: str, overwrite: bool) -> str:
    folder = AtomicFolder(save, overwrite)
    with folder.writing() as temp:
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
