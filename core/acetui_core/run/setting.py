"""What one run setting is: a ``Setting`` (its help, its label, group and place in the New run form, its
CLI flags, its choices, its parser, whether it can change a result, whether a grid takes several values
of it), how a ``RunConfig`` field declares one (``setting(...)``), and how the field completes it
(``spec_of``: its name, its default, and a check of its choices). The table of settings itself is
``acetui_core.run.config``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, replace
from typing import Any

from acetui_core.basics import parse
from acetui_core.basics.errors import UserError, check_choice
from acetui_core.basics.paths import same_place

# A setting's parser: the text typed (or a stored value) and the option's name as the user typed it, to
# the value; a bad value raises a UserError naming that option.
Parser = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Setting:
    """How one run setting is offered, parsed and compared (the field of ``RunConfig`` of that name)."""

    help: str
    label: str  # the New run form's label
    group: str = "basic"  # the New run form's section: basic, or advanced (collapsed)
    placed: bool = False  # the form's screen lays it out itself; else it comes in its group in table order
    presets: tuple[str, ...] = ()  # the form's buttons that fill in a common value
    placeholder: str = ""  # what an empty field means, shown in it
    flags: tuple[str, ...] = ()  # the CLI's names; none: --the-name (a flag also gets --no-the-name)
    choices: tuple[str, ...] = ()  # the closed set of values, when there is one
    parse: Parser | None = None  # typed text (or a stored value) to the value; UserError if bad
    result: bool = True  # False: bookkeeping only, so runs differing in it share a comparison's row
    axis: bool = False  # a grid (compare, sweep, the form, a study) takes several values of it
    grid_flags: tuple[str, ...] = ()  # the grid's names for an axis's values (none: the setting's flags)
    calibration: bool = False  # it changes nothing for a method without calibration data
    needs: tuple[str, str] | None = None  # (setting, value): it matters only when that setting has that value
    single_run: bool = False  # only prune offers it: a grid of runs has no use for it
    metavar: str | None = None
    describe: Callable[[Any], str] | None = None  # a value in a row label, where runs differ in it (else "name value")
    name: str = ""  # filled in from the field
    default: Any = None  # filled in from the field

    @property
    def flag(self) -> str:
        """The option's name, as error sentences say it."""
        return self.flags[0] if self.flags else "--" + self.name.replace("_", "-")

    @property
    def grid_flag(self) -> str:
        """The grid option's name, as error sentences about a list of values say it."""
        return (self.grid_flags or (self.flag,))[0]

    def value(self, typed: Any, flag: str | None = None) -> Any:
        """The value of what was typed (or stored), through the setting's parser when it has one; a
        problem names ``flag`` (by default the setting's own option)."""
        return self.parse(typed, flag or self.flag) if self.parse is not None else typed

    def values(self, typed: Any, flag: str | None = None) -> list:
        """Several values (an axis's): a list, or text separated by commas; each through the parser, at
        least one, none twice (``parse.each_once``). The one reading of a list for the CLI, the form and a study."""
        flag = flag or self.grid_flag
        if typed is None or isinstance(typed, str):
            items: list = parse.items(typed, unique=False)
        else:
            items = list(typed) if isinstance(typed, list | tuple) else [typed]
        if not items:
            raise UserError(f"{flag} needs at least one value: {self.help[0].lower()}{self.help[1:]}")
        return parse.each_once([self.value(item, flag) for item in items], flag, key=same_place)

    @property
    def text(self) -> str:
        """The default as typed: lists comma-separated, nothing for None."""
        value = self.default
        if isinstance(value, list | tuple):
            return ",".join(map(str, value))
        return "" if value is None else str(value)


def setting(default: Any = MISSING, *, factory: Callable[[], Any] | None = None, **spec) -> Any:
    """A ``RunConfig`` field with its ``Setting``."""
    metadata = {"setting": Setting(**spec)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else (None if f.default is MISSING else f.default)


def spec_of(f: Field) -> Setting:
    """A field's ``Setting`` completed: its name, its default, and for a closed set of values without a
    parser of its own, the check that the value is one of them."""
    spec = replace(f.metadata["setting"], name=f.name, default=_default(f))
    if spec.choices and spec.parse is None:
        choices = spec.choices
        spec = replace(spec, parse=lambda value, flag: check_choice(value, choices, flag))
    return spec
