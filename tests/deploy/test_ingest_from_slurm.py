"""``predictor ingest --from-slurm`` against the suite's real Slurm: it runs sacct itself, appends only
jobs that ended since the last run, gives the same table when run twice, and a run killed mid-way
leaves the previous table as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pandas as pd
import pytest

from features.ingest_append import table_watermark
from predictor.cli import main
from tests.integration.slurm_cluster import SlurmCluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.timeout(300)]


_until = partial(wait_until, timeout_s=60.0, poll_s=0.3)  # tests.waiting


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The session cluster with nothing queued or running and its partition UP; SLURM_CONF set."""
    slurm_cluster.run("scancel", "--user=root")
    _until(lambda: not slurm_cluster.run("squeue", "-h").stdout.strip(), "an empty queue")
    slurm_cluster.set_partition("UP")
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


def _ended(cluster: SlurmCluster, ids: list[str]) -> bool:
    out = cluster.run("sacct", "-n", "-X", "-P", "-j", ",".join(ids), "--format=JobID,State").stdout
    states = dict(line.split("|", 1) for line in out.splitlines() if line)
    return all(states.get(i, "").startswith(("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")) for i in ids)


def _run_jobs(cluster: SlurmCluster, accounts: list[str]) -> list[str]:
    ids = [cluster.submit("-A", a, "-J", f"train-{a}-{k}", "--gres=gpu:a10:1", script="sleep 1")
           for k, a in enumerate(accounts)]
    _until(lambda: _ended(cluster, ids), f"jobs {ids} to end")
    return ids


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_appends_only_new_jobs_and_is_idempotent(cluster: SlurmCluster, tmp_path: Path, capsys) -> None:
    out = tmp_path / "history.parquet"
    start = time.time() - 1
    first = _run_jobs(cluster, ["vision", "nlp"])
    assert main(["ingest", "--from-slurm", "--since", _iso(start), "--out", str(out), "--json"]) == 0
    table = pd.read_parquet(out)
    assert set(first) <= set(table["job_id"]) and table["job_id"].is_unique
    mine = table.set_index("job_id").loc[first]
    assert list(mine["team"]) == ["vision", "nlp"] and (mine["state"] == "COMPLETED").all()
    assert (mine["num_gpus"] == 1).all()  # (the type is accounted only with AccountingStorageTRES=gres/gpu:a10)
    assert (mine["duration_s"] >= 1).all() and not mine["censored"].any()
    mark = table_watermark(out, "slurm")
    assert mark is not None and mark >= start

    second = _run_jobs(cluster, ["research"])
    capsys.readouterr()
    assert main(["ingest", "--from-slurm", "--out", str(out), "--json"]) == 0  # from the watermark on
    summary = capsys.readouterr().out
    grown = pd.read_parquet(out)
    seen = cluster.run("sacct", "-a", "-P", "-n", "-j", ",".join(second), "--format=JobID,State,Submit,End").stdout
    assert set(grown["job_id"]) == set(table["job_id"]) | set(second), (summary, seen)
    assert grown["job_id"].is_unique
    before = grown.set_index("job_id").loc[table["job_id"]].reset_index()
    pd.testing.assert_frame_equal(before, table, check_like=True)  # earlier rows unchanged

    # twice in a row, and once more over the whole window: the same table
    assert main(["ingest", "--from-slurm", "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), grown)
    assert main(["ingest", "--from-slurm", "--since", _iso(start), "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), grown)


def test_a_run_killed_mid_way_leaves_the_previous_table(cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "history.parquet"
    start = time.time() - 1
    _run_jobs(cluster, ["vision"])
    assert main(["ingest", "--from-slurm", "--since", _iso(start), "--out", str(out)]) == 0
    previous = out.read_bytes()
    _run_jobs(cluster, ["nlp", "research"])  # a completed run would change the table
    predictor = str(Path(sys.executable).parent / "predictor")
    for _attempt in range(10):
        proc = subprocess.Popen([predictor, "ingest", "--from-slurm", "--out", str(out)], env=os.environ.copy(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not list(tmp_path.glob(".history.parquet.*.append.tmp")):
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == -signal.SIGKILL:
            break
    else:
        pytest.fail("every run finished before it could be killed")
    assert out.read_bytes() == previous  # the killed run changed nothing
    assert list(tmp_path.glob(".history.parquet.*.append.tmp"))  # it was killed mid-way, leaving its folder
    assert main(["ingest", "--from-slurm", "--out", str(out)]) == 0
    assert not list(tmp_path.glob(".history.parquet.*.tmp"))  # the next run cleared it
    table = pd.read_parquet(out)
    assert table["job_id"].is_unique and set(table["team"]) >= {"vision", "nlp", "research"}


def test_unreachable_slurm_is_one_line_and_keeps_the_table(cluster: SlurmCluster, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    out = tmp_path / "history.parquet"
    conf = tmp_path / "slurm.conf"
    conf.write_text(cluster.conf.read_text().replace("AccountingStoragePort=", "AccountingStoragePort=1#"))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    code = main(["ingest", "--from-slurm", "--out", str(out)])
    assert code == 1 and "cannot read slurm:" in capsys.readouterr().err
    assert not out.exists()
