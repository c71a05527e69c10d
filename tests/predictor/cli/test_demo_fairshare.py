"""The demo's fair-share panel shows real entitlements and usage (issue 12, item 12).

It showed share 1 and 0.00 GPU-h for every team because the demo served the shipped default policy
(no team listed: every team gets the default share) and only ever submitted pending jobs (no run was
reported, so the ledger charged nothing). The demo now writes a policy with one share per team and
reports its history's most recent runs as job events, through a real server.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from features.synth import generate
from predictor.cli.demo import _report_recent_runs, write_demo_policy
from tests.serving.conftest import TOKENS, auth
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_demo_policy_and_reported_runs_give_the_teams_shares_and_usage(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.parquet"
    generate(800, seed=5).to_parquet(jobs, index=False)
    shares = write_demo_policy(jobs, tmp_path / "demo-policy.yaml")
    assert len(shares) >= 3 and len(set(shares.values())) > 1 and max(shares.values()) == 4
    assert yaml.safe_load((tmp_path / "demo-policy.yaml").read_text())["teams"]["nlp"] == {"share": shares["nlp"]}
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, PREDICTOR_POLICY_FILE=str(tmp_path / "demo-policy.yaml"))
    with live_server(env, tmp_path / "uvicorn.log") as base:
        finished, running = _report_recent_runs(base, TOKENS["admin"].token, jobs, 40, before=10)
        teams = httpx.get(f"{base}/v1/teams", headers=auth("admin"), timeout=10).json()["teams"]
        jobs_seen = httpx.get(f"{base}/v1/jobs?limit=1000", headers=auth("admin"), timeout=10).json()["jobs"]
    assert finished + running == 40 and finished > 0
    assert {t["team"]: t["share"] for t in teams if t["team"] in shares} == shares
    assert sum(t["usage_gpu_hours"] for t in teams) > 0
    assert len({round(t["factor"], 6) for t in teams}) > 1  # the factor tells the teams apart
    assert sum(j["status"] == "ended" for j in jobs_seen) == finished
