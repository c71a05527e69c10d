"""``predictor sync``: keep a Slurm or Kueue cluster in line with the predictor's decisions.

Each pass reads the cluster's pending and running jobs, decides (in this process, or with
``--service`` through a running ``predictor serve``), queues the decisions in the state store's
outbox and delivers them with the adapter: at least once, idempotently, retried with backoff while
the scheduler is unreachable. ``--dry-run`` prints the exact commands or API calls instead.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from features.errors import InputError
from predictor.adapters.base import ClusterAdapter, SchedulerError
from predictor.adapters.retry import RetryPolicy
from predictor.adapters.sync_cycle import (
    CycleReport,
    DecisionSource,
    EngineDecisions,
    ServiceDecisions,
    deliver_deferred,
    run_cycle,
)

ORDER = 70


def make_adapter(target: str, slurm_conf: Path | None, kube_api_version: str, move_queues: bool = False,
                 retries: int = 5, slurm_priority_mode: str = "absolute") -> ClusterAdapter:
    """The adapter for ``target`` (``slurm`` or ``kueue``)."""
    if target == "slurm":
        from predictor.adapters.slurm.adapter import SlurmAdapter, SlurmOptions
        from predictor.adapters.slurm.commands import SlurmCommands

        conf = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
        if conf is not None and not conf.is_file():
            raise InputError(f"Slurm configuration {conf} does not exist (--slurm-conf / SLURM_CONF)")
        env = {"SLURM_CONF": str(slurm_conf)} if slurm_conf else {}
        try:
            options = SlurmOptions(set_partition=move_queues, priority_mode=slurm_priority_mode)
        except ValueError as exc:
            raise InputError(f"--slurm-priority-mode: {exc}") from None
        return SlurmAdapter(SlurmCommands(env=env), options=options, retry=RetryPolicy(max_attempts=retries))
    if target == "kueue":
        from kubernetes.config import ConfigException

        from predictor.adapters.kueue.adapter import KueueAdapter
        from predictor.adapters.kueue.manifests import KueueNaming

        try:
            return KueueAdapter(naming=KueueNaming(api_version=kube_api_version), move_queues=move_queues,
                                retry=RetryPolicy(max_attempts=retries))
        except ConfigException as exc:
            raise InputError(f"no Kubernetes credentials: {exc} (set KUBECONFIG or run in a pod)") from None
    raise InputError(f"--target must be slurm or kueue, got {target!r}")


def _model_line(report: CycleReport) -> str:
    if report.fallback_reason:
        return f"model: {report.model_version} (fallback: {report.fallback_reason})"
    return f"model: {report.model_version}"


def _decision_summary(d) -> dict:  # noqa: ANN001 - a Decision
    """What a decision says, in the ``--json`` document: action, priority, flavor, placement, reservation."""
    return {"job_id": d.job_id, "action": d.action, "priority": int(d.priority), "kueue_priority": d.kueue_priority,
            "flavor": d.flavor, "num_gpus": d.num_gpus, "model_version": d.model_version,
            "placement": None if d.placement is None else {
                "gpu_type": d.placement.gpu_type, "class": d.placement.placement_class,
                "nodes": [list(x) for x in d.placement.gpus_by_node]},
            "reservation_start_ts": None if d.reservation is None else d.reservation.start_ts,
            "reason": d.reason}


def _print(report: CycleReport, dry_run: bool, as_json: bool) -> None:
    head = (f"{report.pending} pending, {report.running} running, {report.finished} newly finished, "
            f"{len(report.decisions)} decision(s); {_model_line(report)}")
    if as_json:
        doc = {"pending": report.pending, "running": report.running, "finished": report.finished,
               "model_version": report.model_version, "fallback_reason": report.fallback_reason,
               "unplaced_running": list(report.unplaced), "dry_run": dry_run,
               "decisions": [_decision_summary(d) for d in report.decisions],
               "planned": {j: [op.to_dict() for op in ops] for j, ops in report.planned.items()},
               "errors": report.errors,
               "applied": [r.to_dict() for r in report.applied]}
        typer.echo(json.dumps(doc))
        return
    typer.echo(head)
    if report.unplaced:
        typer.echo(f"  {len(report.unplaced)} running job(s) hold no GPU of the inventory (they run outside it): "
                   + ", ".join(report.unplaced[:10]))
    for job_id, ops in report.planned.items():
        if not ops:
            typer.echo(f"  {job_id}: nothing to change")
        for op in ops:
            when = f" (after {op.not_before_ts - time.time():.0f} s)" if op.not_before_ts else ""
            typer.echo(f"  {job_id}: would run{when}: {op.render()}")
    for job_id, error in report.errors.items():
        typer.echo(f"  {job_id}: cannot plan: {error}")
    for r in report.applied:
        status = "ok" if r.ok else ("retry later" if r.retryable else "FAILED")
        typer.echo(f"  {r.job_id}: {status}, {len(r.done)} change(s), {len(r.deferred)} deferred"
                   + (f": {r.error}" if r.error else ""))
        for op in r.done:
            typer.echo(f"    done: {op.render()}")


def _engine(settings, decider: str, once: bool = False):  # noqa: ANN001, ANN202 - EngineSettings -> Engine
    """The engine of ``--decider engine`` (the champion loaded now; the fallback says why not) or
    ``--decider rules`` (the null predictor). The champion's boosters are compiled in the background
    while the loop's passes predict with LightGBM; ``once``: not at all (one pass costs less than
    compiling, ``models.compiled``)."""
    from predictor.engine.wiring import build_engine

    if decider == "rules":
        from models.fixed import NULL_VERSION, NullPredictor
        from predictor.engine.model_slot import ModelSlot

        if settings.inventory_file is None:
            raise InputError("--decider rules needs --inventory (or PREDICTOR_INVENTORY_FILE) naming the cluster's nodes")
        slot = ModelSlot.fixed(NullPredictor(), NULL_VERSION, fallback_reason="--decider rules: no model")
        engine, _ = build_engine(settings, model=slot)
        return engine
    engine, _ = build_engine(settings)
    engine.model.check_once(warmup="skip" if once else "background")  # the champion before the first decision
    return engine


def register(app: typer.Typer) -> None:
    @app.command("sync")
    def sync_cmd(
        target: Annotated[str, typer.Option("--target", help="slurm or kueue.")],
        once: Annotated[bool, typer.Option("--once", help="One pass (waits for due eviction steps), then exit.")] = False,
        interval: Annotated[float, typer.Option("--interval", min=1.0, help="Seconds between passes.")] = 60.0,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands/API calls; change nothing.")] = False,
        service: Annotated[str | None, typer.Option("--service", help="URL of a running `predictor serve`.")] = None,
        token: Annotated[str | None, typer.Option("--token", envvar="PREDICTOR_SYNC_TOKEN",
                                                  help="Bearer token for --service.")] = None,
        slurm_conf: Annotated[Path | None, typer.Option("--slurm-conf", help="slurm.conf of the cluster (SLURM_CONF).")] = None,
        kube_api_version: Annotated[str, typer.Option("--kueue-api-version", help="v1beta2 or v1beta1.")] = "v1beta2",
        max_wait: Annotated[float, typer.Option("--max-wait", help="--once: longest wait for eviction grace periods.")] = 300.0,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON document per pass.")] = False,
        decider: Annotated[str, typer.Option("--decider", help=(
            "engine: the registry's champion model + the rules layer in this process; rules: the same "
            "engine with no model (durations and memory unknown)."))] = "engine",
        policy: Annotated[Path | None, typer.Option("--policy", help="Policy file (default: PREDICTOR_POLICY_FILE "
                                                    "or the shipped one).")] = None,
        inventory: Annotated[str | None, typer.Option("--inventory", help=(
            "Inventory of the cluster's nodes (default: PREDICTOR_INVENTORY_FILE)."))] = None,
        at: Annotated[float | None, typer.Option("--now", help=(
            "Decide as of this instant (epoch s; default: the current time), for dry runs that must "
            "agree with a replay or a saved picture."), show_default=False)] = None,
        history_days: Annotated[float, typer.Option("--history-days", min=0.0, help=(
            "Finished jobs read back at start (sacct / finished Workloads) to seed the features and "
            "fair-share; later passes read what ended since the previous one."))] = 30.0,
        slurm_priority_mode: Annotated[str, typer.Option("--slurm-priority-mode", help=(
            "absolute: set the job priority (freezes Slurm's own factors); nice: add it as a nice value."))] = "absolute",
        retries: Annotated[int, typer.Option("--retries", min=1, help=(
            "Attempts per scheduler call while it is unreachable (exponential backoff with jitter)."))] = 5,
        move_queues: Annotated[bool, typer.Option("--move-queues", help=(
            "Also move jobs to the partition / LocalQueue a decision names (off: only priority and the rest)."))] = False,
        metrics_bind: Annotated[str | None, typer.Option("--metrics-bind", show_default=False, help=(
            "host:port to serve Prometheus metrics of the loop on (/metrics: passes, errors, outbox)."))] = None,
    ) -> None:
        """Pull pending, running and finished jobs, decide, and apply the decisions to Slurm or Kueue.

        Example: predictor sync --target slurm --once --dry-run --inventory cluster.yaml --policy site-policy.yaml
        """
        adapter = make_adapter(target, slurm_conf, kube_api_version, move_queues, retries, slurm_priority_mode)
        source: DecisionSource
        from predictor.engine.wiring import get_engine_settings

        settings = get_engine_settings()
        updates = {k: v for k, v in (("policy_file", policy), ("inventory_file", Path(inventory) if inventory else None))
                   if v is not None}
        settings = settings.model_copy(update=updates)
        engine = None
        if service:
            source = ServiceDecisions(service, token)
        elif decider in ("engine", "rules"):
            engine = _engine(settings, decider, once)
            source = EngineDecisions(engine)
        else:
            raise InputError(f"--decider must be engine or rules, got {decider!r}")
        db = None
        if not dry_run:
            from predictor.store import Database

            db = Database(settings.database_url)
            db.upgrade()
        if engine is not None and not once:
            engine.model.start()  # follow the registry alias between passes (hot reload)
        metrics = None
        if metrics_bind is not None:
            from predictor.adapters.metrics import SyncMetrics, backlog_from_store

            metrics = SyncMetrics(target, outbox_backlog=(lambda: backlog_from_store(db)) if db is not None else None)
            try:
                metrics.serve(metrics_bind)
            except (ValueError, OSError) as exc:
                raise InputError(f"--metrics-bind: {exc}") from None
        since = (at if at is not None else time.time()) - history_days * 86400.0
        while True:
            started = at if at is not None else time.time()
            try:
                report = run_cycle(adapter, source, db, now=started, dry_run=dry_run, finished_since_ts=since)
                since = started
                if metrics is not None:
                    metrics.pass_done(report, time.time() - started)
            except SchedulerError as exc:  # could not even read the queue: say so, try next pass
                if metrics is not None:
                    metrics.pass_failed()
                typer.echo(f"error: {target} unavailable: {exc}", err=True)
                if once:
                    raise typer.Exit(1) from None
                time.sleep(interval)
                continue
            _print(report, dry_run, as_json)
            if once:
                if db is not None and report.next_due_ts() is not None:
                    extra = deliver_deferred(adapter, db, [report.next_due_ts()], max_wait)
                    _print(CycleReport(report.pending, report.running, [], applied=extra), dry_run, as_json)
                return
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return
