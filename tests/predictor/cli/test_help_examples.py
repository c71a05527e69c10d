"""Every command's ``--help`` ends with an example, and the example parses (issue 12, item 5).

The examples are read from the help text itself, stripped of leading ``VAR=value`` settings and the
``predictor`` word, and parsed by the command (click's ``make_context``: unknown options, missing
required ones or bad values fail) without running it.
"""

from __future__ import annotations

import shlex

import click
import pytest
import typer.main

from predictor.cli import app, main

ROOT = typer.main.get_command(app)


def _leaves(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    subs = getattr(group, "commands", None)
    if not subs:
        return [(path, group)]
    return [leaf for name, sub in subs.items() for leaf in _leaves(sub, (*path, name))]


LEAVES = [pytest.param(path, cmd, id=" ".join(path)) for path, cmd in _leaves(ROOT)]


def _examples(help_text: str) -> list[str]:
    lines = [line.strip() for line in help_text.splitlines()]
    return [line.split("Example:", 1)[1].strip() for line in lines if line.startswith("Example:")]


@pytest.mark.parametrize(("path", "cmd"), LEAVES)
def test_help_shows_an_example_that_parses(path: tuple[str, ...], cmd: click.Command, capsys) -> None:
    assert main([*path, "--help"]) == 0
    shown = capsys.readouterr().out
    examples = _examples(cmd.help or "")
    assert examples, f"predictor {' '.join(path)} --help has no 'Example:' line"
    for example in examples:
        assert example.split("Example:")[-1].strip() and "Example" in shown
        words = shlex.split(example)
        while words and "=" in words[0] and not words[0].startswith("-"):
            words.pop(0)  # VAR=value settings before the command
        assert words[:1 + len(path)] == ["predictor", *path], example
        cmd.make_context(" ".join(path), words[1 + len(path):])  # raises on an unknown or missing option
