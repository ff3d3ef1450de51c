"""acetui's faces: the Typer CLI and the Textual app, thin layers over ``core``."""

from acetui_core import __version__

__all__ = ["__version__"]
