"""Slurm's accounting, exported the way the ``sacct`` reader reads it.

``sacct`` runs with the fields :data:`features.sources.sacct.FIELDS` names, parsable (``-P``), for
all users (``-a``), from ``since`` minus :data:`OVERLAP_S` to ``now`` (jobs in any state at some point
of that window, their steps included), with ``TZ=UTC`` so that the times it prints are UTC, as the
reader takes them. Its output is streamed to a file: a long history never sits in memory.

The window is wider than ``[since, until]`` on both sides, on purpose: ``sacct -E T`` leaves out a job
that ended in the second ``T`` (seen on 22.05), and slurmctld hands records to slurmdbd
asynchronously, so a job that ended just before the last run may reach the database after it. Rows
seen twice are merged by the append (:mod:`features.ingest_append`); a record that reaches slurmdbd
more than :data:`OVERLAP_S` late (a slurmdbd outage) needs a run with ``--since`` before the outage.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from features.sources.sacct import FIELDS
from predictor.adapters.base import SchedulerRejected, SchedulerUnavailable
from predictor.adapters.slurm.commands import TRANSIENT_PATTERNS, SlurmCommands

__all__ = ["sacct_argv", "export_accounting", "SACCT_EPOCH", "OVERLAP_S"]

#: ``--since`` of a first run: the whole history slurmdbd holds.
SACCT_EPOCH = "1970-01-01T00:00:00"
#: How far before ``since`` each export starts again (see the module docstring).
OVERLAP_S = 3600.0
_TRANSIENT = re.compile("|".join(re.escape(p) for p in TRANSIENT_PATTERNS), re.IGNORECASE)


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(since_ts: float | None) -> list[str]:
    """The ``sacct`` command line from ``since_ts`` less the overlap to now (UTC: run it with ``TZ=UTC``)."""
    start = SACCT_EPOCH if since_ts is None else _utc(max(since_ts - OVERLAP_S, 0.0))
    # -E a minute ahead: "-E now" leaves out a job that ended in the current second (seen on 22.05)
    return ["sacct", "-a", "-P", f"--format={','.join(FIELDS)}", "-S", start, "-E", "now+60"]


def export_accounting(dest: Path, *, since_ts: float | None, commands: SlurmCommands | None = None,
                      timeout_s: float = 3600.0) -> float:
    """Write ``sacct``'s export from ``since_ts`` to ``dest``; return the time the query started (the
    watermark: what ends later is read again by the next run).

    Raises
    ------
    SchedulerUnavailable
        slurmdbd or the controller could not be reached, or sacct timed out.
    SchedulerRejected
        sacct is not installed or refused the request (the message carries its error).
    """
    commands = commands or SlurmCommands()
    until = time.time()
    argv = sacct_argv(since_ts)
    head = os.path.join(commands.bin_dir, argv[0]) if commands.bin_dir else argv[0]
    env = {**os.environ, **commands.env, "TZ": "UTC"}
    with open(dest, "wb") as out:
        try:
            done = subprocess.run([head, *argv[1:]], stdout=out, stderr=subprocess.PIPE, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise SchedulerUnavailable(f"sacct timed out after {timeout_s:.0f} s") from None
        except FileNotFoundError:
            raise SchedulerRejected(f"{head}: command not found (install the Slurm client tools, "
                                    "e.g. Debian package slurm-client)") from None
    error = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        text = f"sacct: {' '.join(error.splitlines())[:500] or f'exit status {done.returncode}'}"
        raise (SchedulerUnavailable if _TRANSIENT.search(error) else SchedulerRejected)(text)
    if dest.stat().st_size == 0:  # sacct prints at least the header; nothing at all means it failed
        raise SchedulerUnavailable(f"sacct printed nothing{': ' + error[:300] if error else ''}")
    return until
