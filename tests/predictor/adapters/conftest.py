"""Fixtures of the adapter tests: the real Kueue CRD schemas and the real Slurm cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictor.adapters.kueue.crd_validation import CrdSchemas
from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401 - the session's real Slurm, as a fixture


@pytest.fixture(scope="session")
def crds(request: pytest.FixtureRequest, shared_data: Path) -> CrdSchemas:
    """The real Kueue CRD schemas from ../shared/data/kueue-crds (skips, or fails in CI, when absent)."""
    folder = shared_data / "kueue-crds"
    # tests/conftest.py's require, taken from pytest's registry (not whichever "conftest" was imported last)
    root_conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).resolve().parents[2] / "conftest.py"))
    root_conftest.require(folder.is_dir(), f"Kueue CRDs folder {folder}")
    return CrdSchemas.from_folder(folder)


