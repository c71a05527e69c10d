"""Running the Slurm commands an admin uses (``squeue``, ``scontrol``, ``scancel``, ``sprio``) and
telling transient failures (controller unreachable, timeouts) from permanent ones (invalid job id,
invalid QoS, permission denied).

``squeue --json`` (Slurm 22.05, OpenAPI v0.0.38) exits 0 even when it cannot reach the controller
and reports the failure in its ``errors`` list; ``run_json`` checks that list.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from predictor.adapters.base import SchedulerRejected, SchedulerUnavailable

__all__ = ["SlurmCommands", "TRANSIENT_PATTERNS"]

#: stderr fragments that mean "try again later" rather than "this request is wrong".
TRANSIENT_PATTERNS: tuple[str, ...] = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection timed out",
    "zero bytes were transmitted",
    "communication connection failure",
    "resource temporarily unavailable",
    "slurm backup controller in standby mode",
    "transport endpoint is not connected",
    "slurmctld is busy",
    "unable to connect",
    "failed while looking for jobs",
)
_TRANSIENT = re.compile("|".join(re.escape(p) for p in TRANSIENT_PATTERNS), re.IGNORECASE)


@dataclass
class SlurmCommands:
    """Runs Slurm client commands with a timeout; ``env`` adds e.g. ``SLURM_CONF`` for a non-default cluster."""

    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    bin_dir: str | None = None

    def _argv(self, argv: Sequence[str]) -> list[str]:
        head, *rest = argv
        if self.bin_dir:
            head = os.path.join(self.bin_dir, head)
        return [head, *rest]

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> str:
        """Run one command (``env``: more variables for this one, e.g. ``TZ``); return its stdout.

        Raises
        ------
        SchedulerUnavailable
            On a timeout or a failure whose message says the controller was unreachable.
        SchedulerRejected
            On any other non-zero exit (the message carries the command's own error), or when the
            command is not installed.
        """
        cmd = self._argv(argv)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s,
                                 env={**os.environ, **self.env, **(env or {})})
        except subprocess.TimeoutExpired:
            raise SchedulerUnavailable(f"{argv[0]} timed out after {self.timeout_s:.0f} s") from None
        except FileNotFoundError:
            raise SchedulerRejected(f"{cmd[0]}: command not found (install the Slurm client tools, "
                                    "e.g. Debian package slurm-client)") from None
        if res.returncode != 0:
            message = (res.stderr.strip() or res.stdout.strip() or f"exit status {res.returncode}").splitlines()
            text = f"{' '.join(argv[:3])}: {' '.join(message)[:500]}"
            if _TRANSIENT.search(res.stderr) or _TRANSIENT.search(res.stdout):
                raise SchedulerUnavailable(text)
            raise SchedulerRejected(text)
        return res.stdout

    def run_json(self, argv: Sequence[str]) -> dict[str, Any]:
        """Run a command with ``--json`` output and check its ``errors`` list."""
        out = self.run(argv)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise SchedulerRejected(f"{argv[0]} --json printed no JSON ({exc}); is this Slurm >= 21.08?") from None
        errors = doc.get("errors") or []
        if errors:
            text = "; ".join(f"{e.get('source', '?')}: {e.get('description') or e.get('error')}" for e in errors)
            if _TRANSIENT.search(text) or any(e.get("source") == "slurm_load_jobs" for e in errors):
                raise SchedulerUnavailable(f"{argv[0]}: {text}")
            raise SchedulerRejected(f"{argv[0]}: {text}")
        return doc
