"""Errors that reach the user as one sentence."""


class UserError(Exception):
    """Bad input or an unusable environment: the message is one clear sentence for the user.

    The faces print it without a traceback and exit with code 2.
    """


class Cancelled(Exception):
    """The run was asked to stop; raised between layers, never mid-layer."""
