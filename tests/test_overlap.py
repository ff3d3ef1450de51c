"""Masks kept with --keep-masks, and ``acetui overlap``: a run with itself shares everything, with its
complement nothing; runs that cannot be compared get one sentence."""

import json
import shutil

import numpy as np
import pytest
import torch
from runhelpers import LINEAR_NAMES, Clock, cli, insert_run

from acetui_core.modeling.layouts import decoder_layers, prunable_linears, weight_matrix
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.run.config import RunConfig
from acetui_core.scores.maskfile import MaskWriter, mask_writer, overlap, read_masks, total
from acetui_core.storage.store import Store


def write_masks(path, masks: dict) -> str:
    writer = MaskWriter(path)
    for (layer, name), pruned in masks.items():
        writer.add(layer, name, pruned)
    writer.finish()
    return str(path)


def random_masks(seed: int = 0, layers: int = 2) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        (layer, name): torch.rand(64, 64 + 64 * (i % 2), generator=generator) < 0.5
        for layer in range(layers)
        for i, name in enumerate(LINEAR_NAMES)
    }


def test_kept_masks_are_the_zeros_of_the_pruned_model(make_tiny_model, calib_file, tmp_path):
    loaded = load_model(str(make_tiny_model("llama")), device="cpu")
    config = RunConfig(
        model=loaded.source,
        method="wanda",
        sparsity="0.5",
        calib=calib_file,
        nsamples=4,
        seqlen=16,
        evals=[],
        keep_masks=True,
    )
    path = tmp_path / "masks" / "run.npz"
    pipeline.prune(loaded, config, masks_path=path)
    masks = read_masks(path)
    for index, layer in enumerate(decoder_layers(loaded.model)):
        for name, module in prunable_linears(layer).items():
            zeros = (weight_matrix(module) == 0).numpy()
            assert np.array_equal(np.unpackbits(masks[(index, name)], axis=1, count=zeros.shape[1]), zeros)
    assert not path.with_name("run.npz.partial").exists()


def test_a_stopped_run_keeps_no_half_mask_file(tmp_path):
    path = tmp_path / "run.npz"
    with pytest.raises(RuntimeError), mask_writer(path) as writer:
        writer.add(0, "mlp.up_proj", torch.zeros(4, 8, dtype=torch.bool))
        raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []


def test_a_mask_with_itself_shares_everything_and_with_its_complement_nothing(tmp_path):
    masks = random_masks()
    complement = {key: ~mask for key, mask in masks.items()}
    same = read_masks(write_masks(tmp_path / "a.npz", masks))
    other = read_masks(write_masks(tmp_path / "b.npz", complement))
    itself, opposite = overlap(same, same), overlap(same, other)
    assert all(row.shared_fraction == 1 and row.jaccard == 1 for row in itself)
    assert all(row.shared_fraction == 0 and row.jaccard == 0 for row in opposite)
    down = next(row for row in itself if (row.layer, row.name) == (0, "mlp.down_proj"))
    assert down.pruned_a == int(masks[(0, "mlp.down_proj")].sum())  # bits counted exactly
    assert total(itself).pruned_a == sum(int(m.sum()) for m in masks.values())


def test_half_overlap_is_counted_exactly(tmp_path):
    a = {(0, "mlp.up_proj"): torch.tensor([[1, 1, 0, 0, 1]], dtype=torch.bool)}
    b = {(0, "mlp.up_proj"): torch.tensor([[1, 0, 1, 0, 1]], dtype=torch.bool)}
    [row] = overlap(read_masks(write_masks(tmp_path / "a.npz", a)), read_masks(write_masks(tmp_path / "b.npz", b)))
    assert (row.pruned_a, row.pruned_b, row.shared) == (3, 3, 2)
    assert row.shared_fraction == pytest.approx(2 / 3) and row.jaccard == pytest.approx(2 / 4)


@pytest.fixture
def store_with_masks(tmp_path):
    clock = Clock()
    store = Store(tmp_path / "runs.db", clock=clock)
    wanda = RunConfig(model="/models/llama-7b", method="wanda", sparsity="0.5")
    ace = RunConfig(model="/models/llama-7b", method="ace", sparsity="0.5")
    masks = random_masks()
    a = write_masks(store.masks_path("aaaa0001"), masks)
    b = write_masks(store.masks_path("bbbb0002"), {key: ~m for key, m in masks.items()})
    insert_run(store, clock, "aaaa0001", wanda, created=1e9, ppl=7.0, result={"masks": a})
    insert_run(store, clock, "bbbb0002", ace, created=1e9 + 100, ppl=7.1, result={"masks": b})
    insert_run(store, clock, "cccc0003", ace, created=1e9 + 200, ppl=7.2)  # kept no masks
    other = RunConfig(model="/models/opt-1.3b", method="ace", sparsity="0.5")
    c = write_masks(store.masks_path("dddd0004"), masks)
    insert_run(store, clock, "dddd0004", other, created=1e9 + 300, ppl=9.0, result={"masks": c})
    return store


def test_overlap_prints_per_layer_and_kind(monkeypatch, capsys, store_with_masks):
    code, out, err = cli(monkeypatch, capsys, "overlap", "aaaa", "aaaa", "--store", store_with_masks.path)
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("layer"))
    assert header.split() == ["layer", "q", "k", "v", "o", "gate", "up", "down", "all"]
    assert [line.split()[0] for line in lines if line[:1].isdigit() or line.startswith("all")] == ["0", "1", "all"] * 2
    assert {cell for line in lines if line[:1].isdigit() for cell in line.split()[1:]} == {"1.000"}

    code, out, err = cli(monkeypatch, capsys, "overlap", "aaaa", "bbbb", "--store", store_with_masks.path, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["linears"]) == 14 and all(row["shared"] == 0 for row in data["linears"])


@pytest.mark.parametrize(
    ("runs", "sentence"),
    [
        (("aaaa", "cccc"), "Run cccc0003 kept no masks"),
        (("aaaa", "dddd"), "pruned different models"),
        (("aaaa", "zzzz"), "There is no run 'zzzz'"),
    ],
)
def test_runs_that_cannot_be_compared_get_one_sentence(monkeypatch, capsys, store_with_masks, runs, sentence):
    code, out, err = cli(monkeypatch, capsys, "overlap", *runs, "--store", store_with_masks.path)
    assert code == 2 and out == ""
    assert sentence in err and len(err.strip().splitlines()) == 1


def test_a_missing_or_damaged_mask_file_gets_one_sentence(monkeypatch, capsys, store_with_masks):
    store_with_masks.masks_path("bbbb0002").write_bytes(b"not a zip")
    code, _, err = cli(monkeypatch, capsys, "overlap", "aaaa", "bbbb", "--store", store_with_masks.path)
    assert code == 2 and "is damaged" in err and len(err.strip().splitlines()) == 1
    store_with_masks.masks_path("bbbb0002").unlink()
    code, _, err = cli(monkeypatch, capsys, "overlap", "aaaa", "bbbb", "--store", store_with_masks.path)
    assert code == 2 and "are gone" in err


def test_a_mask_file_of_the_wrong_shapes_is_called_damaged_not_another_model(monkeypatch, capsys, store_with_masks):
    masks = {
        key: value[: len(value) // 2] for key, value in read_masks(store_with_masks.masks_path("bbbb0002")).items()
    }
    np.savez(store_with_masks.masks_path("bbbb0002"), **{f"{layer}.{name}": m for (layer, name), m in masks.items()})
    code, _, err = cli(monkeypatch, capsys, "overlap", "aaaa", "bbbb", "--store", store_with_masks.path)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "both runs pruned /models/llama-7b: one of the mask files is damaged" in err


def test_removing_a_run_removes_its_masks(store_with_masks):
    path = store_with_masks.masks_path("aaaa0001")
    store_with_masks.delete_runs(["aaaa0001"])
    assert not path.exists()


def test_a_copied_store_removes_its_own_masks_and_a_moved_one_reads_them(monkeypatch, capsys, store_with_masks):
    """A run records its mask file by absolute path: a copy of the store must neither delete the original's
    file nor lose its own once the original is gone."""
    original = store_with_masks.path.parent
    copy, moved = (original.with_name(f"{original.name}-{name}") for name in ("copy", "moved"))
    shutil.copytree(original, copy)
    shutil.copytree(original, moved)
    Store(copy / "runs.db").delete_runs(["aaaa0001"])
    assert store_with_masks.masks_path("aaaa0001").is_file()  # the original's masks are still there
    assert not (copy / "masks" / "aaaa0001.npz").exists()  # the copy's own went with its run

    shutil.rmtree(original / "masks")  # the store moved: the recorded paths name nothing now
    code, out, err = cli(monkeypatch, capsys, "overlap", "aaaa", "bbbb", "--store", moved / "runs.db", "--json")
    assert code == 0, err
    assert all(row["shared"] == 0 for row in json.loads(out)["linears"])
