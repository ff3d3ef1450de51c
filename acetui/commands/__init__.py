"""Each module registers its subcommands on ``acetui.cli.app`` when imported."""

from acetui.commands import prune  # noqa: F401
from acetui.commands import methods  # noqa: F401
from acetui.commands import evaluate  # noqa: F401
from acetui.commands import runs  # noqa: F401
from acetui.commands import app  # noqa: F401
