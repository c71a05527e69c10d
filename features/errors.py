"""Errors a user can act on. Every layer raises these; the CLI prints them without a traceback and
exits non-zero, and the API turns them into 4xx responses."""


class InputError(ValueError):
    """Bad input that the user must fix: an unreadable file, an unknown format, an invalid config."""
