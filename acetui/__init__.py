"""acetui's faces: the Typer CLI and the Textual app, thin layers over ``core``."""

from acetui_core import __version__

__all__ = ["__version__", "main"]


def main() -> None:
    """The ``acetui`` command. A dropped SSH session is survived from its first instant, before the seconds it
    takes to import the CLI (the app, which needs its terminal, undoes this when it opens)."""
    from acetui_core.execution.heartbeat import outlive_hangup

    outlive_hangup()
    from acetui.cli import main as cli

    cli()
