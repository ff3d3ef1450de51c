"""What one run setting is: a ``Setting`` (its help, its label and group in the New run form, its CLI
flags, its choices, its parser, whether it can change a result), how a ``RunConfig`` field declares one
(``setting(...)``), and how the field completes it (``spec_of``: its name, its default, and a check of
its choices). The table of settings itself is ``acetui_core.config``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, replace
from typing import Any

from acetui_core.errors import one_of


@dataclass(frozen=True)
class Setting:
    """How one run setting is offered, parsed and compared (the field of ``RunConfig`` of that name)."""

    help: str
    label: str  # the New run form's label
    group: str = "basic"  # the New run form's section: basic, or advanced (collapsed)
    flags: tuple[str, ...] = ()  # the CLI's names; none: --the-name (a flag also gets --no-the-name)
    choices: tuple[str, ...] = ()  # the closed set of values, when there is one
    parse: Callable[[Any], Any] | None = None  # typed text (or a stored value) to the value; UserError if bad
    result: bool = True  # False: bookkeeping only, so runs differing in it share a comparison's row
    axis: bool = False  # compare and sweep take several values (their own comma-separated option)
    single_run: bool = False  # only prune offers it: a grid of runs has no use for it
    metavar: str | None = None
    describe: Callable[[Any], str] | None = None  # a value in a row label, where runs differ in it (else "name value")
    name: str = ""  # filled in from the field
    default: Any = None  # filled in from the field

    @property
    def flag(self) -> str:
        """The option's name, as error sentences say it."""
        return self.flags[0] if self.flags else "--" + self.name.replace("_", "-")

    def value(self, typed: Any) -> Any:
        """The value of what was typed (or stored), through the setting's parser when it has one."""
        return self.parse(typed) if self.parse is not None else typed

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
        spec = replace(spec, parse=one_of(spec.flag, spec.choices))
    return spec
