"""Helpers for reader tests: the hand-written fixtures and a full ingest run into ``tmp_path``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from features.ingest import IngestSummary, ingest, load_jobs, rejects_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@dataclass
class Ingested:
    """The outputs of one ingest run: kept jobs (indexed by job_id), rejects and the summary."""

    jobs: pd.DataFrame
    rejects: pd.DataFrame
    summary: IngestSummary

    def job(self, job_id: str) -> pd.Series:
        return self.jobs.loc[job_id]

    def reason(self, job_id: str) -> str:
        hit = self.rejects.loc[self.rejects["job_id"] == job_id, "reject_reason"]
        assert len(hit) == 1, f"expected one reject for {job_id}, found {list(hit)}"
        return str(hit.iloc[0])


@pytest.fixture
def fixture_file():
    def get(rel: str) -> Path:
        return FIXTURES / rel

    return get


def ingest_into(directory: Path, fmt: str, paths: list[Path], **kwargs) -> Ingested:
    """Run the real pipeline (reader -> validate -> Parquet) into ``directory``; read both outputs back."""
    out = directory / f"{fmt}-{len(list(directory.iterdir()))}.parquet"
    summary = ingest(fmt, paths, out, **kwargs)
    jobs = load_jobs(out)
    assert jobs["job_id"].is_unique
    rejects = pd.read_parquet(rejects_path(out))
    assert summary.rows_read == summary.rows_kept + summary.rows_rejected == len(jobs) + len(rejects)
    jobs.index = pd.Index(jobs["job_id"].astype(object).to_numpy())
    return Ingested(jobs, rejects, summary)


@pytest.fixture
def run_ingest(tmp_path):
    """``ingest_into`` a fresh temporary folder."""

    def run(fmt: str, paths: list[Path], **kwargs) -> Ingested:
        return ingest_into(tmp_path, fmt, paths, **kwargs)

    return run
