"""Each module registers its subcommands on ``acetui.cli.app`` when imported."""

from acetui.commands import prune  # noqa: F401
from acetui.commands import methods  # noqa: F401
