"""Reading a YAML file that must hold a mapping (policy files, inventories, tokens files, recorded
topologies): one owner for the errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from features.errors import InputError

__all__ = ["read_yaml_mapping"]


def read_yaml_mapping(path: str | Path, what: str = "file") -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (``{}`` for an empty file).

    Raises
    ------
    InputError
        The file is missing or unreadable, is not valid YAML (the message gives line and column), or
        holds something other than a mapping. Messages start with ``"{what} {path}"``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} cannot be read: not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        raise InputError(f"{what} {path}{':' + where if where else ''}: not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{what} {path}: expected a mapping of settings at the top, got {type(data).__name__}")
    return data
