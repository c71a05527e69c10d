"""``predictor tokens rotate``: new API tokens in the tokens file; running servers refuse the old ones.

Reaches the ``predictor`` command line through the ``predictor.commands`` entry point (like
``predictor serve``), so ``predictor`` never imports ``serving``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from features.errors import InputError
from serving.tokens_file import LOCAL_TOKENS_FILE, rotate_tokens

ORDER = 61

tokens_app = typer.Typer(help="Manage the API tokens file (see docs/serving.md, Tokens and roles).",
                         no_args_is_help=True)


def _default_file() -> Path:
    configured = os.environ.get("PREDICTOR_TOKENS_FILE")
    return Path(configured) if configured else Path.cwd() / LOCAL_TOKENS_FILE


@tokens_app.command("rotate")
def rotate_cmd(
    file: Annotated[Path | None, typer.Option("--file", show_default=False, help=(
        f"Tokens file (default: PREDICTOR_TOKENS_FILE, else ./{LOCAL_TOKENS_FILE}, the one `predictor serve` "
        "writes)."))] = None,
    name: Annotated[list[str] | None, typer.Option("--name", show_default=False, help=(
        "Token to rotate, by its name (repeat). Default: the only one in the file."))] = None,
    every: Annotated[bool, typer.Option("--all", help="Rotate every token in the file.")] = False,
) -> None:
    """Replace tokens in the tokens file and print the new ones; the old ones stop working at once on
    running servers (they re-read the file when it changes). Entries stored as sha256 digests stay digests.

    Example: predictor tokens rotate --file /etc/predictor/tokens.yaml --name slurm-webhook
    """
    path = file if file is not None else _default_file()
    if not path.exists():
        raise InputError(f"no tokens file at {path}; give --file (or set PREDICTOR_TOKENS_FILE)")
    fresh = rotate_tokens(path, name or (), every=every)
    for who, token in fresh.items():
        typer.echo(f"{who}: {token}")
    typer.echo(f"rotated {len(fresh)} token(s) in {path}; the old one(s) are refused from now on", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(tokens_app, name="tokens")
