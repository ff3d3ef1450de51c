"""The Textual workbench: ``make_app`` builds it for the CLI and the tests."""

from acetui.app.app import AceApp, make_app

__all__ = ["AceApp", "make_app"]
