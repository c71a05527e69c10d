"""The API tokens file on disk: generate it, find the local one, rotate tokens in it.

Every write goes to a private temporary file beside the target (mode 0600) and is renamed into place,
so a server re-reading the file (``serving.auth.TokenRegistry``) never sees half of it.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from features.errors import InputError
from serving.settings import TokenSpec, load_tokens_file, token_digest

__all__ = ["LOCAL_TOKENS_FILE", "new_token", "generate_admin_tokens_file", "local_admin_token", "rotate_tokens"]

#: Where ``predictor serve`` keeps its generated tokens when none are configured (in its working folder).
LOCAL_TOKENS_FILE = "predictor-tokens.yaml"
_HEADER = "# API tokens (see docs/serving.md, Tokens and roles); `predictor tokens rotate` replaces them.\n"


def new_token() -> str:
    """A fresh random bearer token (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def _write_private(path: Path, entries: Sequence[dict]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_HEADER)
            yaml.safe_dump({"tokens": list(entries)}, fh, sort_keys=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def generate_admin_tokens_file(path: Path) -> str:
    """Write a tokens file with one fresh admin token (mode 0600); returns the token."""
    token = new_token()
    _write_private(path, [{"name": "local-admin", "role": "admin", "token": token}])
    return token


def local_admin_token(specs: Sequence[TokenSpec]) -> str | None:
    """The plain token of the first admin in ``specs`` (None when every admin is stored as a digest)."""
    return next((s.token for s in specs if s.role == "admin" and s.token is not None), None)


def rotate_tokens(path: Path, names: Sequence[str] = (), *, every: bool = False) -> dict[str, str]:
    """Give the named entries of the tokens file at ``path`` new tokens; returns ``{name: new token}``.

    An entry stored as a ``sha256`` digest stays a digest (of the new token): the secret is shown once,
    never written. Without ``names``, a file of one entry has that one rotated; ``every`` rotates all.

    Raises
    ------
    InputError
        The file is missing or invalid, a name is not in it, or it holds several entries and neither
        ``names`` nor ``every`` says which.
    """
    specs = load_tokens_file(path)
    known = [s.name for s in specs]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"{path}: no token named {unknown[0]!r}; the file has {', '.join(map(repr, known))}")
    if every:
        chosen = set(known)
    elif names:
        chosen = set(names)
    elif len(specs) == 1:
        chosen = {known[0]}
    else:
        raise InputError(f"{path} holds {len(specs)} tokens ({', '.join(known)}): say which with --name or --all")
    fresh: dict[str, str] = {}
    entries = []
    for spec in specs:
        entry = spec.model_dump(exclude_none=True)
        if spec.name in chosen:
            fresh[spec.name] = new_token()
            if spec.sha256 is not None:
                entry["sha256"] = token_digest(fresh[spec.name])
            else:
                entry["token"] = fresh[spec.name]
        entries.append(entry)
    _write_private(path, entries)
    return fresh
