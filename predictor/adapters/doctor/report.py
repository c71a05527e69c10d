"""The doctor's checks per target, one run over a picture, and the report as a rich table or JSON."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from predictor.adapters.doctor.expectations import Expectations
from predictor.adapters.doctor.findings import Check, DoctorReport, Severity, run_checks
from predictor.adapters.doctor.kueue_flavor_checks import FLAVOR_CHECKS
from predictor.adapters.doctor.kueue_picture import KueuePicture
from predictor.adapters.doctor.kueue_queue_checks import QUEUE_CHECKS
from predictor.adapters.doctor.slurm_picture import SlurmPicture
from predictor.adapters.doctor.slurm_priority_checks import PRIORITY_CHECKS
from predictor.adapters.doctor.slurm_resource_checks import RESOURCE_CHECKS

__all__ = ["SLURM_CHECKS", "KUEUE_CHECKS", "diagnose_slurm", "diagnose_kueue", "render_table", "render_json"]

SLURM_CHECKS: tuple[Check[SlurmPicture, Expectations], ...] = PRIORITY_CHECKS + RESOURCE_CHECKS
KUEUE_CHECKS: tuple[Check[KueuePicture, Expectations], ...] = FLAVOR_CHECKS + QUEUE_CHECKS


def diagnose_slurm(picture: SlurmPicture, expect: Expectations) -> DoctorReport:
    """Every Slurm check on ``picture`` (those needing ``--jobs`` or ``--inventory`` only when given)."""
    return run_checks("slurm", SLURM_CHECKS, picture, expect, expect.available)


def diagnose_kueue(picture: KueuePicture, expect: Expectations) -> DoctorReport:
    """Every Kueue check on ``picture``."""
    return run_checks("kueue", KUEUE_CHECKS, picture, expect, expect.available)


_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow"}


def render_table(report: DoctorReport, console: Console) -> None:
    """The findings as a table (severity, check, subject, evidence, fix), then a one-line summary."""
    if report.findings:
        table = Table(title=f"predictor doctor --target {report.target}", show_lines=True, expand=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("check", no_wrap=True)
        for name, ratio in (("subject", 2), ("evidence", 4), ("fix", 4)):
            table.add_column(name, ratio=ratio, overflow="fold")
        for f in report.findings:
            table.add_row(f"[{_STYLE[f.severity]}]{f.severity.value}[/]", f.check, f.subject, f.evidence, f.fix)
        console.print(table)
        console.print("each check is explained in docs/adapters.md#doctor (anchor: the check's name)")
    skipped = "".join(f"; skipped {c}: {why}" for c, why in report.checks_skipped)
    console.print(f"{report.count(Severity.ERROR)} error(s), {report.count(Severity.WARNING)} warning(s) from "
                  f"{len(report.checks_run)} checks{skipped}", soft_wrap=True)


def render_json(report: DoctorReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
