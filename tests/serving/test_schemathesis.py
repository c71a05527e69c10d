"""A bounded schemathesis run (its CLI, 4.x) against a real uvicorn: no input makes the API answer 5xx
or a response that contradicts the schema, including along the OpenAPI links between job operations
(submit -> report an event -> read / change / withdraw: ``serving.routers.jobs.JOB_LINKS``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serving.conftest import TOKENS
from tests.serving.live import live_server, server_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _schemathesis() -> list[str]:
    exe = Path(sys.executable).with_name("schemathesis")
    return [str(exe)] if exe.exists() else [shutil.which("schemathesis") or "schemathesis"]


def test_no_generated_request_causes_a_server_error(tmp_path: Path) -> None:
    """Boundary values of every field (coverage), random documents (fuzzing) and call sequences that
    feed one operation's output to the next (stateful), as an admin (who may call everything)."""
    env = server_env(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    with live_server(env, tmp_path / "uvicorn.log") as base:
        run = subprocess.run(
            [*_schemathesis(), "run", f"{base}/openapi.json", "--checks",
             "not_a_server_error,response_schema_conformance,content_type_conformance", "--request-timeout", "60",
             "--max-examples", "10", "--seed", "20261129", "--phases", "coverage,fuzzing,stateful",
             "--generation-database", "none", "--workers", "1", "--no-color",
             "--header", f"Authorization: Bearer {TOKENS['admin'].token}"],
            capture_output=True, text=True, timeout=540)
    tail = run.stdout[-4000:] + run.stderr[-2000:]
    assert run.returncode == 0, tail + "\n--- server log ---\n" + (tmp_path / "uvicorn.log").read_text()[-4000:]
    selected = re.search(r"Selected: (\d+)/(\d+)", run.stdout)
    tested = re.search(r"Tested: (\d+)", run.stdout)
    assert selected and tested and selected.group(1) == selected.group(2) == tested.group(1), tail  # every operation
    links = re.search(r"API Links:\s+(\d+) covered", run.stdout)
    assert "Stateful" in run.stdout and links and int(links.group(1)) >= 4, tail  # the job links were followed


def test_the_job_operations_are_linked() -> None:
    """Every job document a response returns links to reading, reporting on, changing and withdrawing it."""
    from serving.app import create_app
    from serving.settings import Settings

    spec = create_app(Settings(database_url="sqlite://", tokens=[])).openapi()
    ops = {op["operationId"]: (path, method) for path, item in spec["paths"].items() for method, op in item.items()}
    for source, code in (("submitJob", "201"), ("submitJob", "200"), ("postJobEvent", "200"), ("getJob", "200")):
        path, method = ops[source]
        links = spec["paths"][path][method]["responses"][code]["links"]
        assert {link["operationId"] for link in links.values()} == {"getJob", "postJobEvent", "updateJob", "deleteJob"}
        assert all(link["parameters"] == {"job_id": "$response.body#/job_id"} for link in links.values())
