"""``predictor demo``: the whole product end to end on bundled and synthetic data, in one folder.

Steps (each is the real command a user would run, called in-process):

1. ``synth``     a synthetic cluster history with known ground truth (the "cluster's own log");
2. ``ingest``    read it (and the bundled real Slurm sample) into canonical tables + rejects;
3. ``train``     fit and evaluate the predictors, log to the local MLflow store, register a version;
4. ``promote``   move alias ``champion`` to it when it passes the gate;
5. ``simulate``  replay the later part of the history under several policies -> report.html;
6. ``serve``     the API and dashboard over the champion model, with a few pending jobs submitted.

Everything lands in ``--workdir``: SQLite state store, MLflow tracking database and artifacts, reports.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.rule import Rule

from features.errors import InputError

ORDER = 5
BUNDLED_SACCT = Path(__file__).resolve().parents[2] / "data" / "samples" / "eagle" / "sample_eagle_data.csv"
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


def _submit_pending_jobs(base_url: str, tokens_file: Path, jobs_file: Path, count: int) -> None:
    """Once the server answers, submit the last ``count`` jobs of the history as a live queue."""
    import httpx
    import pandas as pd
    import yaml

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    token = next(t["token"] for t in yaml.safe_load(tokens_file.read_text())["tokens"] if t["role"] == "admin")
    jobs = pd.read_parquet(jobs_file).sort_values("submit_ts").tail(count)
    fields = ["job_id", "user", "team", "queue", "tier", "num_gpus", "gpu_type", "time_limit_s", "deadline_ts",
              "job_name", "model_params", "precision", "optimizer", "finetune_method", "batch_size", "seq_len"]
    now = time.time()
    sent = 0
    for row in jobs[fields].to_dict("records"):
        body = {k: v for k, v in row.items() if v is not None and v == v}
        body["job_id"] = f"demo-{body['job_id']}"
        body["num_gpus"] = max(1, int(body.get("num_gpus", 1)))
        if "deadline_ts" in body:
            body["deadline_ts"] = now + 6 * 3600
        resp = httpx.post(f"{base_url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"},
                          timeout=10)
        sent += resp.status_code in (200, 201)
    _console.print(f"submitted {sent} pending jobs to {base_url}/v1/jobs: watch them on the dashboard")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        workdir: Annotated[Path, typer.Option(help="folder for every output (state, MLflow store, reports)")]
        = Path("work"),
        jobs: Annotated[int, typer.Option(min=500, help="synthetic jobs in the history")] = 6000,
        seed: Annotated[int, typer.Option(help="seed of the synthetic history")] = 0,
        cluster_gpus: Annotated[int, typer.Option(min=8, help="GPUs of the replayed cluster")] = 128,
        serve: Annotated[bool, typer.Option("--serve/--no-serve", help="end by serving the API")] = True,
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
        base = f"http://{bind}"
        _console.print(Rule("[bold]6. serve[/]"))
        _console.print(f"dashboard          {base}/")
        _console.print(f"API docs (OpenAPI) {base}/docs")
        _console.print("stop with Ctrl-C")
        tokens = workdir / "predictor-tokens.yaml"
        threading.Thread(target=_submit_pending_jobs, args=(base, tokens, workdir / "jobs.parquet", 40),
                         daemon=True).start()
        _step("serve", ["serve", "--bind", bind])
