"""``predictor demo``: the whole product end to end on bundled and synthetic data, in one folder.

Steps (each is the real command a user would run, called in-process):

1. ``synth``     a synthetic cluster history with known ground truth (the "cluster's own log");
2. ``ingest``    read it (and the bundled real Slurm sample) into canonical tables + rejects;
3. ``train``     fit and evaluate the predictors, log to the local MLflow store, register a version;
4. ``promote``   move alias ``champion`` to it when it passes the gate;
5. ``simulate``  replay the later part of the history under several policies -> report.html;
6. ``serve``     the real API server (uvicorn) over the champion model and the demo policy (each team's
                  fair-share entitlement in proportion to its past use): 60 recent runs reported as job
                  events (the teams' usage; some still hold GPUs), 40 pending jobs submitted through
                  ``POST /v1/jobs``, and the head of the live queue printed; ``--keep-serving`` leaves it up.

Everything lands in ``--workdir``: SQLite state store, MLflow tracking database and artifacts, reports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.rule import Rule

from features.errors import InputError

ORDER = 5
DATA = Path(__file__).resolve().parents[2] / "data"
BUNDLED_SACCT = DATA / "samples" / "eagle" / "sample_eagle_data.csv"
DEMO_INVENTORY = DATA / "inventory" / "example-cluster.yaml"
DEMO_POLICY = "demo-policy.yaml"
_console = Console(stderr=True)


def _step(title: str, argv: list[str]) -> None:
    from predictor.cli import main

    _console.print(Rule(f"[bold]{title}[/]"))
    _console.print(f"[dim]$ predictor {' '.join(argv)}[/]")
    started = time.perf_counter()
    code = main(argv)
    if code != 0:
        raise InputError(f"demo step '{title}' failed (exit {code}); see the message above")
    _console.print(f"[green]done[/] in {time.perf_counter() - started:.1f} s")


def _wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InputError(f"demo: `predictor serve` exited with code {proc.returncode} before answering; "
                             "see its messages above")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise InputError(f"demo: the server at {base_url} did not answer /healthz within {timeout_s:.0f} s")


def _wait_model_loaded(base_url: str, token: str, timeout_s: float = 60.0) -> None:
    """The service loads the champion in the background; score the queue with it, not the fallback."""
    import httpx

    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        status = httpx.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        if not status.get("fallback"):
            return
        time.sleep(0.5)
    _console.print(f"[yellow]the model did not load within {timeout_s:.0f} s "
                   f"({status.get('fallback_reason')}); the analytic fallback scores the queue[/]")


def _admin_token(tokens_file: Path) -> str:
    import yaml

    return next(t["token"] for t in yaml.safe_load(tokens_file.read_text())["tokens"] if t["role"] == "admin")


#: What the demo tells the service about a job (no gpu_type: it sizes each job onto a flavor from its
#: predicted peak memory).
_JOB_FIELDS = ("job_id", "user", "team", "queue", "tier", "num_gpus", "time_limit_s", "deadline_ts", "job_name",
               "model_params", "precision", "optimizer", "finetune_method", "batch_size", "seq_len")


def _submit_pending_jobs(base_url: str, token: str, jobs_file: Path, count: int) -> int:
    """Submit the last ``count`` jobs of the history to the live queue, as a scheduler's webhook would."""
    import httpx
    import pandas as pd

    jobs = pd.read_parquet(jobs_file).sort_values("submit_ts").tail(count)
    fields = [f for f in _JOB_FIELDS if f in jobs.columns]
    now = time.time()
    sent = 0
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for row in jobs[fields].to_dict("records"):
            body = {k: v for k, v in row.items() if v is not None and v == v}
            body["job_id"] = f"demo-{body['job_id']}"
            body["num_gpus"] = max(1, int(body.get("num_gpus", 1)))
            if "deadline_ts" in body:
                body["deadline_ts"] = now + 6 * 3600
            resp = client.post("/v1/jobs", json=body)
            if resp.status_code not in (200, 201):
                raise InputError(f"demo: POST /v1/jobs answered {resp.status_code}: {resp.text[:300]}")
            sent += 1
    return sent


def write_demo_policy(jobs_file: Path, path: Path) -> dict[str, float]:
    """A policy file giving each team of the history a fair-share entitlement in proportion to the
    GPU-hours it used (the largest 4, in steps of 0.5, at least 0.5); the other settings are the
    shipped defaults. Returns the shares.

    The shipped default policy lists no team, so every team would have the same default share: the
    demo's fair-share panel and replay would show nothing to be fair about.
    """
    import pandas as pd
    import yaml

    jobs = pd.read_parquet(jobs_file, columns=["team", "num_gpus", "duration_s"]).dropna()
    used = (jobs["num_gpus"] * jobs["duration_s"]).groupby(jobs["team"].astype(str)).sum()
    top = float(used.max()) if len(used) and used.max() > 0 else 1.0
    shares = {team: max(0.5, round(8 * float(v) / top) / 2) for team, v in used.sort_index().items()}
    doc = {"name": "demo", "description": "shipped defaults plus one fair-share entitlement per team of the "
                                           "demo's history, in proportion to the GPU-hours it used",
           "teams": {team: {"share": share} for team, share in shares.items()}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return shares


def _report_recent_runs(base_url: str, token: str, jobs_file: Path, count: int, before: int) -> tuple[int, int]:
    """Tell the service about the ``count`` runs that started just before the last ``before`` jobs of the
    history, moved in time so the latest start is a few minutes ago: each is submitted, started and (if
    its run would be over by now) finished through the API, as a scheduler's webhook reports them, so
    the fair-share ledger holds real usage and some jobs hold GPUs. Returns (finished, running)."""
    import httpx
    import pandas as pd

    jobs = pd.read_parquet(jobs_file).sort_values("submit_ts")
    ran = jobs.iloc[:-before] if before else jobs
    ran = ran[ran["start_ts"].notna() & ran["duration_s"].notna() & (ran["num_gpus"] >= 1)].tail(count)
    if ran.empty:
        return 0, 0
    now = time.time()
    shift = now - 300.0 - float(ran["start_ts"].max())
    events: list[tuple[float, int, str, dict]] = []
    for order, row in enumerate(ran.to_dict("records")):
        job_id = f"demo-ran-{row['job_id']}"
        submit, start = float(row["submit_ts"]) + shift, float(row["start_ts"]) + shift
        end = start + float(row["duration_s"])
        body = {"job_id": job_id, "submit_ts": submit, "num_gpus": max(1, int(row["num_gpus"]))}
        body.update({k: row[k] for k in _JOB_FIELDS if k in row and k not in ("job_id", "num_gpus", "deadline_ts")
                     and not pd.isna(row[k])})
        events.append((submit, order, "/v1/jobs", body))
        events.append((start, order, f"/v1/jobs/{job_id}/events", {"kind": "started", "ts": start}))
        if end < now:
            events.append((end, order, f"/v1/jobs/{job_id}/events", {"kind": "finished", "ts": end}))
    finished = 0
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for _, _, path, body in sorted(events, key=lambda e: (e[0], e[1])):
            resp = client.post(path, json=body)
            if resp.status_code not in (200, 201):
                raise InputError(f"demo: POST {path} answered {resp.status_code}: {resp.text[:300]}")
            finished += body.get("kind") == "finished"
    return finished, len(ran) - finished


def _show_queue(base_url: str, token: str, rows: int = 12) -> None:
    """Print the head of the live queue: what the service decided for each pending job."""
    import httpx
    from rich.table import Table

    view = httpx.get(f"{base_url}/v1/queue", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    model = httpx.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
    pending = [j for j in view["jobs"] if j["status"] == "pending"]
    table = Table(title=f"live queue: {len(pending)} pending jobs, head of the order "
                        f"(model {model.get('version') or 'fallback'})")
    for col in ("rank", "job", "team", "tier", "GPUs", "p50 run", "p90 run", "peak VRAM", "flavor",
                "priority", "action"):
        table.add_column(col)
    for job in sorted(pending, key=lambda j: j.get("rank") or 1 << 30)[:rows]:
        pred = job.get("prediction") or {}
        dur = pred.get("duration") or {}
        dec = job.get("decision") or {}
        table.add_row(str(job.get("rank")), job["job_id"], str(job.get("team")), str(job.get("tier")),
                      str(job["request"].get("num_gpus")), _fmt_s(dur.get("p50_s")), _fmt_s(dur.get("p90_s")),
                      f"{pred['peak_vram_mib'] / 1024:.1f} GiB" if pred.get("peak_vram_mib") else "-",
                      f"{dec.get('flavor') or '-'} x{dec.get('num_gpus', '-')}",
                      str(dec.get("priority", "-")), str(dec.get("action", "-")))
    _console.print(table)


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 3600:.1f} h" if value >= 3600 else f"{value / 60:.0f} min"


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        workdir: Annotated[Path, typer.Option(help="folder for every output (state, MLflow store, reports)")]
        = Path("work"),
        jobs: Annotated[int, typer.Option(min=500, help="synthetic jobs in the history")] = 6000,
        seed: Annotated[int, typer.Option(help="seed of the synthetic history")] = 0,
        cluster_gpus: Annotated[int, typer.Option(min=8, help="GPUs of the replayed cluster")] = 128,
        serve: Annotated[bool, typer.Option("--serve/--no-serve",
                                            help="end by starting the API, submitting a live queue and showing it")]
        = True,
        keep_serving: Annotated[bool, typer.Option("--keep-serving/--stop-serving",
                                                   help="leave the API and dashboard up until Ctrl-C")] = False,
        bind: Annotated[str, typer.Option(help="host:port for the API and dashboard")] = "127.0.0.1:8000",
    ) -> None:
        """Run the whole product end to end: synth, ingest, train+register, promote, replay, serve.

        Example: predictor demo --workdir work
        """
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)
        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
        os.environ.setdefault("PREDICTOR_DATABASE_URL", f"sqlite:///{workdir / 'predictor.db'}")
        t0 = time.perf_counter()
        _step("1. synthesise a cluster history",
              ["synth", "--jobs", str(jobs), "--seed", str(seed), "--cluster-gpus", str(cluster_gpus),
               "--load", "0.9", "--out", "synth.parquet"])
        _step("2a. ingest it as the cluster's log", ["ingest", "--format", "csv", "synth.parquet",
                                                     "--out", "jobs.parquet", "--no-progress"])
        if BUNDLED_SACCT.exists():
            _step("2b. ingest the bundled real Slurm accounting sample (NREL Eagle)",
                  ["ingest", "--format", "sacct", str(BUNDLED_SACCT), "--out", "eagle.parquet", "--no-progress"])
        _step("3. train, evaluate against baselines, log to MLflow and register",
              ["train", "--jobs", "jobs.parquet", "--register", "--no-progress"])
        _step("4. promote the challenger to champion", ["promote"])
        shares = write_demo_policy(workdir / "jobs.parquet", workdir / DEMO_POLICY)
        _console.print(f"fair-share entitlements per team ({DEMO_POLICY}): "
                       + ", ".join(f"{team} {share:g}" for team, share in shares.items()))
        _step("5. replay the later part of the history under several policies",
              ["simulate", "--jobs", "jobs.parquet", "--cluster", str(cluster_gpus), "--policy-file", DEMO_POLICY,
               "--policy", "fifo",
               "--policy", "qssf", "--policy", "kueue", "--policy", "ours", "--policy", "sjf-oracle",
               "--out", "replay", "--no-progress"])
        _console.print(Rule("[bold]results[/]"))
        _console.print(f"workdir            {workdir}")
        _console.print(f"replay report      file://{workdir / 'replay' / 'report.html'}")
        _console.print(f"MLflow UI          mlflow ui --backend-store-uri {os.environ['MLFLOW_TRACKING_URI']}")
        _console.print(f"elapsed            {time.perf_counter() - t0:.0f} s")
        if not serve:
            return
        _serve_and_score(workdir, bind, keep_serving)


def _serve_and_score(workdir: Path, bind: str, keep_serving: bool) -> None:
    """Start the real server (uvicorn, own process), submit a live queue, show its decisions."""
    base = f"http://{bind}"
    _console.print(Rule("[bold]6. serve: score a live queue through the API[/]"))
    # one worker: the demo's state store is SQLite (one writer process)
    cmd = [sys.executable, "-m", "predictor", "serve", "--bind", bind, "--workers", "1", "--log-level", "warning"]
    env = dict(os.environ)
    # a mixed cluster (DGX A100, PCIe L40S and A10 nodes), so the flavor follows predicted memory
    env.setdefault("PREDICTOR_INVENTORY_FILE", str(DEMO_INVENTORY))
    env.setdefault("PREDICTOR_POLICY_FILE", str(workdir / DEMO_POLICY))  # the teams and their shares
    _console.print(f"[dim]$ PREDICTOR_INVENTORY_FILE={env['PREDICTOR_INVENTORY_FILE']} "
                   f"PREDICTOR_POLICY_FILE={env['PREDICTOR_POLICY_FILE']} "
                   f"predictor serve --bind {bind} --workers 1 --log-level warning[/]")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env)
    try:
        tokens = workdir / "predictor-tokens.yaml"
        _wait_healthy(base, proc)
        token = _admin_token(tokens)
        _wait_model_loaded(base, token)
        finished, running = _report_recent_runs(base, token, workdir / "jobs.parquet", 60, before=40)
        _console.print(f"reported {finished + running} recent runs to {base}/v1/jobs/<id>/events "
                       f"({finished} finished, {running} still running): the teams' fair-share usage")
        sent = _submit_pending_jobs(base, token, workdir / "jobs.parquet", 40)
        _console.print(f"submitted {sent} pending jobs to {base}/v1/jobs")
        _show_queue(base, token)
        _console.print(f"[green]done[/] in {time.perf_counter() - started:.1f} s")
        _console.print(f"dashboard          {base}/dashboard/#token={token}")
        _console.print(f"API docs (OpenAPI) {base}/docs")
        if not keep_serving:
            _console.print("server stopped (--keep-serving leaves it up; or: make serve)")
            return
        _console.print("serving until Ctrl-C")
        try:
            proc.wait()
        except KeyboardInterrupt:
            pass
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
