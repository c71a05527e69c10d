"""Fixtures of the deployment tests: the tools they run (kubectl, promtool) and the Kueue CRDs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from predictor.adapters.kueue.crd_validation import CrdSchemas
from tests.conftest import SHARED_DATA, require
from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401 - the session's real Slurm, as a fixture
from tests.serving.conftest import client, settings  # noqa: F401 - the in-process app, for its /metrics


@pytest.fixture(scope="session")
def kubectl() -> str:
    """kubectl from Debian's kubernetes-client (installed by .ci/run) or a newer one on PATH."""
    path = shutil.which("kubectl")
    require(path is not None, "kubectl (Debian package kubernetes-client)")
    return str(path)


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    require(path is not None, "promtool (Debian package prometheus)")
    return str(path)


@pytest.fixture(scope="session")
def crds() -> CrdSchemas:
    """The real Kueue CRD schemas from ../shared/data/kueue-crds (skips, or fails in CI, when absent)."""
    folder = Path(SHARED_DATA) / "kueue-crds"
    require(folder.is_dir(), f"Kueue CRDs folder {folder}")
    return CrdSchemas.from_folder(folder)
