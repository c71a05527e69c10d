"""``predictor ingest``: read job logs of one format into the canonical table plus a rejects file."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from features.errors import InputError
from features.ingest import IngestSummary, ingest
from features.sources import FORMATS, READERS

ORDER = 10

_FORMAT_HELP = f"Input format: {', '.join(FORMATS)}, or auto (guess from the first input)."
_EPILOG = "Formats:\n\n" + "\n\n".join(f"  {name}: {cls.summary}" for name, cls in READERS.items())


def register(app: typer.Typer) -> None:
    @app.command("ingest", epilog=_EPILOG)
    def ingest_cmd(
        inputs: Annotated[list[Path], typer.Argument(help="Job log files (gzip is detected).", show_default=False)],
        fmt: Annotated[str, typer.Option("--format", "-f", help=_FORMAT_HELP, show_default=False)],
        out: Annotated[Path, typer.Option("--out", "-o", show_default=False, help="Canonical table to write "
                                          "(Parquet; a missing folder is created); rejects go to <stem>.rejects.parquet beside it.")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
        timezone: Annotated[str | None, typer.Option(
            "--timezone", show_default=False, help="IANA zone of timestamps written without an offset "
            "(default: the format's; UTC except philly).")] = None,
        log_end: Annotated[str | None, typer.Option(
            "--log-end", show_default=False, help="When the log ends (ISO 8601, UTC if no offset); censored "
            "rows get duration = log end - start. Default: stated by the format, else the latest time seen.")] = None,
        chunk_rows: Annotated[int, typer.Option("--chunk-rows", min=1, help="Rows per chunk (bounds memory).")] = 200_000,
        progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar on long inputs.")] = True,
    ) -> None:
        """Read job logs into the canonical job table (Parquet) and a rejects file, then summarise.

        Example: predictor ingest --format swf HPC2N-2002-2.1-cln.swf.gz --out jobs.parquet
        """
        if fmt != "auto" and fmt not in FORMATS:
            raise InputError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)} (or auto)")
        summary = ingest(fmt, inputs, out, progress=progress and not as_json, chunk_rows=chunk_rows,
                         timezone=timezone, log_end_ts=_parse_log_end(log_end))
        if as_json:
            typer.echo(json.dumps(summary.to_dict(), indent=2))
        else:
            print_summary(summary, Console())


def _parse_log_end(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--log-end: not an ISO 8601 time: {text!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def print_summary(summary: IngestSummary, console: Console) -> None:
    """Print an ingest summary as a small table."""
    table = Table(title=f"ingest {summary.format}: {summary.output}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("rows read", f"{summary.rows_read:,}")
    table.add_row("kept", f"{summary.rows_kept:,}")
    rejected = f"{summary.rows_rejected:,}"
    if summary.rows_rejected:
        rejected += f"  -> {summary.rejects_output}"
    table.add_row("rejected", rejected)
    for reason, count in summary.rejected_by_reason.items():
        table.add_row("", f"{count:,}  {reason}")
    table.add_row("censored (running at log end)", f"{summary.censored:,}")
    table.add_row("first submit", summary.first_submit or "-")
    span = f"  ({summary.span_days:g} days)" if summary.span_days is not None else ""
    table.add_row("log end", (summary.log_end or "-") + span)
    table.add_row("users / teams", f"{summary.users:,} / {summary.teams:,}")
    table.add_row("GPU jobs", f"{summary.gpu_jobs:,}")
    types = ", ".join(f"{name} {count:,}" for name, count in list(summary.gpu_types.items())[:8])
    table.add_row("GPU types", types or "-")
    table.add_row("speed", f"{summary.rows_per_second:,.0f} rows/s ({summary.seconds:.2f} s)")
    console.print(table)
