"""Saving a pruned model as a Hugging Face checkpoint (safetensors, config, tokenizer).

acetui deletes nothing it did not make: ``--overwrite`` replaces only a folder that holds nothing but a
checkpoint acetui could have written, never the working folder or the home folder, and no save goes into,
over or around the source model, the data folder or the run store. Every save is atomic: it is written
into a hidden sibling folder (named after its process, so the next save there removes those of killed
runs) that is renamed to the asked name only once complete, so a full disk or an OS refusal leaves no half
checkpoint that looks whole. Without ``--overwrite`` the rename never replaces a checkpoint that appeared
meanwhile (another run saving to the same folder): this run's checkpoint then keeps a name of its own
beside it. A streamed model is written layer by layer (``LayerwiseCheckpoint``) as its layers are pruned.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import torch

from acetui_core.basics.errors import UserError
from acetui_core.basics.outputs import overlap, refuse_protected
from acetui_core.basics.paths import user_path
from acetui_core.modeling.models import quiet_transformers
from acetui_core.modeling.scratch import owned_tempdir, sweep

# What ``save_pretrained`` of a model and its tokenizer writes (weights possibly sharded).
_CHECKPOINT_FILE = re.compile(
    r"config\.json|generation_config\.json|model(-\d+-of-\d+)?\.safetensors|model\.safetensors\.index\.json"
    r"|tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|chat_template\.jinja"
    r"|vocab\.json|vocab\.txt|merges\.txt|tokenizer\.model|sentencepiece\.bpe\.model"
    r"|permutations\.json"  # --permute's sidecar (acetui_core.scores.permute)
)
TEMP_PREFIX = ".acetui-save-"
SCRATCH_PREFIX = "acetui-pruned-"  # in the system temp folder: a streamed run's pruned layers, kept for evaluation
INDEX_FILE = "model.safetensors.index.json"


def _replaceable(path: Path, save: str) -> None:
    """Refuse to replace ``path`` unless it holds a checkpoint acetui could have written and nothing else."""
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


def check_save_dir(
    save: str | None, overwrite: bool, protected: Iterable[tuple[Path, str]] = (), *, late: bool = False
) -> None:
    """Refuse an unusable folder before hours of pruning, not after: a file, a folder that is not empty
    (without ``--overwrite``), an unwritable place, or one that is, holds or lies inside a ``protected``
    place (``(path, what it is)``: the source model, the data folder, the run store). ``late``: checked
    again when the save begins, after the work: what another process put there meanwhile is no longer
    a reason to refuse (``AtomicFolder.commit`` keeps both)."""
    if save is None:
        return
    path = user_path(save)
    refuse_protected(path, f"--save {save}", protected, "save the pruned model in a folder of its own.")
    for place, name in ((Path.cwd(), "the working folder"), (Path.home(), "the home folder")):
        # even empty, the folder the shell stands in: the finished checkpoint is renamed over it
        if overlap(path, place) in ("is", "holds"):
            raise UserError(f"--save {save} is {name} or holds it; save the pruned model in a folder of its own.")
    if path.exists() and not path.is_dir() and not late:
        raise UserError(f"--save {save} is a file, not a folder.")
    if path.is_dir() and any(path.iterdir()) and (overwrite or not late):
        if not overwrite:
            raise UserError(f"--save folder {save} exists and is not empty; pass --overwrite to replace it.")
        _replaceable(path, save)
    # The checkpoint is written beside the folder, then renamed: that place must take a new folder.
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--save folder {save} cannot be written.")
    try:  # access() says yes to root everywhere; making a folder is the real test
        os.rmdir(owned_tempdir(".acetui-check-", existing))
    except OSError as error:
        raise UserError(f"--save folder {save} cannot be written ({error.strerror or error}).") from None


def sweep_temporaries(saves: Iterable[str]) -> list[Path]:
    """Remove what killed runs left behind (their processes gone): unfinished saves beside each of the
    ``saves`` folders, and streamed runs' scratch checkpoints in the system temp folder. Returns them."""
    folders = {user_path(save).absolute().parent for save in saves}
    removed = [path for folder in folders for path in sweep(TEMP_PREFIX, folder)]
    return removed + sweep(SCRATCH_PREFIX) + sweep(TEMP_PREFIX)


FolderIdentity = tuple[int, int] | None


def folder_identity(save: str) -> FolderIdentity:
    """Which folder is at ``save`` (device and inode: a folder renamed into place is another), None if none.
    Taken as a run starts: the folder its ``--overwrite`` may replace once it saves, hours later."""
    try:
        status = user_path(save).absolute().stat()
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


class AtomicFolder:
    """A folder written under a hidden sibling name and renamed into place by ``commit``; ``discard`` (or
    a failure inside ``writing``) removes it and says, in one sentence, that nothing was saved."""

    def __init__(self, save: str, overwrite: bool, accepted: FolderIdentity = None):
        """``accepted``: the folder ``--overwrite`` may replace (``folder_identity`` as the run started; none:
        no folder may be replaced); one that took its place while the run pruned (another run's checkpoint,
        saved meanwhile) is kept, as a folder filled without ``--overwrite`` is."""
        check_save_dir(save, overwrite, late=True)
        self.overwrite = overwrite
        self.accepted = accepted
        self.path = user_path(save).absolute()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sweep(TEMP_PREFIX, self.path.parent)  # what killed runs left here
        # the permissions save_pretrained's own folder would get (the umask's), not a private 0700
        self.temp = owned_tempdir(TEMP_PREFIX, self.path.parent, mode=0o777)

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
        """Rename the finished checkpoint into place; returns where it is. A folder that another process
        filled since the check (with ``--overwrite``: other than the one checked) is kept, and this checkpoint
        takes the first free name ``<folder>-2``, ``<folder>-3``... beside it (said in the run's log)."""
        # safetensors writes its files 0600; a checkpoint's files get what an ordinary file gets (the
        # umask's permissions, read back from the folder made with 0777 through it)
        readable = stat.S_IMODE(self.temp.stat().st_mode) & 0o666
        for file in self.temp.iterdir():
            file.chmod(readable)
        filled = self.path.is_dir() and any(self.path.iterdir())
        if self.overwrite and filled and folder_identity(str(self.path)) == self.accepted:  # checked by check_save_dir
            previous = owned_tempdir(TEMP_PREFIX, self.path.parent)
            os.replace(self.path, previous)  # replaces the empty folder mkdtemp made
            os.replace(self.temp, self.path)
            shutil.rmtree(previous, ignore_errors=True)
            return str(self.path.resolve())
        for number in range(1, 1000):
            target = self.path if number == 1 else self.path.with_name(f"{self.path.name}-{number}")
            try:  # a folder renamed onto a folder replaces it only when that one is empty: never a checkpoint
                os.rename(self.temp, target)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise
                continue
            if target != self.path:
                logging.getLogger("acetui").warning(
                    f"--save {self.path} was filled by another run while this one pruned; "
                    f"this run's checkpoint is saved in {target} instead."
                )
            return str(target.resolve())
        raise UserError(f"--save {self.path}: no free name beside it; the checkpoint stays in {self.temp}.")

    def discard(self) -> None:
        shutil.rmtree(self.temp, ignore_errors=True)


def save_checkpoint(model, tokenizer, save: str, overwrite: bool, accepted: FolderIdentity = None) -> str:
    folder = AtomicFolder(save, overwrite, accepted)
    with folder.writing() as temp, quiet_transformers():
        model.save_pretrained(temp, safe_serialization=True)
        tokenizer.save_pretrained(temp)
    return folder.commit()


def _save_generation_config(model_config, folder: Path) -> None:
    """The source folder's generation defaults (eos lists, sampling settings), as ``save_pretrained``
    writes the ones ``from_pretrained`` read: a streamed model's config names the folder it came from."""
    from transformers import GenerationConfig

    source = Path(getattr(model_config, "_name_or_path", "") or "")
    if (source / "generation_config.json").is_file():
        GenerationConfig.from_pretrained(source).save_pretrained(folder)


class LayerwiseCheckpoint:
    """A sharded safetensors checkpoint written one decoder layer at a time (one shard per layer, the
    resident tensors in a last shard), with the index, config and tokenizer written last:
    ``from_pretrained`` loads it like any other."""

    def __init__(self, save: str, overwrite: bool, layers: int):
        self.folder = AtomicFolder(save, overwrite, folder_identity(save))  # made as the run starts
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
            _save_generation_config(model_config, temp)
            tokenizer.save_pretrained(temp)
            (temp / INDEX_FILE).write_text(json.dumps(index, indent=2))
        return self.folder.commit()

    def discard(self) -> None:
        self.folder.discard()
