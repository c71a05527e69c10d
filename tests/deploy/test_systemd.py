"""The systemd units: ``systemd-analyze verify`` accepts them (with the install prefix mapped to this
checkout's ``predictor``, the program they run) and every ``predictor`` command in them parses."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.manifests import DEPLOY, command_problem

SYSTEMD = DEPLOY / "systemd"
UNITS = sorted(p.name for p in SYSTEMD.iterdir() if p.suffix in (".service", ".timer"))
PREFIX = "/opt/gpu-job-predictor/bin/predictor"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (systemd keys repeat: ExecStart=, EnvironmentFile=)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}: {raw!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def exec_argv(value: str) -> list[str]:
    """An ExecStart= value as argv: systemd's quoting, ``$$`` for a literal ``$``, prefixes dropped."""
    return [word.replace("$$", "$") for word in shlex.split(value.lstrip("-@:+!"))]


def test_units_are_there() -> None:
    assert UNITS == ["predictor-retrain.service", "predictor-retrain.timer", "predictor-serve.service",
                     "predictor-sync.service"]


@pytest.mark.parametrize("unit", [u for u in UNITS if u.endswith(".service")])
def test_every_predictor_command_parses(unit: str) -> None:
    service = parse_unit(SYSTEMD / unit)["Service"]
    commands = [exec_argv(v) for v in service["ExecStart"]]
    for argv in commands:
        if argv[0] == "/bin/sh":
            argv = shlex.split(argv[2].split(">")[0])  # the promote step, run under sh for its exit status
        assert argv[0] == PREFIX, argv
        assert command_problem(["predictor", *argv[1:]]) is None
    assert service["User"] == ["predictor"] and "/etc/gpu-job-predictor/predictor.env" in service["EnvironmentFile"]
    assert service["WorkingDirectory"] == ["/var/lib/gpu-job-predictor"]


def test_retraining_runs_ingest_train_promote_on_a_timer() -> None:
    service = parse_unit(SYSTEMD / "predictor-retrain.service")["Service"]
    steps = [exec_argv(v) for v in service["ExecStart"]]
    assert [s[1] for s in steps[:2]] == ["ingest", "train"] and "--from-slurm" in steps[0]
    assert steps[0][steps[0].index("--out") + 1] == steps[1][steps[1].index("--jobs") + 1]
    assert "promote" in steps[2][2] and service["Type"] == ["oneshot"]
    timer = parse_unit(SYSTEMD / "predictor-retrain.timer")
    assert timer["Timer"]["Unit"] == ["predictor-retrain.service"] and timer["Install"]["WantedBy"] == ["timers.target"]


def test_the_promote_step_tells_a_refusal_from_a_failure(tmp_path: Path) -> None:
    """The sh line as written: exit 0 when promoted or refused by the gate, not when promote crashes."""
    line = exec_argv(parse_unit(SYSTEMD / "predictor-retrain.service")["Service"]["ExecStart"][2])
    fake = tmp_path / "predictor"
    for output, status, ok in (('{"promoted": true}', 0, True), ('{\n  "promoted": false\n}', 1, True),
                               ("Traceback ...", 1, False), ("", 2, False)):
        fake.write_text(f"#!/bin/sh\necho '{output}'\nexit {status}\n")
        fake.chmod(0o755)
        script = line[2].replace(PREFIX, str(fake))
        done = subprocess.run(["/bin/sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert (done.returncode == 0) == ok, (output, done)


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    from tests.conftest import require

    analyze = shutil.which("systemd-analyze")
    require(analyze is not None, "systemd-analyze (Debian package systemd)")
    predictor = Path(sys.executable).parent / "predictor"
    for unit in UNITS:
        (tmp_path / unit).write_text((SYSTEMD / unit).read_text().replace(PREFIX, str(predictor)))
    done = subprocess.run([str(analyze), "verify", "--man=no", *[str(tmp_path / u) for u in UNITS]],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr
