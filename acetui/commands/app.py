"""``acetui`` with no subcommand opens the workbench; ``acetui attach RUN_ID`` opens it on a run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from acetui.options import Notify
from acetui.options import StoreOption as StorePath
from acetui_core.basics.errors import UserError
from acetui_core.execution.heartbeat import end_on_hangup

Theme = Annotated[
    str | None,
    typer.Option(
        "--theme", help="dark, light, ansi (16 terminal colours, for SSH and 256-colour terminals) or a Textual theme."
    ),
]


def require_terminal() -> None:
    """Textual reads keys from stdin and draws on stderr; without a terminal on both (a pipe, cron, nohup)
    it would wait forever, so say so instead."""
    if not (sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()):
        raise UserError(
            "The workbench needs a terminal (its input or screen is a pipe or a file here); "
            "in scripts and cron use acetui prune, compare, runs or export."
        )


def open_app(
    theme: str | None,
    store: str | None,
    attach: str | None = None,
    notify: str | None = None,
    study: Path | None = None,
) -> None:
    from acetui.app import make_app
    from acetui_core.storage.store import Store

    opened = Store(store)
    chosen = None
    if study is not None:  # the study's finished runs, selected on Results
        from acetui_core.studies.study import finished_runs, load_study

        cells, _ = load_study(study).recorded_cells(opened)  # the runs, though the model be gone since
        chosen = [run.id for run in finished_runs(cells, opened)]
    app = make_app(opened, theme=theme, attach=attach, notify_mode=notify, chosen=chosen)  # bad input named first
    require_terminal()
    end_on_hangup()  # the app ends with its terminal; the runs it started go on
    app.run()
    from acetui.app.app import runs_going_on

    going = runs_going_on(opened)  # runs are processes of their own: say how to follow them once the app is gone
    if going:
        print(going)
    if app.return_code:  # a crash: Textual printed its traceback; the shell must not be told all went well
        raise typer.Exit(app.return_code)


PluginMethods = Annotated[
    list[str] | None,
    typer.Option(
        "--method",
        help="A plug-in metric (module:function or path/file.py:function) for the New run list; remembered.",
    ),
]


def remember_plugins(references: list[str]) -> None:
    """Check each plug-in (one sentence when it cannot be used, or is a built-in method, which every list
    holds already) and add it to the remembered list."""
    from acetui import preferences
    from acetui_core.scores.metrics import METHODS, get_method

    for reference in references:
        if reference.strip() in METHODS:
            raise UserError(
                f"{reference} is a built-in method, not a plug-in: acetui --method remembers a plug-in metric "
                f"(module:function or path/file.py:function); give {reference} to a command (acetui prune --method)."
            )
    names = [get_method(reference).name for reference in references]
    saved = preferences.load().plugins
    preferences.update(plugins=list(dict.fromkeys([*saved, *names])))


def workbench(
    ctx: typer.Context,
    theme: Theme = None,
    store: StorePath = None,
    notify: Notify = None,
    method: PluginMethods = None,
    study: Annotated[
        Path | None, typer.Option(help="Open on Results with this study's finished runs selected (a study file).")
    ] = None,
) -> None:
    """Without a subcommand: open the workbench (pick a model and metrics, watch runs, compare results)."""
    if notify is not None:  # checked whatever the subcommand, before anything is remembered
        from acetui.notify import check_mode

        notify = check_mode(notify)
    if method:
        remember_plugins(method)
    if ctx.invoked_subcommand is None:
        open_app(theme, store, notify=notify, study=study)
        return
    given = {
        name: value
        for name, value in (("store", store), ("theme", theme), ("notify", notify), ("study", study))
        if value is not None
    }
    if given:
        hand_down(ctx, given)


def hand_down(ctx: typer.Context, given: dict) -> None:
    """``acetui --store S runs``: the options given before a subcommand become its defaults (and those of
    the commands under it), or are refused when it has no such option: never silently ignored."""
    name = ctx.invoked_subcommand or ""
    root = ctx.command
    assert isinstance(root, TyperGroup)  # the root command is a group
    command = root.get_command(ctx, name)
    defaults = _defaults(command, given)
    ignored = [option for option in given if not _takes(command, option)]
    if ignored:
        flags = " and ".join(f"--{option}" for option in ignored)
        raise UserError(f"acetui {name} has no {flags} option, so it cannot take one given before it either.")
    ctx.default_map = {name: defaults}


def _takes(command, option: str) -> bool:
    """Whether ``command`` or a command under it has ``option``."""
    if any(param.name == option for param in command.params):
        return True
    children = getattr(command, "commands", {}).values()  # a group's commands (Typer's click, not click's)
    return any(_takes(child, option) for child in children)


def _defaults(command, given: dict) -> dict:
    """click's default map for ``command`` and the commands under it."""
    defaults = {param.name: given[param.name] for param in command.params if param.name in given}
    for child_name, child in getattr(command, "commands", {}).items():
        defaults[child_name] = _defaults(child, given)
    return defaults


def attach(
    run_id: Annotated[str, typer.Argument(help="A run id or a unique prefix of one (acetui runs lists them).")],
    theme: Theme = None,
    store: StorePath = None,
    notify: Notify = None,
) -> None:
    """Open the workbench on a run, live while it runs (started here, from the CLI or another session)."""
    open_app(theme, store, attach=run_id, notify=notify)
