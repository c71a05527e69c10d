"""What ``predictor doctor`` reports: one :class:`Finding` per problem (check id, severity, subject,
evidence, the command that fixes it, the docs anchor that explains it), the :class:`Check` that
produces findings from a picture of the cluster, and the :class:`DoctorReport` of one run.

Exit status of a run (rule *doctor exit status*): 0 when nothing was found, 1 when only warnings
were, 2 when at least one error was. An error is a configuration under which jobs never start,
start on the wrong GPUs, or the predictor's decisions are refused; a warning is one under which
they run, but not as the policy means them to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

__all__ = ["Severity", "Finding", "Check", "DoctorReport", "DOCS_PAGE", "run_checks"]

#: The page whose "Doctor" section has one heading per check id (the finding's ``doc`` anchor).
DOCS_PAGE = "docs/adapters.md"

PictureT = TypeVar("PictureT")
ExpectT = TypeVar("ExpectT")


class Severity(StrEnum):
    """How bad a finding is: ``error`` (exit 2) or ``warning`` (exit 1)."""

    ERROR = "error"
    WARNING = "warning"

    @property
    def exit_status(self) -> int:
        return 2 if self is Severity.ERROR else 1


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem a check found.

    Attributes
    ----------
    check : str
        The check's id (``slurm-partition-down``); also its heading in the docs.
    severity : Severity
    subject : str
        What is wrong, as the scheduler names it (``partition gpu``, ``ClusterQueue vision``).
    evidence : str
        What the cluster returned that shows it (values, counts, names).
    fix : str
        The command that fixes it (or, where no command can, the edit to make).
    """

    check: str
    severity: Severity
    subject: str
    evidence: str
    fix: str

    @property
    def doc(self) -> str:
        """The docs anchor explaining the check (``docs/adapters.md#slurm-partition-down``)."""
        return f"{DOCS_PAGE}#{self.check}"

    def to_dict(self) -> dict[str, str]:
        out = asdict(self)
        out["severity"] = self.severity.value
        out["doc"] = self.doc
        return out


@dataclass(frozen=True)
class Check(Generic[PictureT, ExpectT]):
    """A named check: a function from (picture, expectations) to the findings it makes.

    ``needs`` names what the check reads beside the picture and the policy (``"jobs"``: the job
    history given with ``--jobs``); a check whose needs are missing is skipped and reported so.
    """

    id: str
    summary: str
    run: Callable[[PictureT, ExpectT], Iterable[Finding]]
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class DoctorReport:
    """The findings of one run, errors first, with the checks that ran and those skipped."""

    target: str
    findings: tuple[Finding, ...]
    checks_run: tuple[str, ...]
    checks_skipped: tuple[tuple[str, str], ...] = ()  # (check id, why)

    @property
    def exit_status(self) -> int:
        """0 clean, 1 warnings only, 2 errors (rule *doctor exit status*)."""
        return max((f.severity.exit_status for f in self.findings), default=0)

    def count(self, severity: Severity) -> int:
        return sum(f.severity is severity for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "exit_status": self.exit_status,
                "errors": self.count(Severity.ERROR), "warnings": self.count(Severity.WARNING),
                "findings": [f.to_dict() for f in self.findings], "checks_run": list(self.checks_run),
                "checks_skipped": [{"check": c, "why": why} for c, why in self.checks_skipped]}


def run_checks(target: str, checks: Sequence[Check[PictureT, ExpectT]], picture: PictureT, expect: ExpectT,
               available: Iterable[str] = ()) -> DoctorReport:
    """Run every check whose needs are ``available``; findings sorted errors first, then by check and subject."""
    have = set(available)
    findings: list[Finding] = []
    ran: list[str] = []
    skipped: list[tuple[str, str]] = []
    for check in checks:
        missing = [n for n in check.needs if n not in have]
        if missing:
            skipped.append((check.id, f"needs {', '.join(missing)} (--{missing[0]})"))
            continue
        ran.append(check.id)
        findings.extend(check.run(picture, expect))
    order = {Severity.ERROR: 0, Severity.WARNING: 1}
    findings.sort(key=lambda f: (order[f.severity], f.check, f.subject))
    return DoctorReport(target=target, findings=tuple(findings), checks_run=tuple(ran), checks_skipped=tuple(skipped))
