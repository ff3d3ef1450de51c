"""Calibration windows and evaluation text, from local files (``ACETUI_DATA_DIR`` or a path) or the hub."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path

import torch

from acetui_core.basics.errors import StopFlag, UserError, check_stop
from acetui_core.basics.paths import content_identity, data_dir, mixture, user_path

C4_SHARD = "en/c4-train.00000-of-01024.json.gz"
# Where each source lives inside ACETUI_DATA_DIR (the layout of shared/data).
LOCAL_C4 = "c4/c4_calib_merged.jsonl"
LOCAL_WIKITEXT2 = {"train": "wikitext-2-raw/hf_rows/train.json", "test": "wikitext-2-raw/hf_rows/test.json"}
HUB_HINT = "set ACETUI_DATA_DIR to a local data folder (the layout of shared/data) or pass --calib PATH"


def _read_records(path: Path, use: str = "to calibrate on") -> list[str]:
    """Documents of a .txt (the whole file is one document), .jsonl or .json(.gz) with a ``text`` field;
    ``use``: what the text is for, in the sentence of a file that holds none."""
    opener = gzip.open if path.suffix == ".gz" else open
    name = path.name.removesuffix(".gz")
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            if name.endswith(".txt") or name.endswith(".raw"):
                rows = [{"text": handle.read()}]
            elif name.endswith(".jsonl"):
                rows = _json_lines(path, handle)
            elif name.endswith(".json"):
                content = handle.read()
                try:
                    rows = json.loads(content)
                except json.JSONDecodeError as whole:  # HF "json" files are often one record per line
                    first = next((line for line in content.splitlines() if line.strip()), "")
                    if not _is_json(first):  # not JSON lines either: json's own position is the file's
                        raise UserError(
                            f"Could not read {path}: it is not valid JSON ({whole.msg} at line {whole.lineno}, "
                            f"column {whole.colno})."
                        ) from None
                    rows = _json_lines(path, content.splitlines())
                rows = rows if isinstance(rows, list) else [rows]
            else:
                raise UserError(f"Calibration file {path} must be .txt, .jsonl or .json(.gz).")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as error:
        raise UserError(f"Could not read {path}: {error}.") from None
    texts = []
    for number, row in enumerate(rows, 1):
        text = row.get("text") if isinstance(row, dict) else None
        if not isinstance(text, str):
            what = (
                "without a 'text' field"
                if not isinstance(row, dict) or "text" not in row
                else "whose 'text' is not a string"
            )
            raise UserError(f"{path} has records {what} (record {number}).")
        texts.append(text)
    if not any(text.strip() for text in texts):
        raise UserError(f"{path} holds no text {use}.")
    return texts


def _json_lines(path: Path, lines) -> list:
    """One JSON record per line (blank lines skipped); a bad record is named by its line in the file (json's
    own position counts within the record, and past its end when the line's newline is kept)."""
    rows = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line.rstrip()))
            except json.JSONDecodeError as error:
                raise UserError(
                    f"Could not read {path}: line {number} is not a valid JSON record ({error.msg} at column "
                    f"{error.colno})."
                ) from None
    return rows


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _hub_texts(what: str, loader) -> list[str]:
    try:
        return loader()
    except Exception as error:  # datasets raises many kinds when offline
        raise UserError(
            f"Could not fetch {what} from the Hugging Face hub ({type(error).__name__}); {HUB_HINT}."
        ) from None


def source_names(source: str, joiner: str = "+") -> str:
    """A calibration source as a table names it: each part of a mixture (``c4+/data/dom.jsonl@2``) with a file
    by its name (``c4+dom.jsonl@2``), joined by ``joiner``."""
    return joiner.join(Path(part).name for part in source.split("+"))


def mixture_counts(shares: list[float], nsamples: int) -> list[int]:
    """Windows per source: ``nsamples`` split by the shares, the remainder to the largest fractions
    (the first source on a tie), so the counts always sum to ``nsamples``."""
    exact = [share * nsamples for share in shares]
    counts = [int(value) for value in exact]
    by_fraction = sorted(range(len(shares)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_fraction[: nsamples - sum(counts)]:
        counts[i] += 1
    return counts


def calibration_sample(
    tokenizer, source: str, nsamples: int, seqlen: int, seed: int, cancel: StopFlag | None = None
) -> tuple[torch.Tensor, str]:
    """The run's calibration windows (``calibration_windows`` from each source of a mixture, its share of
    them, the seed choosing which) and where they came from (the sources joined by `` + ``)."""
    parts = mixture(source)
    counts = mixture_counts([share for _, share in parts], nsamples)
    windows, wheres = [], []
    for (name, _), count in zip(parts, counts, strict=True):
        ids, where = tokenized_calibration(tokenizer, name)
        wheres.append(where)
        if count:
            windows.append(calibration_windows(ids, count, seqlen, seed, cancel, draw_document=name != "wikitext2"))
    return torch.cat(windows), " + ".join(wheres)


def source_place(source: str) -> str:
    """Where one calibration source is read from, as a run records it: the local file, or the hub's name."""
    local = data_dir()
    if source == "c4":
        return str(local / LOCAL_C4) if local else f"allenai/c4 {C4_SHARD}"
    if source == "wikitext2":
        return str(local / LOCAL_WIKITEXT2["train"]) if local else "wikitext-2-raw-v1 train"
    return str(user_path(source))


def calibration_identity(source: str) -> str | None:
    """The content identity a run of ``--calib source`` would record now (``Calibration.fingerprint``),
    without reading the documents: a study tells a run of another version of its files by it."""
    return sample_identity(" + ".join(source_place(name) for name, _ in mixture(source)))


def sample_identity(where: str) -> str | None:
    """The content identity of the files a sample came from (``calibration_sample``'s description)."""
    identities = [content_identity(part) for part in where.split(" + ")]
    return None if all(i is None for i in identities) else "+".join(str(i) for i in identities)


def calibration_documents(source: str) -> tuple[list[str], str]:
    """The documents to draw windows from, and a description of where they came from."""
    local = data_dir()
    if source == "c4":
        if local:
            path = local / LOCAL_C4
            if not path.is_file():
                raise UserError(f"ACETUI_DATA_DIR has no C4 sample at {path}.")
            return _read_records(path), source_place(source)

        def hub():
            from datasets import load_dataset

            return load_dataset("allenai/c4", data_files={"train": C4_SHARD}, split="train")["text"]

        return _hub_texts("C4", hub), source_place(source)
    if source == "wikitext2":  # one text, the train split joined with spaces, as Wanda's get_wikitext2 reads it
        if local:
            path = local / LOCAL_WIKITEXT2["train"]
            if not path.is_file():
                raise UserError(
                    f"ACETUI_DATA_DIR has no WikiText-2 train split at {path} (the test split is for evaluation only); use --calib c4 or a file."
                )
            return [" ".join(_read_records(path))], source_place(source)

        def hub():
            from datasets import load_dataset

            return [" ".join(load_dataset("wikitext", "wikitext-2-raw-v1", split="train")["text"])]

        return _hub_texts("WikiText-2", hub), source_place(source)
    path = user_path(source)
    if path.is_dir():
        raise UserError(f"Calibration source '{source}' is a folder; give c4, wikitext2 or a file of text.")
    if not path.is_file():
        raise UserError(f"Calibration source '{source}' is neither c4, wikitext2 nor an existing file.")
    return _read_records(path), source_place(source)


class LazyTokens(Sequence):
    """The token ids of each calibration document, computed the first time that document is drawn: a
    sampler draws a few hundred of the hub shard's 356k documents, so tokenizing all of them up front
    would cost minutes and gigabytes of Python lists for nothing."""

    def __init__(self, tokenizer, documents: Sequence[str]):
        self.tokenizer, self.documents = tokenizer, documents
        self.ids: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, index: int) -> list[int]:  # type: ignore[override]  # the sampler never slices
        if index not in self.ids:
            self.ids[index] = self.tokenizer(self.documents[index], add_special_tokens=True)["input_ids"]
        return self.ids[index]


def tokenized_calibration(tokenizer, source: str) -> tuple[LazyTokens, str]:
    """The calibration documents as lazily tokenized ids, and where they came from; cached per process,
    so a compare grid or sweep reads its corpus, and tokenizes the documents it draws, once."""
    return _tokenized_calibration(tokenizer, source, str(data_dir()))


@functools.lru_cache(maxsize=4)
def _tokenized_calibration(tokenizer, source: str, _data_dir: str):
    documents, where = calibration_documents(source)
    return LazyTokens(tokenizer, documents), where


def calibration_windows(
    ids: Sequence[list[int]], nsamples: int, seqlen: int, seed: int, cancel=None, *, draw_document: bool = True
) -> torch.Tensor:
    """``nsamples`` windows of ``seqlen`` tokens, drawn as Wanda's C4 sampler does: with
    ``random.seed(seed)``, pick a random document longer than ``seqlen`` tokens, then a random
    window inside it. Without ``draw_document`` (WikiText-2's train split, one text) only the window is
    drawn, as Wanda's ``get_wikitext2`` draws it: drawing the one document would move the seed's sequence. Only
    the documents drawn are read from ``ids`` (see ``LazyTokens``).
    Returns ``(nsamples, seqlen)`` token ids; ``cancel`` is checked before each window."""
    random.seed(seed)
    windows: list[list[int]] = []
    too_short: set[int] = set()
    for _ in range(nsamples):
        where = f"while drawing calibration windows ({len(windows)} of {nsamples} drawn), before any layer was pruned"
        check_stop(cancel, where)
        while True:
            index = random.randint(0, len(ids) - 1) if draw_document else 0
            doc = ids[index]
            if len(doc) > seqlen:
                break
            too_short.add(index)
            if len(too_short) == len(ids):  # every document drawn and none long enough: the loop would never end
                raise no_window(nsamples, seqlen, max(len(ids[i]) for i in too_short))
        start = random.randint(0, len(doc) - seqlen - 1)
        windows.append(doc[start : start + seqlen])
    return torch.tensor(windows, dtype=torch.long)


def no_window(nsamples: int, seqlen: int, longest: int) -> UserError:
    """The sentence for calibration text without a document longer than a window."""
    return UserError(
        f"The calibration data does not hold {nsamples} windows of {seqlen} tokens "
        f"(its longest document has {longest} tokens); use a smaller --seqlen or more text."
    )


def longest_document(tokenizer, documents: Sequence[str], seqlen: int) -> int:
    """The token count of the first document, longest first by characters, that holds a window of
    ``seqlen`` tokens (so usually one document is tokenized), or of the longest when none does."""
    longest = 0
    for text in sorted(documents, key=len, reverse=True):
        longest = max(longest, len(tokenizer(text, add_special_tokens=True)["input_ids"]))
        if longest > seqlen:
            break
    return longest


def wikitext2_test_ids(tokenizer) -> torch.Tensor:
    """The tokenized WikiText-2 test text (cached per process and tokenizer)."""
    return _wikitext2_test_ids(tokenizer, str(data_dir()))


@functools.lru_cache(maxsize=4)
def _wikitext2_test_ids(tokenizer, _data_dir: str) -> torch.Tensor:
    return tokenizer(wikitext2_test_text()[0], return_tensors="pt").input_ids[0]


def wikitext2_test_identity() -> str:
    """The start of the SHA-256 of the WikiText-2 test text a run evaluates: runs that record the same one
    read the same text, whether from a local copy or the hub; another copy (edited, another version)
    records another, and its perplexities are never compared with these."""
    return _wikitext2_test_identity(str(data_dir()))


@functools.lru_cache(maxsize=4)
def _wikitext2_test_identity(_data_dir: str) -> str:
    return hashlib.sha256(wikitext2_test_text()[0].encode()).hexdigest()[:16]


def wikitext2_test_text() -> tuple[str, str]:
    """The ``wikitext-2-raw-v1`` test split joined with two newlines, as Wanda and SparseGPT evaluate it."""
    local = data_dir()
    if local:
        path = local / LOCAL_WIKITEXT2["test"]
        if not path.is_file():
            raise UserError(f"ACETUI_DATA_DIR has no WikiText-2 test split at {path}.")
        return "\n\n".join(_read_records(path, "to evaluate on")), str(path)

    def hub():
        from datasets import load_dataset

        return load_dataset("wikitext", "wikitext-2-raw-v1", split="test")["text"]

    return "\n\n".join(_hub_texts("WikiText-2", hub)), "wikitext-2-raw-v1 test"
