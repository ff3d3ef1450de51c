"""Every check of a run's settings, in one place, before anything is recorded, loaded or queued.

``check_config`` needs no model: it is what the launcher runs on every configuration of a grid, what the
New run form runs as the user types, and it returns the configuration in its normal form. What only the
loaded model can tell (its context length) is checked by ``check_against_model`` right after loading,
before any calibration data is read.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from acetui_core.basics import parse
from acetui_core.basics.choices import Allocation, EvalKind, Offload, Permute, Refine, SparsityGroup, Update
from acetui_core.basics.errors import UserError
from acetui_core.basics.paths import BUILT_IN_SOURCES, data_dir, file_identity, mixture, user_path
from acetui_core.modeling.checkpoint import check_save_dir
from acetui_core.modeling.data import (
    LOCAL_C4,
    LOCAL_WIKITEXT2,
    calibration_documents,
    longest_document,
    no_window,
    wikitext2_test_text,
)
from acetui_core.modeling.models import check_device_name, model_source, resolve_device
from acetui_core.modeling.preflight import check_runnable, model_tokenizer, preflight
from acetui_core.modeling.streaming import streaming_folder
from acetui_core.run.basic_settings import FULL_CONTEXT_CAP
from acetui_core.run.config import SETTINGS, RunConfig, needing
from acetui_core.scores.masks import check_nm_fits
from acetui_core.scores.metrics import get_method, reads_calibration, unread_settings
from acetui_core.scores.sparsity import parse_sparsity

DSNOT = needing("refine", Refine.DSNOT)
OWL = needing("allocation", Allocation.OWL)


def check_config(config: RunConfig, *, local_device: bool = True, protected: tuple = ()) -> RunConfig:
    """The configuration with its values in normal form, or the first problem as a UserError.

    ``local_device``: the run executes on this machine, so ``--device cuda`` needs a GPU here (a Slurm
    job checks on its own node). ``protected``: places (path, what it is) besides the source model and
    the data folder that ``--save`` must keep away from (the run store's)."""
    model_source(config.model)  # a missing path first: the most common mistake, and cheap to see
    config = check_settings(config, local_device=local_device)
    if config.offload == Offload.DISK:
        streaming_folder(config.model.strip(), config.offload)  # says why a model cannot stream
    check_save_dir(config.save, config.overwrite, (*model_places(config.model.strip()), *protected))
    facts = preflight(config.model.strip())  # last: it reads the model's files
    check_runnable(config.model.strip())
    for name, inputs in facts.input_widths:  # the shapes from the config, long before any weight is loaded
        check_nm_fits(config.sparsity_spec, inputs, name)
    from acetui_core.modeling.layouts import expert_layout  # torch: preflight imported it already
    from acetui_core.pruning.expertremoval import check_expert_settings

    check_expert_settings(facts.skeleton, config)
    if config.allocation == Allocation.OWL:
        config = _check_owl_layers(config, facts.skeleton)
    # checked and then put back to their defaults: a setting the run never reads never splits a cell
    config = _defaults(
        config, tuple(sorted(unread_settings(config, experts=expert_layout(facts.skeleton) is not None)))
    )
    check_against_model(config, facts.context)
    check_calibration_fits(config, facts.context)
    check_test_text_fits(config, facts.context)
    return replace(config, model=config.model.strip())


# What check_config puts back to its default only where the model's files show it unread: --moe-calibration on
# a dense model, OWL's mean on layers all of one size
MODEL_DECIDED = ("moe_calibration", "owl_mean")


def check_settings(config: RunConfig, *, local_device: bool = True) -> RunConfig:
    """``check_config`` less what reads the model's files: the settings in normal form but for
    ``MODEL_DECIDED``, as given. What a study's status and report check of a cell whose model is gone (a
    stored run of the cell recorded how the model decided)."""
    method = get_method(config.method)
    config = parsed(
        replace(config, method=method.name), "sparsity", "group", "sparsity_scope", "expert_sparsity", "expert_score"
    )
    if config.sparsity_spec.is_nm:  # N:M competes within each row's runs of M inputs: --group is unused, and
        config = replace(config, group=SparsityGroup.ROW)  # every N:M run records row, so none splits a cell
    if config.sparsity_spec.fraction == 0:
        config = _defaults(config, ("sparsity_scope",))  # no mask: where it would go never splits cells
    if config.expert_sparsity == 0:
        parse_sparsity(config.sparsity)  # a ratio of 0 prunes nothing unless whole experts are removed
        config = _defaults(config, ("expert_score",))  # unused: it never splits a comparison's cells
    config = _check_variants(config, method)
    config = _check_mask_choice(config, method)
    if not reads_calibration(config):  # no calibration activations: no outputs whose fidelity to record
        config = _defaults(config, ("fidelity",))
    config = parsed(config, "nsamples", "seqlen", "seed", "batch_size", "evals", "ria_alpha")
    # unused, the source is still recorded with the run: a file it names must be one; the built-in corpora
    # need no local copy then
    check_calibration_source(config.calib, corpora=reads_calibration(config))
    if EvalKind.WIKITEXT2 in config.evals:
        config = parsed(config, "eval_seqlen", "eval_limit")
        _local_file("WikiText-2 test split", LOCAL_WIKITEXT2["test"])
    if EvalKind.ZEROSHOT in config.evals:
        from acetui_core.pruning.zeroshot import validate_tasks

        config = replace(config, tasks=validate_tasks(config.tasks, config.zeroshot_limit))
    if local_device:
        resolve_device(config.device)
    else:
        check_device_name(config.device)
    config = parsed(config, "dtype", "offload")  # names only: "auto" is decided where the run executes
    # what the method never reads, put back so it never splits a cell; --moe-calibration is the model's to decide
    config = _defaults(config, tuple(sorted(unread_settings(config, experts=True))))
    return replace(config, model=config.model.strip())


def _check_owl_layers(config: RunConfig, skeleton) -> RunConfig:
    """OWL against the model's layers (their sizes from the model on the meta device): the mean put back to
    the default where every masked layer is equal in size (OWL's two means then give the same sparsities),
    and a lambda refused that could give a layer a sparsity of 1 or more (OWL's code would prune all of it),
    before anything is loaded. A layer that could fall to 0 or below is pruned at 0.01, as in OWL's code."""
    from acetui_core.modeling.layouts import decoder_layers
    from acetui_core.pruning.allocation import highest_owl_sparsity, layer_sizes

    sizes = [size for size in layer_sizes(decoder_layers(skeleton), config.sparsity_scope) if size]
    if len(set(sizes)) <= 1:
        config = _defaults(config, ("owl_mean",))
    ratio, lam = config.sparsity_spec.ratio, config.owl_lambda
    highest = highest_owl_sparsity(sizes, ratio, lam, config.owl_mean)
    if highest >= 1:
        below = (1 - ratio) * lam / (highest - ratio)  # the highest grows in proportion to lambda
        raise UserError(
            f"--owl-lambda {lam:g} at --sparsity {ratio:g} could give a layer a sparsity of {highest:.3g} (the "
            f"layer with the fewest outliers, when every other has the most), pruning all of it: give a lambda "
            f"under {below:.3g}."
        )
    return config


def model_places(model: str) -> list[tuple[Path, str]]:
    """The source model's files and the data folder: what a save must never replace or enter."""
    kind, path = model_source(model)
    places = [(Path(path), "the source model")] if kind != "hub" else []
    root = data_dir()
    return places + ([(root, "the data folder (ACETUI_DATA_DIR)")] if root is not None else [])


def parsed(config: RunConfig, *names: str) -> RunConfig:
    """The settings ``names`` through their parsers (the settings table's): in normal form, or the first
    problem as the sentence the CLI prints."""
    return replace(config, **{name: SETTINGS[name].value(getattr(config, name)) for name in names})


def _defaults(config: RunConfig, names: tuple[str, ...]) -> RunConfig:
    return replace(config, **{name: SETTINGS[name].default for name in names})


def _check_variants(config: RunConfig, method) -> RunConfig:
    """VarP's scale and form, the layer allocation and the weight update; OWL's parameters are put back to
    their defaults without it, so they never split a comparison's cells."""
    config = parsed(config, "varp_scale", "varp_form", "allocation", "update", "moe_calibration")
    if method.score is None and (config.update != Update.NONE or config.allocation != Allocation.UNIFORM):
        flag = "--update obs" if config.update != Update.NONE else "--allocation owl"
        raise UserError(f"{flag} needs a scoring method; {method.name} chooses and updates its own weights.")
    if config.allocation == Allocation.UNIFORM:
        return _defaults(config, OWL)
    if config.sparsity_spec.is_nm:
        raise UserError(
            f"--allocation owl needs unstructured sparsity (a ratio such as 0.7), not the pattern {config.sparsity}."
        )
    return parsed(config, *OWL)


def _check_mask_choice(config: RunConfig, method) -> RunConfig:
    """``--permute`` and ``--refine`` (and DSnoT's parameters, put back to their defaults without it)."""
    config = parsed(config, "permute", "refine")
    if method.score is None and (config.permute != Permute.NONE or config.refine != Refine.NONE):
        flag = f"--permute {config.permute}" if config.permute != Permute.NONE else f"--refine {config.refine}"
        raise UserError(f"{flag} needs a scoring method; {method.name} chooses and updates its own weights.")
    if config.permute != Permute.NONE and not config.sparsity_spec.is_nm:
        raise UserError(
            f"--permute {config.permute} reorders input channels for N:M patterns; it needs a sparsity such as "
            f"2:4, not {config.sparsity}."
        )
    if config.permute == Permute.NONE:  # the guard has no step to keep or skip
        config = _defaults(config, ("permute_guard",))
    if config.refine == Refine.NONE:
        return _defaults(config, DSNOT)
    config = parsed(config, *DSNOT)
    # An N:M mask's kept weights are ranked by the run's metric whatever --dsnot-prune-score says.
    return _defaults(config, ("dsnot_prune_score",)) if config.sparsity_spec.is_nm else config


def check_against_model(config: RunConfig, context_length: int) -> None:
    """What the loaded model decides: calibration and evaluation windows must fit its context."""
    if reads_calibration(config):
        resolve_seqlen(config.seqlen, context_length, "--seqlen")
    if EvalKind.WIKITEXT2 in config.evals:
        resolve_seqlen(config.eval_seqlen, context_length, "--eval-seqlen")


def resolve_seqlen(seqlen, context_length: int, flag: str = "--seqlen") -> int:
    """A window length in tokens: ``full``/None is the context capped at ``FULL_CONTEXT_CAP``."""
    if seqlen in (None, "full"):
        return min(context_length, FULL_CONTEXT_CAP)
    seqlen = parse.whole(seqlen, flag, minimum=2)
    if seqlen > context_length:
        raise UserError(f"{flag} {seqlen} is longer than the model's context of {context_length} tokens.")
    return seqlen


def _local_file(what: str, relative: str) -> None:
    root = data_dir()
    if root is not None and not (root / relative).is_file():
        raise UserError(f"ACETUI_DATA_DIR ({root}) has no {what} at {root / relative}.")


def check_calibration_source(source: str, corpora: bool = True) -> None:
    """A built-in source must be present in the local data folder when one is set (``corpora``: checked at
    all, for a run that reads it); a file must hold text; each source of a mixture (``c4+domain.jsonl``) is
    checked so."""
    parts = mixture(source)
    if len(parts) > 1:
        for part, _ in parts:
            check_calibration_source(part, corpora)
        return
    if source in BUILT_IN_SOURCES and not corpora:
        return
    if source == "c4":
        _local_file("C4 sample", LOCAL_C4)
    elif source == "wikitext2":
        _local_file(
            "WikiText-2 train split (the test split is for evaluation only; use --calib c4 or a file)",
            LOCAL_WIKITEXT2["train"],
        )
    else:
        path = user_path(source)
        _holds_text(source, file_identity(path) if path.is_file() else None)


# No tokenizer's tokens average more characters than this over a document: a document this many times
# longer, in characters, than a window is in tokens surely holds a window, and needs no tokenizer.
CHARS_PER_TOKEN_AT_MOST = 64


def check_calibration_fits(config: RunConfig, context: int) -> None:
    """Each calibration file (of a mixture too) must hold a document longer than one window, in the model's
    tokens: otherwise the run would be recorded and then fail drawing its first window. The built-in
    sources are long."""
    if not reads_calibration(config):
        return
    model = config.model.strip()
    seqlen = resolve_seqlen(config.seqlen, context)
    for source, _ in mixture(config.calib):
        if source not in BUILT_IN_SOURCES:
            identity = file_identity(user_path(source))
            _calibration_fits(model, file_identity(user_path(model)), source, identity, seqlen, config.nsamples)


@functools.lru_cache(maxsize=16)
def _calibration_fits(model: str, _model_identity, source: str, _identity, seqlen: int, nsamples: int) -> None:
    documents, _ = calibration_documents(source)
    if max(len(text) for text in documents) > CHARS_PER_TOKEN_AT_MOST * (seqlen + 1):
        return
    tokenizer = model_tokenizer(model)
    if tokenizer is None:  # a hub model not downloaded yet: the run's first window says it
        return
    longest = longest_document(tokenizer, documents, seqlen)
    if longest <= seqlen:
        raise no_window(nsamples, seqlen, longest)


def check_test_text_fits(config: RunConfig, context: int) -> None:
    """A local WikiText-2 test split must hold one evaluation window of the model's tokens: a short or
    emptied copy failed only after the pruning, on a division by zero."""
    root = data_dir()
    if EvalKind.WIKITEXT2 not in config.evals or root is None:  # the hub's split is whole
        return
    model, path = config.model.strip(), root / LOCAL_WIKITEXT2["test"]
    seqlen = resolve_seqlen(config.eval_seqlen, context, "--eval-seqlen")
    _test_text_fits(model, file_identity(user_path(model)), str(path), file_identity(path), seqlen)


@functools.lru_cache(maxsize=16)
def _test_text_fits(model: str, _model_identity, path: str, _identity, seqlen: int) -> None:
    text, _ = wikitext2_test_text()
    if len(text) > CHARS_PER_TOKEN_AT_MOST * seqlen:
        return
    tokenizer = model_tokenizer(model)
    if tokenizer is None:  # a hub model not downloaded yet: its evaluation says it
        return
    tokens = len(tokenizer(text).input_ids)
    if tokens < seqlen:
        raise UserError(
            f"The WikiText-2 test split at {path} holds only {tokens} token(s) of this model, fewer than one evaluation "
            f"window of {seqlen} (--eval-seqlen); restore it from wikitext-2-raw-v1's test split."
        )


@functools.lru_cache(maxsize=16)
def _holds_text(source: str, _identity: str | None) -> None:
    """Reading the file is the only way to know it holds text; done once per version of the file (the
    New run form checks on every keystroke)."""
    calibration_documents(source)
