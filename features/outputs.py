"""Output destinations of the commands (``--out``): checked before any work, written whole or not at all.

``check_output_file`` / ``check_output_folder`` run first, before a command reads, trains or replays
anything: the folder is created when missing (with its parents), and a probe file is created in it and
removed again, which is the one check that answers the same way permissions, read-only mounts and
pseudo file systems (``/proc``, ``/sys``) do. ``write_atomic`` writes through a temporary file beside
the target and renames it into place, so an interrupted or failed write leaves nothing half-written.
Every failure is an :class:`~features.errors.InputError` naming the destination the user gave, never a
temporary file.
"""

from __future__ import annotations

import errno
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from features.errors import InputError

__all__ = ["check_output_file", "check_output_folder", "write_atomic", "output_errors"]


def _why(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.ENOENT:  # what /proc answers
        return "files cannot be created there"
    return (exc.strerror or str(exc)).lower()


def _make_folder(folder: Path, option: str, given: Path) -> None:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    if not existing.is_dir():
        raise InputError(f"{option} {given}: {existing} is a file, not a folder")
    if existing == folder:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {given}: cannot write into {existing} ({_why(exc)})") from None


def _probe(folder: Path, option: str, given: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
    except OSError as exc:
        raise InputError(f"{option} {given}: cannot write into {folder} ({_why(exc)})") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: Path, *, option: str = "--out") -> Path:
    """Check that the file ``path`` can be written (creating its folder if missing); returns it.

    Raises
    ------
    InputError
        ``path`` is a folder, a parent is a file, or its folder cannot be created or written into.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder; give a file name such as {path / 'out.parquet'}")
    _make_folder(path.parent, option, path)
    _probe(path.parent, option, path)
    return path


def check_output_folder(folder: Path, *, option: str = "--out") -> Path:
    """Check that files can be written into ``folder`` (creating it if missing); returns it.

    Raises
    ------
    InputError
        ``folder`` or a parent is a file, or it cannot be created or written into.
    """
    folder = Path(folder)
    _make_folder(folder, option, folder)
    _probe(folder, option, folder)
    return folder


@contextmanager
def output_errors(path: Path, *, option: str = "--out") -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``path`` into an ``InputError`` naming ``path``."""
    try:
        yield
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot write ({_why(exc)})") from None


def write_atomic(path: Path, write: Callable[[Path], object], *, option: str = "--out") -> None:
    """Call ``write(temporary path)`` and rename the result onto ``path``; on any failure the temporary
    file is removed and ``path`` is left as it was.

    Raises
    ------
    InputError
        Writing failed for a reason of the file system (full, read-only...); names ``path``.
    """
    path = Path(path)
    with output_errors(path, option=option):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask's mode, as a plain open
        try:
            write(Path(tmp))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
