"""Errors a user can act on. Every layer raises these; the CLI prints them without a traceback and
exits non-zero, and the API turns them into 4xx responses."""


class InputError(ValueError):
    """Bad input that the user must fix: an unreadable file, an unknown format, an invalid config."""


class Unreachable(RuntimeError):
    """A service the command needs cannot be reached (the state store's database): not the user's
    input, so the CLI exits 1 with one line, as for an unreachable scheduler."""
