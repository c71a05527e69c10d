"""``predictor version``: the installed version and the versions of the libraries that matter."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import typer

ORDER = 999
_LIBS = ("gpu-job-predictor", "pandas", "scikit-learn", "lightgbm", "mlflow", "fastapi", "nvidia-ml-py")


def register(app: typer.Typer) -> None:
    @app.command("version")
    def version_cmd() -> None:
        """Print the installed version of this tool and of its key libraries.

        Example: predictor version
        """
        for lib in _LIBS:
            try:
                typer.echo(f"{lib} {version(lib)}")
            except PackageNotFoundError:
                typer.echo(f"{lib} (not installed)")
