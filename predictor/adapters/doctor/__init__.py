"""``predictor doctor``: is the cluster set up as the policy means it? A picture of the live cluster
(read by the adapters' own command runners and API client), small named checks over it, and the
report (each finding with its severity, evidence, fix command and docs anchor).

Pictures are plain data and checks only read them, so checks run as well on a recorded picture
(``SlurmPicture.from_json`` / ``KueuePicture.from_json``) as on a live one.
"""

from predictor.adapters.doctor.expectations import Expectations, JobHistory, load_expectations
from predictor.adapters.doctor.findings import Check, DoctorReport, Finding, Severity
from predictor.adapters.doctor.kueue_picture import KueuePicture, read_kueue_picture
from predictor.adapters.doctor.report import (
    KUEUE_CHECKS,
    SLURM_CHECKS,
    diagnose_kueue,
    diagnose_slurm,
    render_json,
    render_table,
)
from predictor.adapters.doctor.slurm_picture import SlurmPicture, read_slurm_picture

__all__ = ["Expectations", "JobHistory", "load_expectations", "Check", "DoctorReport", "Finding", "Severity",
           "KueuePicture", "read_kueue_picture", "SlurmPicture", "read_slurm_picture", "KUEUE_CHECKS",
           "SLURM_CHECKS", "diagnose_kueue", "diagnose_slurm", "render_json", "render_table"]
