"""The check of a model's files before a run is recorded (``preflight``): its configuration, its family
and layout, its safetensors shards' headers, names and shapes, or a GGUF file's metadata, all without
loading a weight; what it learns (the context length, each linear's input width) feeds the checks of
``acetui_core.pruning.validate`` and the plan."""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acetui_core.basics.errors import UserError, first_line
from acetui_core.basics.imports import HEAVY_IMPORTS
from acetui_core.basics.outputs import write_text_atomic
from acetui_core.basics.paths import cache_dir, file_identity
from acetui_core.modeling.layouts import check_layout, decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import context_length, meta_skeleton, model_source, quiet_transformers, refuse_mismatch


@dataclass(frozen=True)
class Preflight:
    """What a model's files say before any weight is loaded."""

    context: int  # the context length
    input_widths: tuple[tuple[str, int], ...] = ()  # (linear, its inputs) of the decoder layers, from the config
    skeleton: Any = field(default=None, compare=False, repr=False)  # the model on the meta device: no weights


def preflight(source: str) -> Preflight:
    """Read what a model's files say without loading its weights, so a damaged model is refused before any
    run is recorded: its configuration, its family, its weights' headers, names and shapes (a GGUF file's
    metadata). Of a hub model not in the local cache, its config.json is fetched (``hub_config``); its
    weights are checked when it loads."""
    kind, path = model_source(source)
    identity = file_identity(path) if kind != "hub" else None
    with HEAVY_IMPORTS:  # the check imports transformers' modules for the model's family
        return _preflight(kind, str(path), identity)


WEIGHT_FILES = ("*.safetensors", "*.bin")  # what transformers loads a checkpoint folder's weights from
# what AutoTokenizer reads a folder's tokenizer from: at least one of them
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_runnable(source: str) -> None:
    """A local checkpoint folder a run will load must hold weights and a tokenizer beside its config.json
    (``acetui plan`` needs the config alone: a folder of just config.json can be planned)."""
    kind, where = model_source(source)
    if kind != "folder":
        return
    path = Path(where)
    if not any(any(path.glob(pattern)) for pattern in WEIGHT_FILES):
        raise UserError(
            f"The checkpoint folder {source} holds no weights: no .safetensors or .bin file beside its config.json."
        )
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(
            f"The checkpoint folder {source} holds no tokenizer: none of {', '.join(TOKENIZER_FILES)} "
            f"(save the tokenizer beside the model: tokenizer.save_pretrained)."
        )


def model_config(source: str):
    """The model's configuration as transformers reads it (of a hub id, its config.json in the local cache,
    fetched there first when it is not: ``hub_config``)."""
    kind, path = model_source(source)
    with HEAVY_IMPORTS:  # huggingface_hub, for a hub id
        folder = Path(hub_config(str(path))).parent if kind == "hub" else path
    try:
        with HEAVY_IMPORTS:
            return _read_config(kind, str(folder), file_identity(folder) if kind != "hub" else None)
    except ImportError as error:
        raise _not_checked(source, error) from error
    except Exception as error:  # a damaged config: many kinds
        raise UserError(f"Could not read the configuration of {source} ({type(error).__name__}).") from error


def _not_checked(path: str, error: ImportError) -> UserError:
    """A library that failed to import says nothing about the model's files: the sentence names the
    library's own error, never the file as damaged."""
    return UserError(f"{path} could not be checked: a library failed to import ({first_line(error)}).")


def model_tokenizer(source: str):
    """The model's tokenizer from its local files (a GGUF's metadata, a folder, a hub model's cached
    snapshot), or None when it is not on this machine: nothing is downloaded for a check."""
    kind, path = model_source(source)
    try:
        with HEAVY_IMPORTS, quiet_transformers():
            from transformers import AutoTokenizer

            if kind == "gguf":
                return AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name)
            return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception:  # not cached, or a tokenizer transformers cannot build: the run's own load says why
        return None


@functools.lru_cache(maxsize=8)
def _read_config(kind: str, path: str, identity: str | None):
    """Read once per version of the files in a process, and a GGUF's once per version on the machine (its
    whole metadata, the tokenizer too, is parsed for it: seconds of Python that the New run form would
    otherwise repeat at every change of a field, holding the interface's thread back meanwhile)."""
    from transformers import AutoConfig

    if kind == "gguf":
        return _gguf_config(Path(path), identity)
    return AutoConfig.from_pretrained(path)


GGUF_HEAD_BYTES = 1 << 20  # a GGUF's fixed header and its first metadata (the architecture's hyperparameters)


def _gguf_config(path: Path, identity: str | None):
    """A GGUF file's configuration, kept as a config.json in acetui's cache under the file's path, size and
    time: every start of the app estimates the bundled model's cost, and parsing the file's metadata
    again would cost those seconds each time. An entry is used only when it vouches for itself: a digest
    of the file's head (a file rewritten with the same size and time) and of the config.json it holds (an
    entry edited or damaged) are kept beside it; any mismatch and the file is parsed again."""
    import transformers
    from transformers import AutoConfig

    key = hashlib.sha256(f"{path.resolve()}|{identity}|{transformers.__version__}".encode()).hexdigest()[:16]
    kept = cache_dir("gguf-configs") / key / "config.json"
    with open(path, "rb") as file:
        head = hashlib.sha256(file.read(GGUF_HEAD_BYTES)).hexdigest()
    try:
        text = kept.read_text(encoding="utf-8")
        if json.loads(kept.with_name(ENTRY_SEAL).read_text(encoding="utf-8")) == _seal(head, text):
            return AutoConfig.from_pretrained(kept.parent)
    except Exception:  # no entry, or a damaged one: the file itself is read again below
        pass
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        text = config.to_json_string()
        write_text_atomic(kept, text)
        write_text_atomic(kept.with_name(ENTRY_SEAL), json.dumps(_seal(head, text)))
    except OSError:  # a cache that cannot be written costs time, not the run
        pass
    return config


ENTRY_SEAL = "acetui-entry.json"  # beside a cached config.json: what it was made from, and its own digest


def _seal(head: str, text: str) -> dict:
    return {"gguf_head_sha256": head, "config_sha256": hashlib.sha256(text.encode()).hexdigest()}


@functools.lru_cache(maxsize=8)
def _preflight(kind: str, path: str, identity: str | None) -> Preflight:
    if kind == "gguf":
        try:  # the plan reads this same config next: one parse of the file serves both
            config = _read_config(kind, path, identity)
        except ImportError as error:  # not about the file (issue 31: a thread raced the app's imports)
            raise _not_checked(path, error) from error
        except Exception as error:  # the gguf reader raises many kinds on a damaged file
            raise UserError(f"{path} is not a readable GGUF model file: {_gguf_problem(Path(path), error)}.") from error
        skeleton = meta_skeleton(config, tie_weights=False)
        return Preflight(context_length(config), _input_widths(skeleton), skeleton)
    if kind == "hub":
        path = str(Path(hub_config(path)).parent)
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path)
        skeleton = meta_skeleton(config, tie_weights=False)
        decoder_layers(skeleton)  # an unsupported family is refused first
        check_layout(skeleton)  # and a weight the table of layouts does not know, before the run is recorded
        expected = {name: tuple(tensor.shape) for name, tensor in skeleton.state_dict().items()}
        present = _check_shards(Path(path), expected)
        _check_names(Path(path), skeleton, present)
    except UserError:
        raise
    except ImportError as error:
        raise _not_checked(path, error) from error
    except Exception as error:  # a damaged configuration fails in many ways
        raise UserError(
            f"The checkpoint folder {path} could not be loaded as a model ({config_problem(Path(path), error)})."
        ) from error
    return Preflight(context_length(config), _input_widths(skeleton), skeleton)


def _gguf_problem(path: Path, error: Exception) -> str:
    """Why a GGUF file would not parse, in words (the reader's own errors are a bare ``error`` or ``cannot
    mmap an empty file``): empty, not a GGUF file, or cut short."""
    size = path.stat().st_size
    if size == 0:
        return "the file is empty"
    with open(path, "rb") as file:
        if file.read(4) != b"GGUF":
            return "it does not start with GGUF's magic bytes, so it is not a GGUF file"
    if isinstance(error, struct.error):  # a read past the end of the file
        return f"it ends after {size} bytes, before what its header announces: it is truncated"
    return f"{first_line(error)}; it may be corrupt or truncated"


def config_problem(folder: Path, error: Exception) -> str:
    """What is wrong with a checkpoint folder's configuration, in words: an architecture this transformers
    does not know is named with the version (transformers' own sentence is a paragraph); else the error's
    first line."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        model_type = None
    if isinstance(model_type, str) and model_type not in CONFIG_MAPPING:
        return f"its model_type '{model_type}' is an architecture transformers {transformers.__version__} does not know"
    return first_line(error)


def _input_widths(skeleton) -> tuple[tuple[str, int], ...]:
    """Each decoder linear's input width, by where it is (``layer 3 mlp.down_proj``)."""
    widths = {
        (f"layer {index} {name}", weight_matrix(module).shape[1])
        for index, layer in enumerate(decoder_layers(skeleton))
        for name, module in prunable_linears(layer).items()
    }
    return tuple(sorted(widths))


HUB_TIMEOUT_SECONDS = 10  # one try: huggingface_hub's own retries made an unreachable hub cost 48 s
LOCAL_HINT = "pass a local checkpoint folder or a .gguf file instead (acetui prune ./my-model or ./model.gguf)"


def hub_config(repo_id: str) -> str:
    """The path of a hub model's config.json: from the local Hugging Face cache, else fetched from the hub
    in one try, so an id that cannot be fetched is one sentence within seconds, before any run is
    recorded: the hub switched off, not reachable, or without that model."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, RepositoryNotFoundError

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return cached
    if constants.HF_HUB_OFFLINE:
        raise UserError(
            f"Model '{repo_id}' is not a local path and not in the Hugging Face cache, and the hub is switched "
            f"off (HF_HUB_OFFLINE); {LOCAL_HINT}."
        )
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=HUB_TIMEOUT_SECONDS)
        return hf_hub_download(repo_id, "config.json", etag_timeout=HUB_TIMEOUT_SECONDS)
    except (RepositoryNotFoundError, GatedRepoError) as error:
        raise UserError(
            f"Model '{repo_id}' is not a local path, and the Hugging Face hub has no model by that id that this "
            f"machine may read ({type(error).__name__}); check the id or {LOCAL_HINT}."
        ) from None
    except EntryNotFoundError:
        raise UserError(f"The hub model '{repo_id}' has no config.json, so it is not a transformers model.") from None
    except Exception as error:  # no network, DNS, proxy, timeout: many kinds
        raise UserError(
            f"The Hugging Face hub cannot be reached from this machine ({first_line(error)}), so model "
            f"'{repo_id}', which is not a local path, cannot be fetched; {LOCAL_HINT}."
        ) from None


def _check_names(folder: Path, skeleton, present: set[str]) -> None:
    """Every weight the configuration asks for must be in the shards (the output head may be the tied
    embeddings), and no weight of the shards may lack a place in the model (more layers than the config,
    say), as ``from_pretrained`` reckons them. Families whose tensors transformers renames or fuses on
    loading are checked by the load itself (``_from_pretrained``)."""
    import re

    from transformers.conversion_mapping import extract_weight_conversions_for_model

    if not present or extract_weight_conversions_for_model(skeleton):
        return  # no safetensors (a .bin checkpoint), or names that only the load can match
    base = skeleton.base_model_prefix

    def key(name: str) -> str | None:
        return next((c for c in (name, name.removeprefix(f"{base}."), f"{base}.{name}") if c in present), None)

    def ignored(name: str, patterns) -> bool:
        return any(re.search(pattern, name) for pattern in patterns or ())

    found = {name: key(name) for name in skeleton.state_dict()}
    tied = set(getattr(skeleton, "all_tied_weights_keys", None) or ())
    skip_missing = getattr(skeleton, "_keys_to_ignore_on_load_missing", None)
    missing = sorted(n for n, k in found.items() if k is None and n not in tied and not ignored(n, skip_missing))
    skip_unexpected = getattr(skeleton, "_keys_to_ignore_on_load_unexpected", None)
    unexpected = sorted(  # weights only: older checkpoints keep buffers (rotary frequencies, masks) harmlessly
        name for name in present - set(found.values()) if name.endswith("weight") and not ignored(name, skip_unexpected)
    )
    refuse_mismatch(f"folder {folder}", missing, unexpected)


def _check_readable(shard: Path) -> None:
    """A weights file safetensors can open, or why not in words that do not call a good file damaged."""
    try:
        str(shard).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"The path {shard.parent} is not valid UTF-8, which safetensors cannot open; rename the folder."
        ) from None
    try:
        with open(shard, "rb"):
            pass
    except OSError as error:
        raise UserError(f"{shard} cannot be read ({error.strerror or error}).") from None


def _check_shards(folder: Path, expected: dict[str, tuple]) -> set[str]:
    """Every safetensors shard must have a readable header whose tensors fit the configuration; returns
    the names of the tensors they hold."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            listed = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise UserError(f"The checkpoint folder {folder} has an unreadable {index.name} ({error}).") from None
        gone = sorted(name for name in listed if not (folder / name).is_file())
        if gone:
            raise UserError(
                f"The checkpoint folder {folder} is incomplete: {gone[0]}"
                f"{f' and {len(gone) - 1} more shard(s)' if len(gone) > 1 else ''}, named in {index.name}, is missing."
            )
    present: set[str] = set()
    for shard in sorted(folder.glob("*.safetensors")):
        _check_readable(shard)  # safetensors says "No such file" of an unreadable one: not damage
        try:
            with safe_open(str(shard), "pt") as tensors:
                shapes = {name: tuple(tensors.get_slice(name).get_shape()) for name in tensors.keys()}  # noqa: SIM118 (a safe_open handle is not iterable)
        except Exception as error:  # truncated or not safetensors at all
            raise UserError(
                f"The checkpoint folder {folder} could not be loaded as a model: {shard.name} is damaged "
                f"({first_line(error)})."
            ) from None
        for name, shape in shapes.items():
            want = expected.get(name) or expected.get(name.removeprefix("model."))
            if want is not None and want != shape:
                raise UserError(
                    f"The checkpoint folder {folder} could not be loaded as a model: {name} in "
                    f"{shard.name} has shape {list(shape)}, its config.json says {list(want)}."
                )
        present.update(shapes)
    return present
