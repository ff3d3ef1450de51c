"""A run's masks on disk (``--keep-masks``) and the overlap of two runs' masks (``acetui overlap``).

Per pruned linear, its zero positions as bits: ``numpy.packbits`` along each row (one bit per weight,
rows padded to whole bytes with zeros), an ``.npy`` member ``<layer>.<linear>.npy`` of one
deflate-compressed zip, which ``numpy.load`` reads as an ``.npz``. Layers are written as they are pruned
into ``<file>.partial``, renamed when the last one is in: a run that stops keeps no half file.
Overlap is counted on the packed bits, never unpacked.
"""

from __future__ import annotations

import os
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from acetui_core.basics.choices import SparsityScope
from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import same_model

MaskKey = tuple[int, str]  # (decoder layer, linear name)


class MaskWriter:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.zip = zipfile.ZipFile(self.partial, "w", compression=zipfile.ZIP_DEFLATED)

    def add(self, layer: int, name: str, pruned: torch.Tensor) -> None:
        """Store the boolean ``(d_out, d_in)`` matrix of pruned positions of one linear."""
        packed = np.packbits(pruned.cpu().numpy(), axis=1)
        with self.zip.open(f"{layer}.{name}.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, packed, allow_pickle=False)

    def finish(self) -> None:
        self.zip.close()
        os.replace(self.partial, self.path)

    def discard(self) -> None:
        self.zip.close()
        self.partial.unlink(missing_ok=True)


@contextmanager
def mask_writer(path: Path | None):
    """A ``MaskWriter`` for ``path`` (None: masks are not kept), finished on success, discarded otherwise."""
    if path is None:
        yield None
        return
    writer = MaskWriter(path)
    try:
        yield writer
    except BaseException:
        writer.discard()
        raise
    writer.finish()


def read_masks(path: Path) -> dict[MaskKey, np.ndarray]:
    """The packed masks of a mask file, by (layer, linear name)."""
    with np.load(path, allow_pickle=False) as npz:
        masks = {}
        for key in npz.files:
            layer, name = key.split(".", 1)
            masks[(int(layer), name)] = npz[key]
        return masks


def _ones(packed: np.ndarray) -> int:
    return int(np.bitwise_count(packed).sum(dtype=np.int64))


@dataclass
class LinearOverlap:
    """Pruned positions of one linear in runs A and B, and how many both prune."""

    layer: int
    name: str
    pruned_a: int
    pruned_b: int
    shared: int

    @property
    def shared_fraction(self) -> float:
        """Of A's pruned positions, the fraction B prunes too (1 for a run with itself)."""
        return self.shared / self.pruned_a if self.pruned_a else 1.0

    @property
    def jaccard(self) -> float:
        """Shared over pruned by either: ``|A ∩ B| / |A ∪ B|``."""
        union = self.pruned_a + self.pruned_b - self.shared
        return self.shared / union if union else 1.0


def overlap(masks_a: dict[MaskKey, np.ndarray], masks_b: dict[MaskKey, np.ndarray]) -> list[LinearOverlap]:
    """Per linear, in layer order and the model's order within a layer (the order they were written);
    both mask sets must cover the same linears with the same shapes."""
    if masks_a.keys() != masks_b.keys() or any(masks_a[k].shape != masks_b[k].shape for k in masks_a):
        raise ValueError("the masks cover different linears")
    return [
        LinearOverlap(layer, name, _ones(a), _ones(b), _ones(a & b))
        for (layer, name), a, b in (
            (key, masks_a[key], masks_b[key]) for key in sorted(masks_a, key=lambda key: key[0])
        )
    ]


def total(rows: list[LinearOverlap], layer: int | None = None, name: str | None = None) -> LinearOverlap:
    """The rows of one layer, one linear name, or all of them, summed into one."""
    chosen = [r for r in rows if (layer is None or r.layer == layer) and (name is None or r.name == name)]
    return LinearOverlap(
        -1 if layer is None else layer,
        name or "all",
        sum(r.pruned_a for r in chosen),
        sum(r.pruned_b for r in chosen),
        sum(r.shared for r in chosen),
    )


def _masks_of(run, path: Path | None) -> dict[MaskKey, np.ndarray]:
    if path is None:
        raise UserError(f"Run {run.id} kept no masks; prune again with --keep-masks to compare masks.")
    if not path.is_file():
        raise UserError(f"The masks of run {run.id} are gone ({path} does not exist).")
    try:
        return read_masks(Path(path))
    except Exception as error:  # zip, npy or key damage: any of them means the file is unreadable
        raise UserError(f"The masks file of run {run.id} ({path}) is damaged ({type(error).__name__}).") from None


def run_overlap(run_a, run_b, files: tuple[Path | None, Path | None]) -> list[LinearOverlap]:
    """The overlap of two runs of the store (``RunRecord``s) from their mask ``files``
    (``StoreReader.masks_kept``); one sentence when they cannot be compared."""
    model_a, model_b = run_a.config.model, run_b.config.model
    fingerprints = (
        run_a.results and run_b.results and (run_a.results.model_fingerprint, run_b.results.model_fingerprint)
    )
    if run_a.model_key != run_b.model_key or (fingerprints and not same_model(*fingerprints)):
        raise UserError(
            f"Runs {run_a.id} and {run_b.id} pruned different models ({model_a}, {model_b}); "
            f"their masks cannot be compared."
        )
    masks_a, masks_b = _masks_of(run_a, files[0]), _masks_of(run_b, files[1])
    # an expert one run removed has no mask there: the other run's masks of it are left out, and only
    # the linears both runs kept are compared (``removal_difference`` says so)
    gone_a, gone_b = _removed_by(run_a), _removed_by(run_b)
    if all(_of_removed(key, gone_b) for key in masks_a.keys() - masks_b.keys()) and all(
        _of_removed(key, gone_a) for key in masks_b.keys() - masks_a.keys()
    ):
        masks_a = {key: mask for key, mask in masks_a.items() if key in masks_b}
        masks_b = {key: mask for key, mask in masks_b.items() if key in masks_a}
    if scope_difference(run_a, run_b):  # one masked the routed experts alone: the linears both masked are theirs
        inside = masks_a if run_a.config.sparsity_scope == SparsityScope.EXPERTS else masks_b
        masks_a = {key: mask for key, mask in masks_a.items() if key in inside}
        masks_b = {key: mask for key, mask in masks_b.items() if key in inside}
    try:
        return overlap(masks_a, masks_b)
    except ValueError:
        raise UserError(
            f"The masks of runs {run_a.id} and {run_b.id} cover different linears or shapes although both runs "
            f"pruned {model_a}: one of the mask files is damaged, or the model changed between the runs."
        ) from None


def _removed_by(run) -> dict[int, set[str]]:
    """The experts ``--expert-sparsity`` removed from each layer of ``run``, as mask-name prefixes
    (``mlp.experts.3.``, numbered as in the dense model, as the masks are)."""
    experts = run.results.experts if run.results else None
    removed: dict[int, set[str]] = {}
    for record in experts.removal if experts else []:
        removed.setdefault(record.layer, set()).update(f"{record.experts}.{e}." for e in record.removed)
    return removed


def _of_removed(key: MaskKey, removed: dict[int, set[str]]) -> bool:
    layer, name = key
    return any(name.startswith(prefix) for prefix in removed.get(layer, ()))


def scope_difference(run_a, run_b) -> str | None:
    """One sentence when one run masked the routed experts alone (``--sparsity-scope experts``) and the other
    every linear: the overlap covers the experts' linears, the only ones both masked; None otherwise."""
    scopes = {run.id: run.config.sparsity_scope for run in (run_a, run_b)}
    if len(set(scopes.values())) == 1:
        return None
    inside = next(run_id for run_id, scope in scopes.items() if scope == SparsityScope.EXPERTS)
    return (
        f"Run {inside} masked the routed experts alone (--sparsity-scope experts): only their linears, the ones "
        f"both runs masked, are compared."
    )


def removal_difference(run_a, run_b) -> str | None:
    """One sentence when the two runs removed different experts (``--expert-sparsity``): which, per layer,
    and that the overlap covers the experts both kept; None when they removed the same (or none)."""
    gone_a, gone_b = _removed_by(run_a), _removed_by(run_b)
    if gone_a == gone_b:
        return None

    def named(prefixes: set[str]) -> str:
        return ", ".join(sorted((p.rstrip(".") for p in prefixes), key=lambda n: int(n.rsplit(".", 1)[1]))) or "none"

    layers = [
        f"layer {layer}: {run_a.id} removed {named(gone_a.get(layer, set()))}, "
        f"{run_b.id} {named(gone_b.get(layer, set()))}"
        for layer in sorted(gone_a.keys() | gone_b.keys())
        if gone_a.get(layer) != gone_b.get(layer)
    ]
    return (
        f"Runs {run_a.id} and {run_b.id} removed different experts ({'; '.join(layers)}): only the experts "
        f"both kept are compared."
    )
