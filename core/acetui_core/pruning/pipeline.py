"""A run from start to end: check its settings, load the model (unless given), prune it
(``acetui_core.pruning.layerloop``), save it before evaluation so a failed evaluation never loses it, evaluate it
(``acetui_core.pruning.evaluate``), and gather everything into the ``RunResult`` that ``RunFinished`` carries."""

from __future__ import annotations

import contextlib
from dataclasses import fields
from pathlib import Path

import torch

from acetui_core.basics.errors import Cancelled, StopFlag, UserError
from acetui_core.basics.resources import peak_rss_mb, reset_peak_memory
from acetui_core.modeling.checkpoint import folder_identity, save_checkpoint
from acetui_core.modeling.layerfeed import return_freed_memory_to_the_os
from acetui_core.modeling.models import Loaded
from acetui_core.modeling.streaming import PrunedLayers, load_for_run
from acetui_core.pruning.evaluate import evaluate
from acetui_core.pruning.expertremoval import counted_from_files
from acetui_core.pruning.layerloop import prune
from acetui_core.pruning.validate import check_against_model, check_config
from acetui_core.run.config import RunConfig
from acetui_core.run.events import OnEvent, RunFinished
from acetui_core.run.records import RunResult, parameters_removed
from acetui_core.scores.metrics import get_method
from acetui_core.scores.permute import write_permutations


def run(
    config: RunConfig,
    on_event: OnEvent | None = None,
    cancel: StopFlag | None = None,
    loaded: Loaded | None = None,
    masks_path: Path | None = None,
    run_id: str | None = None,
    checked: bool = False,
) -> RunResult:
    """Check, load (unless given), prune, save, evaluate; emit ``RunFinished`` and return the result.
    ``masks_path``: where ``--keep-masks`` keeps the masks; ``run_id``: the store's id of the run, which
    the result carries (None outside a store). ``checked``: ``config`` already passed ``check_config``
    (every run the store holds did, when ``launch.queue`` recorded it), so it is not checked a second
    time; only its fit to the loaded model is, which needs the model."""
    if not checked:
        config = check_config(config)
    replaceable = folder_identity(config.save) if config.save else None  # what --overwrite was checked against
    # this run's peak, not that of the runs before it in this process: what they freed goes back to the OS
    # first, so that the mark starts from what is held now
    return_freed_memory_to_the_os()
    reset_peak_memory()
    if loaded is None:
        loaded = load_for_run(
            config.model,
            device=config.device,
            dtype=config.dtype,
            offload=config.offload,
            evaluates=bool(config.evals),
            on_event=on_event,
        )
    check_against_model(config, loaded.context_length)
    with contextlib.ExitStack() as cleanup:
        out = None  # a streamed run writes each pruned layer as it leaves: to --save, or to scratch for evaluation
        if loaded.streamed is not None and (config.save or config.evals):
            out = PrunedLayers(loaded, config.save, config.overwrite)
            cleanup.callback(out.close)
        pruned = prune(loaded, config, on_event, cancel, masks_path, release=out.release if out else None)
        prune_rss_mb, prune_gpu_mb = _peak_memory(loaded.device)
        # Saved before evaluation, so a failed or cancelled evaluation never loses the pruned model.
        pruned_folder = out.finish() if out else None
        saved_to: str | None
        if out is None and config.save:
            saved_to = save_checkpoint(loaded.model, loaded.tokenizer, config.save, config.overwrite, replaceable)
        else:
            saved_to = str(pruned_folder) if config.save else None
        if pruned.experts_removed is not None:
            pruned.experts_removed = counted_from_files(pruned.experts_removed, config.model, saved_to)
        if saved_to and pruned.permutations:
            write_permutations(saved_to, config.sparsity_spec, pruned.permutations)
        try:
            scores = evaluate(loaded, config, on_event, cancel, pruned_folder)
        except Cancelled as stopped:
            kept = f"the pruned model is saved in {saved_to}" if saved_to else "the pruned weights were not kept"
            raise Cancelled(f"{stopped.where}; every layer was pruned and recorded, {kept}") from None
        except Exception as error:  # the layers are recorded; say where the pruned weights are, or how to keep them
            what = (
                str(error) if isinstance(error, UserError) else f"Evaluation failed ({type(error).__name__}: {error})."
            )
            kept = (
                f"The pruned model is saved in {saved_to}."
                if saved_to
                else "The pruned weights were not kept; pass --save DIR to keep them next time."
            )
            raise UserError(f"{what} {kept}") from error
    rss_mb, gpu_mb = _peak_memory(loaded.device)
    result = RunResult(
        run_id=run_id,
        model=config.model,
        method=config.method,
        label=config.label,
        sparsity=config.sparsity,
        group=config.group,
        **{k: v for k, v in _fields(pruned).items() if k != "permutations"},  # they go to --save's sidecar
        **_fields(scores),
        parameters_removed=parameters_removed(
            pruned.layers, pruned.experts_removed, masked=config.sparsity_spec.fraction > 0
        ),
        peak_rss_mb=rss_mb,
        peak_gpu_mb=gpu_mb,
        prune_peak_rss_mb=prune_rss_mb,
        prune_peak_gpu_mb=prune_gpu_mb,
        device=str(loaded.device),
        dtype=str(loaded.dtype).removeprefix("torch."),
        saved_to=saved_to,
        model_fingerprint=loaded.fingerprint,
        masks=str(masks_path) if config.keep_masks else None,
        method_fingerprint=get_method(config.method).fingerprint,
        config=config,
    )
    if on_event:
        on_event(RunFinished(result))
    return result


def _peak_memory(device: torch.device) -> tuple[float, float | None]:
    rss_mb = peak_rss_mb()
    gpu_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return rss_mb, gpu_mb


def _fields(record) -> dict:
    """A dataclass's fields as keyword arguments, nested records kept as they are."""
    return {f.name: getattr(record, f.name) for f in fields(record)}
