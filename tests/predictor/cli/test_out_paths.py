"""Every ``--out`` is checked before any work and fails as one line naming it, exit 2 (issue 12, item 1).

Each command meets each unwritable destination: a read-only mount (a real read-only tmpfs), ``/sys``
(EPERM), ``/proc`` (no regular files), a path under an existing file, and (for file outputs) a
folder. ``predict`` and ``evaluate`` are given a model that does not exist: the ``--out`` error comes
first, so the destination is checked before the model is loaded. A full disk (a tiny tmpfs) at write
time also leaves nothing behind.
"""

from __future__ import annotations

import gzip
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from predictor.cli import main
from tests.conftest import require

SWF = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n2 5 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n"


def _mount_tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    require(done.returncode == 0, f"root, to mount a tmpfs ({done.stderr.decode().strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    yield from _mount_tmpfs(tmp_path / "ro", "ro")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    yield from _mount_tmpfs(tmp_path / "tiny", "size=64k")


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    swf = tmp_path / "t.swf.gz"
    swf.write_bytes(gzip.compress(SWF.encode()))
    base = 1_700_000_000.0
    jobs = tmp_path / "jobs.parquet"
    pd.DataFrame([{"job_id": f"j{i}", "team": "a", "num_gpus": 1, "submit_ts": base + i, "start_ts": base + i,
                   "end_ts": base + i + 60, "duration_s": 60.0, "state": "COMPLETED"} for i in range(6)]).to_parquet(jobs)
    (tmp_path / "existing_file").write_text("x")
    return {"swf": swf, "jobs": jobs}


def _command(name: str, inputs: dict[str, Path], out: str) -> list[str]:
    return {
        "ingest": ["ingest", "--format", "swf", str(inputs["swf"]), "--out", out, "--no-progress"],
        "synth": ["synth", "--jobs", "50", "--out", out, "--no-progress"],
        "predict": ["predict", "--jobs", str(inputs["jobs"]), "--model", "models:/no-such-model@x", "--out", out],
        "evaluate": ["evaluate", "--jobs", str(inputs["jobs"]), "--model", "models:/no-such-model@x", "--out", out],
        "simulate": ["simulate", "--jobs", str(inputs["jobs"]), "--cluster", "8", "--policy", "fifo", "--out", out,
                     "--no-progress"],
    }[name]


COMMANDS = ["ingest", "synth", "predict", "evaluate", "simulate"]
DESTINATIONS = [
    pytest.param("{ro}/t.parquet", "read-only", id="read-only-mount"),
    pytest.param("/sys/t.parquet", "permission denied", id="sys"),
    pytest.param("/proc/t.parquet", "cannot write into /proc", id="proc"),
    pytest.param("{tmp}/existing_file/x.parquet", "existing_file is a file, not a folder", id="under-a-file"),
]


def _assert_one_line_naming(code: int, err: str, out: str, words: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --out "), err
    assert out in lines[0] and words in lines[0], err
    assert ".tmp" not in err and "Traceback" not in err


@pytest.mark.parametrize(("target", "words"), DESTINATIONS)
@pytest.mark.parametrize("command", COMMANDS)
def test_an_unwritable_out_is_one_line_exit_2(command: str, target: str, words: str, inputs, read_only, tmp_path,
                                              capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    out = target.format(ro=read_only, tmp=tmp_path)
    if command == "simulate":
        out = out.removesuffix("/t.parquet").removesuffix("/x.parquet") + "/report"
    code = main(_command(command, inputs, out))
    _assert_one_line_naming(code, capsys.readouterr().err, out, words)


@pytest.mark.parametrize("command", ["ingest", "synth", "predict", "evaluate"])
def test_a_folder_is_not_a_file_out(command: str, inputs, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    code = main(_command(command, inputs, str(tmp_path)))
    _assert_one_line_naming(code, capsys.readouterr().err, str(tmp_path), "is a folder")


def test_simulate_out_that_is_a_file(inputs, tmp_path, capsys) -> None:
    out = str(tmp_path / "existing_file")
    code = main(_command("simulate", inputs, out))
    _assert_one_line_naming(code, capsys.readouterr().err, out, "is a file, not a folder")


@pytest.mark.parametrize("command", ["ingest", "synth"])
def test_a_missing_folder_is_created(command: str, inputs, tmp_path) -> None:
    out = tmp_path / "new" / "deeper" / "t.parquet"
    assert main(_command(command, inputs, str(out))) == 0
    assert pd.read_parquet(out).shape[0] > 0


def test_a_full_disk_at_write_time_leaves_nothing_behind(tiny_disk: Path, capsys) -> None:
    out = tiny_disk / "jobs.parquet"
    code = main(["synth", "--jobs", "20000", "--out", str(out), "--no-progress"])
    _assert_one_line_naming(code, capsys.readouterr().err, str(out), "no space left")
    assert os.listdir(tiny_disk) == []
