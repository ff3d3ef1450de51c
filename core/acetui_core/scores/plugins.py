"""Metrics from outside acetui: ``module:function``, ``path/file.py:function``, or a name registered by
an installed package under the entry-point group ``acetui.methods``.

A plug-in is a function ``(W, stats, opts) -> scores`` with the built-in contract
(``acetui_core.scores.metrics``): ``W`` float32 ``(d_out, d_in)``, ``stats`` a ``ColumnStats`` (``norm``,
``e2``, ``e4``, ``tokens``), ``opts`` the run's ``RunConfig``; it returns one score per weight, higher =
keep. A file reference is stored with its absolute path, so a worker process in another folder imports
the same file, and the run records the file's SHA-256.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from pathlib import Path

import torch

from acetui_core.basics.errors import UserError, first_line
from acetui_core.basics.paths import user_path
from acetui_core.scores.method import Method, non_finite

ENTRY_POINT_GROUP = "acetui.methods"
# What user code may raise that acetui turns into one sentence naming the plug-in: any error, and
# SystemExit, which a plug-in calling sys.exit would otherwise make acetui's own exit, with the plug-in's
# text and code. KeyboardInterrupt stays the user's Ctrl-C.
USER_CODE_ERRORS = (Exception, SystemExit)


def entry_point_methods(builtin: tuple[str, ...]) -> dict[str, Method]:
    """The metrics installed packages register under ``acetui.methods`` (``builtin`` names win)."""
    found = {}
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in builtin:
            package = point.dist.name if point.dist is not None else point.module
            found[point.name] = _method(point.name, point.name, point.load, f"entry point of {package}", None)
    return found


def available_methods(
    builtin: dict[str, Method], references: list[str], unusable: list[str] | None = None
) -> dict[str, Method]:
    """The built-in methods, the installed entry points, and the plug-ins ``references`` name (the app's
    metric list); a reference that cannot be used is left out, and why goes to ``unusable`` when given."""
    found = {**builtin, **entry_point_methods(tuple(builtin))}
    for reference in references:
        try:
            method = plugin_method(reference, tuple(builtin))
        except UserError as error:
            if unusable is not None:
                unusable.append(str(error))
            continue
        found.setdefault(method.name, method)
    return found


def plugin_method(reference: str, builtin: tuple[str, ...]) -> Method:
    """The method a name that is not ``builtin`` refers to; one sentence when it cannot be used."""
    reference = str(reference).strip()
    points = {point.name: point for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if reference in points:
        point = points[reference]
        package = point.dist.name if point.dist is not None else point.module
        return _method(reference, reference, point.load, f"entry point of {package}", None)
    target, colon, function = reference.rpartition(":")
    if not colon or not target or not function:
        names = [*builtin, *(name for name in points if name not in builtin)]
        raise UserError(
            f"Unknown method '{reference}'; choose one of: {', '.join(names)}, "
            f"or a plug-in as module:function or path/file.py:function."
        )
    if target.endswith(".py") or "/" in target:
        path = user_path(target).resolve()
        if not path.is_file():
            raise UserError(f"Plug-in file {target} does not exist (method '{reference}').")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        module = _load_file(str(path), digest)
        return _method(
            f"{path}:{function}", function, lambda: _attribute(module, function, reference), str(path), digest
        )
    module = _import(target, reference)
    file = getattr(module, "__file__", None)
    module_digest = hashlib.sha256(Path(file).read_bytes()).hexdigest() if file else None
    return _method(
        reference, function, lambda: _attribute(module, function, reference), f"module {target}", module_digest
    )


def _method(name: str, paper_name: str, load, source: str, fingerprint: str | None) -> Method:
    try:
        function = load()
    except UserError:
        raise
    except USER_CODE_ERRORS as error:
        raise UserError(f"Plug-in method '{name}' could not be imported ({_described(error)}).") from None
    _check_signature(function, name)
    doc = (inspect.getdoc(function) or "plug-in metric").strip().splitlines()[0]
    return Method(name, paper_name, doc, _guarded(function, name), source=source, fingerprint=fingerprint)


@functools.lru_cache(maxsize=32)
def _load_file(path: str, digest: str):
    """Import a plug-in file once per version of its contents."""
    spec = importlib.util.spec_from_file_location(f"acetui_plugin_{digest[:16]}", path)
    if spec is None or spec.loader is None:
        raise UserError(f"Plug-in file {path} is not a Python file that can be imported.")
    module = importlib.util.module_from_spec(spec)
    try:
        with _printing_to_stderr():
            spec.loader.exec_module(module)
    except USER_CODE_ERRORS as error:
        raise UserError(f"Plug-in file {path} could not be imported ({_described(error)}).") from None
    return module


def _import(target: str, reference: str):
    try:
        with _printing_to_stderr():
            return importlib.import_module(target)
    except USER_CODE_ERRORS as error:
        raise UserError(
            f"Plug-in module '{target}' (method '{reference}') could not be imported ({_described(error)})."
        ) from None


def _attribute(module, function: str, reference: str):
    try:
        return getattr(module, function)
    except AttributeError:
        raise UserError(f"Plug-in '{reference}' names no function '{function}' in its module.") from None


def _check_signature(function, name: str) -> None:
    if not callable(function):
        raise UserError(f"Plug-in method '{name}' is not a function; it must be a function (W, stats, opts).")
    try:
        inspect.signature(function).bind(None, None, None)
    except TypeError:
        raise UserError(
            f"Plug-in method '{name}' takes {inspect.signature(function)}; it must take three arguments (W, stats, opts)."
        ) from None
    except ValueError:  # a builtin without a signature: called as it is
        pass


def _described(error: BaseException) -> str:
    """A plug-in's error in a sentence: its type and the first line of its message, cut to a readable
    length (a plug-in may raise pages)."""
    return f"{type(error).__name__}: {first_line(error)}" if str(error).strip() else type(error).__name__


def _printing_to_stderr():
    """What a plug-in prints, as it is imported or called, goes to stderr with the progress: stdout is
    the result's (``--json``: one JSON object, which a print before it made unreadable)."""
    return contextlib.redirect_stdout(sys.stderr)


def _guarded(function, name: str):
    """The plug-in on a copy of ``W`` (it may write to its argument), its failures as one sentence."""

    def score(W, stats, opts):
        try:
            with _printing_to_stderr():
                return function(W.clone(), stats, opts)
        except USER_CODE_ERRORS as error:
            raise UserError(f"Plug-in method '{name}' failed ({_described(error)}).") from None

    return score


def check_scores(method: Method, scores, shape: torch.Size, where: str) -> None:
    """A plug-in's scores must be a real-valued tensor with data (not on the meta device) of the weight's
    shape, every score a finite number: anything else is one sentence naming the plug-in."""
    got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
    if got != tuple(shape):
        raise UserError(
            f"Plug-in method '{method.name}' returned scores of shape {got} for {where}, whose weight is "
            f"{tuple(shape)}; it must return one score per weight."
        )
    what: str | None
    if scores.dtype == torch.bool or scores.is_complex():
        what, rule = f"{str(scores.dtype).removeprefix('torch.')} scores", "scores must be real numbers"
    elif scores.is_meta:
        what, rule = "scores on the meta device", "scores must hold values"
    elif (what := non_finite(scores)) is not None:
        rule = "every score must be a finite number"
    else:
        return
    raise UserError(f"Plug-in method '{method.name}' returned {what} for {where}; {rule}, so nothing was pruned there.")
