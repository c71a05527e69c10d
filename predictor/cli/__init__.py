"""The ``predictor`` command line.

Each command group lives in its own module in this package and exposes ``register(app)`` plus an
integer ``ORDER`` that fixes where it appears in ``--help``. Modules are discovered at start-up, so
adding a command never edits this file. Commands of higher layers (``predictor serve``, in
``serving.cli``) register through the ``predictor.commands`` entry point group, so this package
never imports them.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from importlib.metadata import entry_points

# Tables written to a file or a CI log (no terminal) get room for their columns instead of rich's 80.
if "COLUMNS" not in os.environ and not sys.stderr.isatty():
    os.environ["COLUMNS"] = "150"

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from features.errors import InputError, Unreachable  # noqa: E402

app = typer.Typer(
    name="predictor",
    help=(
        "Predict duration, peak GPU memory and topology fit of GPU training jobs from your cluster's "
        "own history, turn predictions into scheduling decisions, and replay traces to measure them."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

err = Console(stderr=True, soft_wrap=True)  # one-line errors stay on one line


@app.callback()
def _root() -> None:
    """Predict, decide and replay for shared GPU clusters."""


def _register_commands() -> None:
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            modules.append(mod)
    for ep in entry_points(group="predictor.commands"):
        modules.append(ep.load())
    for mod in sorted(modules, key=lambda m: (getattr(m, "ORDER", 100), m.__name__)):
        mod.register(app)


_register_commands()


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: user errors print one clear line and exit 2."""
    try:
        result = app(args=argv, standalone_mode=False)  # typer.Exit(n) comes back as the int n here
    except InputError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        return 2
    except FileNotFoundError as exc:
        err.print(f"[bold red]error:[/] file not found: {exc.filename or exc}")
        return 2
    except Unreachable as exc:  # the environment, not the input: exit 1 as for an unreachable scheduler
        err.print(f"[bold red]error:[/] {exc}")
        return 1
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err.print("aborted")
        return 130
    except Exception as exc:  # usage errors from Typer's click layer carry show() and exit_code
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return int(exc.exit_code)
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
