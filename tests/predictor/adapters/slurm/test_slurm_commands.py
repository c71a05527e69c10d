"""Error classification of real (stand-in) commands: a script prints what Slurm prints and exits."""

import stat

import pytest

from predictor.adapters.base import SchedulerRejected, SchedulerUnavailable
from predictor.adapters.slurm.commands import SlurmCommands


@pytest.fixture
def bin_dir(tmp_path):
    def make(name: str, body: str):
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return SlurmCommands(bin_dir=str(tmp_path), timeout_s=2)

    return make


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("echo 'slurm_load_jobs error: Unable to contact slurm controller (connect failure)' >&2; exit 1", SchedulerUnavailable),
        ("echo 'scontrol: error: Socket timed out on send/recv operation' >&2; exit 1", SchedulerUnavailable),
        ("echo 'Invalid job id specified for job 99' >&2; exit 1", SchedulerRejected),
        ("echo 'Invalid qos specification for job 2' >&2; exit 1", SchedulerRejected),
        ("sleep 5", SchedulerUnavailable),
    ],
    ids=["no-controller", "socket-timeout", "bad-job", "bad-qos", "timeout"],
)
def test_failures_are_classified(bin_dir, body, error):
    with pytest.raises(error):
        bin_dir("scontrol", body).run(["scontrol", "update", "jobid=99", "priority=1"])


def test_json_errors_list_is_checked_even_on_exit_zero(bin_dir):
    doc = '{"errors": [{"description": "Failed while looking for jobs", "source": "slurm_load_jobs"}], "jobs": []}'
    with pytest.raises(SchedulerUnavailable, match="Failed while looking for jobs"):
        bin_dir("squeue", f"echo '{doc}'").run_json(["squeue", "--json"])
    assert bin_dir("squeue", "echo '{\"errors\": [], \"jobs\": []}'").run_json(["squeue", "--json"])["jobs"] == []
    with pytest.raises(SchedulerRejected, match="printed no JSON"):
        bin_dir("squeue", "echo 'JOBID PARTITION'").run_json(["squeue", "--json"])


def test_missing_command_is_permanent(tmp_path):
    with pytest.raises(SchedulerRejected, match="command not found"):
        SlurmCommands(bin_dir=str(tmp_path)).run(["squeue", "--json"])
