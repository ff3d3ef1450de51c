"""acetui's faces: the Typer CLI and the Textual app, thin layers over ``core``."""

from acetui_core import __version__

__all__ = ["__version__", "main"]


def main() -> None:
    """The ``acetui`` command. A dropped SSH session is survived from its first instant, before the seconds it
    takes to import the CLI (the app, which needs its terminal, undoes this when it opens), and a SIGTERM in
    those seconds is said as Ctrl-C is."""
    import sys

    from acetui_core.execution.heartbeat import TERMINATED, interrupt_on_terminate, outlive_hangup

    outlive_hangup()
    interrupt_on_terminate()
    try:
        from acetui.cli import main as cli
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the CLI was being imported: nothing had started
        print("acetui: interrupted; no run had started.", file=sys.stderr)
        raise SystemExit(143 if TERMINATED.is_set() else 130) from None
    cli()
