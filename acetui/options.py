"""Options shared by the commands, declared once. The run settings' options are made from the settings
table (``with_settings``); every number and list goes through ``acetui_core.basics.parse`` (one parser: a bad
value is one sentence naming the option, exit 2)."""

from __future__ import annotations

import copy
import functools
import inspect
from types import UnionType
from typing import Annotated, get_type_hints

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup, TyperOption

from acetui_core.analysis.comparison import CELLS
from acetui_core.basics import parse
from acetui_core.basics.choices import ExecutorKind
from acetui_core.basics.errors import UserError, check_choice
from acetui_core.run.config import AXES, SETTINGS, RunConfig
from acetui_core.run.setting import Setting

_TYPES = get_type_hints(RunConfig)


def _whole(flag: str, minimum: int = 0):
    return lambda text: parse.whole(text, flag, minimum)


def _optional_whole(flag: str, minimum: int = 0):
    return lambda text: parse.optional_whole(text, flag, minimum)


StoreOption = Annotated[
    str | None,  # not Path: Path("") is ".", and an empty --store (an unset variable) is refused as such
    typer.Option("--store", help="The run store file (default: $ACETUI_HOME/runs.db or the user data folder)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout, for scripts.")]
Model = Annotated[str | None, typer.Argument(help=SETTINGS["model"].help, show_default=False)]
Models = Annotated[
    list[str] | None,
    typer.Argument(
        help="Models: hub ids, checkpoint folders or .gguf files (default: the bundled SmolLM2-135M).",
        show_default=False,
    ),
]
Last = Annotated[
    int | None, typer.Option(parser=_optional_whole("--last", 1), metavar="N", help="Only the N most recent runs.")
]
RunId = Annotated[str, typer.Argument(help="A run id or a unique prefix of one.")]
RunIds = Annotated[list[str], typer.Argument(help="Run ids or unique prefixes.")]

Detach = Annotated[
    bool, typer.Option("--detach", help="Run in the background, detached from this terminal; print the run id(s).")
]
Executor = Annotated[
    str,
    typer.Option(
        help="Where the runs execute: local (this machine) or slurm (one job array through submitit; implies --detach)."
    ),
]
Partition = Annotated[str | None, typer.Option(help="Slurm partition (--executor slurm).")]
GpusPerJob = Annotated[int, typer.Option(parser=_whole("--gpus-per-job"), metavar="N", help="GPUs per Slurm job.")]
TimeLimit = Annotated[str, typer.Option("--time", help="Slurm time limit per job: 120, 2:00:00, 1-00:00:00.")]

Notify = Annotated[
    str | None,
    typer.Option(
        "--notify",
        metavar="bell|osc|none",
        help="When a run ends: the terminal bell, the bell and a desktop notification (OSC 9/777), or nothing; "
        "remembered (default: osc).",
    ),
]

Cells = Annotated[
    str,
    typer.Option(
        help=f"Table cells: {' or '.join(CELLS)} (perplexity | pruning seconds | calibration tokens | peak GiB)."
    ),
]


class PlainFlags:
    """Help that shows a flag by its name alone, as Click does: Typer 0.29 prints its type (``--json <bool>``),
    as if it took a value. Mixed into every command and group of ``acetui`` (``Command``, ``Group``)."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag:
                param.metavar = ""  # what Typer's help prints in the type column
        return params


def _every_value(command: TyperCommand, ctx: typer.Context, args: list[str]) -> dict[str, list]:
    """What each option of ``command`` is given in ``args``, every time it is given: the parser keeps only
    the last value of an option that is not ``multiple``, so it reads here through a copy of the command
    whose options all are. A count (``-vv``) counts its repeats already; it is left as it is."""
    collecting = [copy.copy(param) for param in command.get_params(ctx)]
    for param in collecting:
        if isinstance(param, TyperOption) and not param.count:
            param.multiple = True
    reader = copy.copy(command)
    reader.params = collecting
    reader.add_help_option = False  # the copies hold the command's --help already
    given, _, _ = reader.make_parser(ctx).parse_args(args=list(args))
    return given


def refuse_repeats(command: TyperCommand, ctx: typer.Context, args: list[str]) -> None:
    """One sentence for an option given twice, which the parser would silently read as its last value (an
    axis given as ``--methods wanda --methods magnitude`` ran magnitude alone). Flags are refused as well:
    one rule for every option is simpler to know than a rule with exceptions. An option that takes a
    list is told how to give one (its help says it is comma-separated)."""
    given = _every_value(command, ctx, args)
    for param in command.get_params(ctx):
        values = given.get(param.name or "", [])
        if not isinstance(param, TyperOption) or param.multiple or param.count or len(values) < 2:
            continue
        flag = next((name for name in param.opts if name.startswith("--")), param.opts[0])
        takes_list = "comma-separated" in (param.help or "")
        hint = f" (a list is comma-separated: {flag} {','.join(map(str, values))})" if takes_list else ""
        raise UserError(f"{flag} is given twice; give it once{hint}.")


class GivenOnce:
    """Every option of ``acetui`` given at most once (``refuse_repeats``). Mixed into every command and group."""

    def parse_args(self, ctx, args):
        refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)


class Command(PlainFlags, GivenOnce, TyperCommand):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.help:  # the docstring's line breaks: Typer keeps them in its group's list of commands
            self.help = "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(self.help).split("\n\n"))


class Group(PlainFlags, GivenOnce, TyperGroup):
    pass


def _cli_type(spec: Setting) -> type | UnionType:
    """What the CLI takes for a setting: a flag, a number, or text its parser reads (lists are comma-separated)."""
    kind = _TYPES[spec.name]
    if kind is bool:
        return bool
    base = next((number for number in (int, float) if kind in (number, number | None)), str)
    return base | None if spec.default is None else base


def _parameter(spec: Setting) -> inspect.Parameter:
    option = typer.Option(  # a flag is named alone (no --no-X: every flag is off by default)
        *(spec.flags or (spec.flag,)),
        help=escape(spec.help),
        parser=lambda text: spec.value(text),
        metavar=spec.metavar,
    )
    # a list as typed, with spaces after its commas so that --help can wrap it
    default = ", ".join(map(str, spec.default)) if isinstance(spec.default, list) else spec.default
    annotation: object = Annotated[_cli_type(spec), option]  # made at run time for Typer to read: a value here
    return inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _axis_parameter(spec: Setting, default: str | None) -> inspect.Parameter:
    """An axis of a grid: several values, comma-separated, each read by the setting's parser."""
    help_text = f"{spec.help} Several, comma-separated."
    option = typer.Option(
        *(spec.grid_flags or spec.flags or (spec.flag,)), help=escape(help_text), parser=lambda text: spec.values(text)
    )
    annotation: object = Annotated[str | None if default is None else str, option]  # a value Typer reads
    return inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def with_settings(*names: str, grid: dict[str, str | None] | None = None):
    """A command that takes run settings as options, made from the settings table
    (``acetui_core.run.config.SETTINGS``): those in ``names``, or by default every one the command does not
    declare itself. With ``grid`` (a default per axis, where the command's differs from the table's):
    the table's axes as lists of values (but the model, the command's argument MODELS), and not what only
    one run can use. The command receives them in its ``**settings``, parsed (an axis as a list); they
    come in the help after its own arguments and before its other options (its keyword-only parameters)."""

    def chosen(spec: Setting, declared) -> bool:
        if names:
            return spec.name in names
        return spec.name not in declared and not (grid is not None and (spec.axis or spec.single_run))

    def axes() -> list[inspect.Parameter]:
        if grid is None:
            return []
        return [
            _axis_parameter(SETTINGS[name], grid.get(name, SETTINGS[name].text)) for name in AXES if name != "model"
        ]

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        first = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        rest = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        added = [*axes(), *(_parameter(spec) for spec in SETTINGS.values() if chosen(spec, signature.parameters))]
        first = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in first]
        command.__signature__ = signature.replace(parameters=[*first, *added, *rest])
        return command

    return decorate


def _keyword(name: str, annotation: object, default: object) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


_EXECUTOR_OPTIONS = [
    _keyword("detach", Detach, False),
    _keyword("executor", Executor, ExecutorKind.LOCAL),
    _keyword("partition", Partition, None),
    _keyword("gpus_per_job", GpusPerJob, 1),
    _keyword("time_limit", TimeLimit, "2:00:00"),
]


def with_executor(command):
    """A command that runs where the user says: ``--detach``, ``--executor local|slurm`` and Slurm's
    options, declared once. The command receives ``detach`` and ``cluster`` (the Slurm executor, or None
    for this machine); the options come at the end of its own."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name not in ("cluster", "detach")]
    rest = [p for p in own if p.kind is inspect.Parameter.VAR_KEYWORD]
    own = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]

    @functools.wraps(command)
    def run(*args, executor: str, partition: str | None, gpus_per_job: int, time_limit: str, **kwargs):
        return command(*args, cluster=slurm_executor(executor, partition, gpus_per_job, time_limit), **kwargs)

    run.__signature__ = signature.replace(parameters=[*own, *_EXECUTOR_OPTIONS, *rest])
    return run


def slurm_executor(executor: str, partition: str | None, gpus_per_job: int, time: str):
    """The Slurm executor for ``--executor slurm``, None for ``local``; anything else is refused."""
    if executor == ExecutorKind.LOCAL:
        return None
    check_choice(executor, tuple(ExecutorKind), "--executor")
    from acetui_core.execution.slurm import Slurm

    return Slurm(partition=partition, gpus_per_job=gpus_per_job, time=time)


def settings_markdown() -> str:
    """The settings table as docs/cli.md shows it (a test keeps the page equal to this)."""
    rows = [
        "| option | default | in the New run form | can change a result | what it sets |",
        "|---|---|---|---|---|",
    ]
    for spec in SETTINGS.values():
        flags = spec.flags or (spec.flag,)
        names = "argument `MODEL`" if spec.name == "model" else ", ".join(f"`{flag}`" for flag in flags)
        default = f"`{spec.text}`" if spec.text else "none"
        result = "yes" if spec.result else "no (bookkeeping)"
        help_text = spec.help.replace("|", "\\|")
        rows.append(f"| {names} | {default} | {spec.group} | {result} | {help_text} |")
    return "\n".join(rows) + "\n"
