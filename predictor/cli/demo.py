"""``predictor demo``: the whole product end to end on bundled and synthetic data, in one folder.

Steps (each is the real command a user would run, called in-process):

1. ``synth``     a synthetic cluster history with known ground truth (the "cluster's own log");
2. ``ingest``    read it (and the bundled real Slurm sample) into canonical tables + rejects;
3. ``train``     fit and evaluate the predictors, log to the local MLflow store, register a version;
4. ``promote``   move alias ``champion`` to it when it passes the gate;
5. ``simulate``  replay the later part of the history under several policies -> report.html;
6. ``serve``     the real API server (uvicorn) over the champion model: 40 pending jobs submitted through
                  ``POST /v1/jobs`` and the head of the live queue printed; ``--keep-serving`` leaves it up.

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


def _submit_pending_jobs(base_url: str, token: str, jobs_file: Path, count: int) -> int:
    """Submit the last ``count`` jobs of the history to the live queue, as a scheduler's webhook would."""
    import httpx
    import pandas as pd

    jobs = pd.read_parquet(jobs_file).sort_values("submit_ts").tail(count)
    # no gpu_type: the service sizes each job onto a flavor from its predicted peak memory
    fields = ["job_id", "user", "team", "queue", "tier", "num_gpus", "time_limit_s", "deadline_ts",
              "job_name", "model_params", "precision", "optimizer", "finetune_method", "batch_size", "seq_len"]
    fields = [f for f in fields if f in jobs.columns]
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
        _step("5. replay the later part of the history under several policies",
              ["simulate", "--jobs", "jobs.parquet", "--cluster", str(cluster_gpus), "--policy", "fifo",
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
    _console.print(f"[dim]$ PREDICTOR_INVENTORY_FILE={env['PREDICTOR_INVENTORY_FILE']} "
                   f"predictor serve --bind {bind} --workers 1 --log-level warning[/]")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env)
    try:
        tokens = workdir / "predictor-tokens.yaml"
        _wait_healthy(base, proc)
        token = _admin_token(tokens)
        _wait_model_loaded(base, token)
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
