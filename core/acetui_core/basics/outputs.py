"""The one guard of every file acetui writes where a user named it (``export -o``, ``figure -o``, the app's
exports) and of ``--save`` (``acetui_core.modeling.checkpoint``): nothing is written into, over or around what the
runs read or keep (the run store and the files beside it, the data folder, the models and calibration
files the store's runs used, the checkpoints they saved), an existing file is replaced only with
``--overwrite``, and a file is written beside its target and renamed over it, so an interrupted write
leaves the old file whole.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from acetui_core.basics.errors import UserError

Places = Iterable[tuple[Path, str]]  # (path, what it is: "the run store", "the model of run 1a2b3c4d")


def overlap(path: Path, place: Path) -> str | None:
    """How ``path`` meets ``place`` (symbolic links resolved): it "is", "holds" or "lies inside" it; None
    when they are apart."""
    target, other = path.resolve(), place.resolve()
    if target == other or (target.exists() and other.exists() and os.path.samefile(target, other)):
        return "is"
    if target in other.parents:
        return "holds"
    if other in target.parents:
        return "lies inside"
    return None


def refuse_protected(path: Path, named: str, protected: Places, advice: str) -> None:
    """A UserError when ``path`` (``named`` as the user typed it, with its flag) is, holds or lies inside
    one of the ``protected`` places."""
    for place, what in protected:
        relation = overlap(path, place)
        if relation is not None:
            raise UserError(f"{named} {relation} {what} ({place}); {advice}")


def check_output_file(path: Path, flag: str, *, overwrite: bool, protected: Places = ()) -> Path:
    """The file to write for ``flag PATH``, or one sentence saying why not: a folder, a missing folder, a
    protected place (even with ``--overwrite``), or an existing file (or link) without ``--overwrite``.
    A symbolic link is written through: its target gets the new text and the link stays."""
    named = f"{flag} {path}"
    if path.is_dir():
        raise UserError(f"{named} is a folder; give a file name.")
    refuse_protected(path, named, protected, "write to a file of its own.")
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise UserError(f"{named} exists; pass --overwrite to replace it.")
    target = path.resolve() if path.is_symlink() else path
    if target.is_dir():
        raise UserError(f"{named} is a link to a folder; give a file name.")
    if target.exists() and not target.is_file():  # renaming over it would replace a device or a pipe
        raise UserError(f"{named} is not a regular file (a device, pipe or socket); -o - writes to stdout.")
    if not target.parent.is_dir():
        if target.parent.exists():
            raise UserError(f"Cannot write {path}: {target.parent} is a file, not a folder.")
        raise UserError(f"Cannot write {path}: the folder {target.parent} does not exist.")
    return target


def _no_clobber(partial: Path, path: Path) -> None:
    """Move ``partial`` to ``path`` unless a file appeared there meanwhile (a hard link fails on an existing
    name, atomically; where links are not supported, a check just before the rename)."""
    try:
        os.link(partial, path)
    except FileExistsError:
        raise UserError(f"{path} was created by someone else meanwhile; pass --overwrite to replace it.") from None
    except OSError:
        if path.exists() or path.is_symlink():
            raise UserError(f"{path} was created by someone else meanwhile; pass --overwrite to replace it.") from None
        os.replace(partial, path)
        return
    partial.unlink()


@contextmanager
def atomic_file(path: Path, binary: bool = False, replace: bool = True) -> Iterator[IO]:
    """A new file beside ``path``, renamed over it once the block ends: a full disk, an error or a kill
    leaves the old file whole, never half a new one; without ``replace``, a file that appeared at ``path``
    meanwhile is kept and the write refused. The file gets the permissions an ordinary write would give it
    (an existing file's, else the umask's). An OS refusal names ``path``, not the partial."""
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666  # the umask applies
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(3)}.partial")
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        # a path of bytes that are not UTF-8 (``calib\xff.jsonl``) reads back as Python's surrogates: written as
        # the bytes it was, as stdout would, not a UnicodeEncodeError
        encoding, errors = (None, None) if binary else ("utf-8", "surrogateescape")
        with open(descriptor, "wb" if binary else "w", encoding=encoding, errors=errors) as file:
            yield file
        if replace:
            os.replace(partial, path)
        else:
            _no_clobber(partial, path)
    except BaseException as error:
        with suppress(OSError):  # a read-only medium refuses the removal too: the first refusal is the one to say
            partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise


def write_text_atomic(path: Path, text: str, replace: bool = True) -> None:
    """``text`` into ``path`` through ``atomic_file``."""
    with atomic_file(path, replace=replace) as file:
        file.write(text)


def reserve_new_file(
    folder: Path,
    stem: str,
    suffix: str,
    protected: Places = (),
    refused_folders: Places = (),
    advice: str = "choose another export folder.",
) -> Path:
    """A new, empty file ``folder/stem.suffix``, else ``stem-2``, ``stem-3``... (created exclusively, so no
    other file is ever replaced, even one made between the choice of a name and the write), for the app's
    exports; refused when ``folder`` is or lies inside a ``protected`` place, or is one of the
    ``refused_folders`` itself (the working folder, the run store's folder: a folder under them is fine);
    ``advice`` ends the refusal."""
    for place, what in refused_folders:
        if overlap(folder, place) == "is":
            raise UserError(f"The export folder {folder} is {what}; {advice}")
    path, n = folder / f"{stem}{suffix}", 1
    # the file, not the folder: a folder that merely holds a model folder or the store takes new files
    refuse_protected(path, f"An export in {folder}", protected, advice)
    while True:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return path
        except FileExistsError:
            n += 1
            path = folder / f"{stem}-{n}{suffix}"
