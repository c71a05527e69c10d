"""``predictor ingest``: read job logs of one format into the canonical table plus a rejects file;
``--from-slurm`` / ``--from-kubernetes`` read the cluster itself and append what ended since the last
run to the table (:mod:`features.ingest_append`)."""

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
from features.ingest_append import AppendSummary, append_ingest
from features.sources import FORMATS, READERS

ORDER = 10

_FORMAT_HELP = f"Input format: {', '.join(FORMATS)}, or auto (guess from the first input)."
_EPILOG = "Formats:\n\n" + "\n\n".join(f"  {name}: {cls.summary}" for name, cls in READERS.items())


def register(app: typer.Typer) -> None:
    @app.command("ingest", epilog=_EPILOG)
    def ingest_cmd(
        out: Annotated[Path, typer.Option("--out", "-o", show_default=False, help="Canonical table to write "
                                          "(Parquet; a missing folder is created); rejects go to <stem>.rejects.parquet beside it.")],
        inputs: Annotated[list[Path] | None, typer.Argument(help="Job log files (gzip is detected).",
                                                            show_default=False)] = None,
        fmt: Annotated[str | None, typer.Option("--format", "-f", help=_FORMAT_HELP, show_default=False)] = None,
        from_slurm: Annotated[bool, typer.Option("--from-slurm", help=(
            "Run sacct and append the jobs that ended since the last run to --out (no input files)."))] = False,
        from_kubernetes: Annotated[bool, typer.Option("--from-kubernetes", help=(
            "List finished Kueue Workloads (kubeconfig or in-cluster) and append them to --out."))] = False,
        since: Annotated[str | None, typer.Option("--since", show_default=False, help=(
            "--from-slurm: start of the window (ISO 8601, UTC if no offset). Default: where the last run "
            "stopped, or the whole history on the first run."))] = None,
        slurm_conf: Annotated[Path | None, typer.Option("--slurm-conf", help="slurm.conf of the cluster (SLURM_CONF).",
                                                        show_default=False)] = None,
        kube_api_version: Annotated[str, typer.Option("--kueue-api-version", help="v1beta2 or v1beta1.")] = "v1beta2",
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

        Example: predictor ingest --from-slurm --out history.parquet   (nightly: appends what ended)
        """
        if from_slurm or from_kubernetes:
            if from_slurm and from_kubernetes:
                raise InputError("give one of --from-slurm and --from-kubernetes")
            if inputs or fmt:
                raise InputError("--from-slurm/--from-kubernetes read the cluster: give no input files or --format")
            if since is not None and from_kubernetes:
                raise InputError("--since applies to --from-slurm (Kubernetes keeps only the Workloads it has)")
            result = _append_from_cluster("slurm" if from_slurm else "kubernetes", out, since, slurm_conf,
                                          kube_api_version)
            if as_json:
                typer.echo(json.dumps(result.to_dict(), indent=2))
            else:
                typer.echo(f"{result.output}: {result.rows_added:,} jobs added, {result.rows_updated:,} updated, "
                           f"{result.rows_after:,} in all ({result.unfinished_skipped:,} not ended yet, left for "
                           f"a later run; {result.ingest.rows_rejected:,} rejected)")
            return
        if since is not None:
            raise InputError("--since applies to --from-slurm")
        if not inputs:
            raise InputError("give job log files (with --format), or --from-slurm / --from-kubernetes")
        if fmt is None:
            raise InputError("--format is required with input files (a format name, or auto)")
        if fmt != "auto" and fmt not in FORMATS:
            raise InputError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)} (or auto)")
        summary = ingest(fmt, inputs, out, progress=progress and not as_json, chunk_rows=chunk_rows,
                         timezone=timezone, log_end_ts=_parse_log_end(log_end))
        if as_json:
            typer.echo(json.dumps(summary.to_dict(), indent=2))
        else:
            print_summary(summary, Console())


def _append_from_cluster(source: str, out: Path, since: str | None, slurm_conf: Path | None,
                         kube_api_version: str) -> AppendSummary:
    from predictor.adapters.base import SchedulerError

    if source == "slurm":
        from predictor.adapters.slurm.accounting import export_accounting
        from predictor.adapters.slurm.commands import SlurmCommands

        if slurm_conf is not None and not slurm_conf.is_file():
            raise InputError(f"--slurm-conf: {slurm_conf} does not exist")
        commands = SlurmCommands(env={"SLURM_CONF": str(slurm_conf)} if slurm_conf else {})

        def export(folder: Path, since_ts: float | None) -> tuple[list[Path], float]:
            path = folder / "sacct.txt"
            return [path], export_accounting(path, since_ts=since_ts, commands=commands)

        fmt = "sacct"
    else:
        from predictor.adapters.kueue.discovery import kube_api_client
        from predictor.adapters.kueue.history import export_finished_workloads

        api = kube_api_client()

        def export(folder: Path, since_ts: float | None) -> tuple[list[Path], float]:
            path = folder / "workloads.json"
            read_at, _ = export_finished_workloads(path, api, api_version=kube_api_version)
            return [path], read_at

        fmt = "kueue"
    try:
        return append_ingest(fmt, export, out, source=source, since_ts=_parse_time(since, "--since"))
    except SchedulerError as exc:  # unreachable or refused: not the user's input, exit 1 (the table is as it was)
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] cannot read {source}: {exc}")
        raise typer.Exit(1) from None


def _parse_log_end(text: str | None) -> float | None:
    return _parse_time(text, "--log-end")


def _parse_time(text: str | None, option: str) -> float | None:
    if text is None:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{option}: not an ISO 8601 time: {text!r}") from None
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
