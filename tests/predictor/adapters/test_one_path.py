"""One path from the cluster to a decision: the same job table decided five ways gives the same decisions.

A real Slurm holds a running job and three pending ones. Their canonical rows (as the Slurm adapter
reads them: sacct's ``a10``) go through

1. ``predictor sync --once --dry-run`` against that Slurm,
2. ``predictor sync --once --dry-run`` against the Kueue API emulator holding the same jobs as Workloads
   (GPU type spelt as Kubernetes nodes spell it, ``NVIDIA-A10``),
3. ``predictor policy decide`` on the table written to a file,
4. ``POST /v1/jobs`` (and a ``started`` event) on a real uvicorn server, then ``GET /v1/queue``,
5. the first cycle of a replay started from the same state (``Replay.start_from``),

all with the analytic fallback predictor (no model is registered) and the inventory's own spelling
(``A10``). Order, action, flavor, priority and reservation must agree. The policy has no age weight
and the running job leaves too little free for any pending job to start, so every reservation is
anchored at running jobs' predicted ends: a path deciding a few seconds later (the server's own
clock) gives the same integers and times.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml
from kubernetes import client

from predictor.adapters.retry import RetryPolicy
from predictor.adapters.slurm.adapter import SlurmAdapter
from predictor.adapters.slurm.commands import SlurmCommands
from predictor.adapters.sync_cycle import job_request
from predictor.cli import main
from predictor.engine.wiring import get_engine_settings
from tests.integration.slurm_cluster import SlurmCluster
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
INVENTORY = "nodes:\n  - {name: localhost, gpu_type: A10, gpus: 4, nvlink_islands: none, numa_of_gpu: [0, 0, 1, 1]}\n"


_until = partial(wait_until, timeout_s=30.0)  # tests.waiting


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    slurm_cluster.run("scancel", "--user=root")
    _until(lambda: not slurm_cluster.run("squeue", "-h").stdout.strip(), "queue empty")
    slurm_cluster.set_partition("UP")
    # Slurm keeps whole seconds: a second on, every job cancelled above ended before any ``--now`` a test
    # takes, so ``sync --history-days 0`` reads no finished job (one would feed the history and the
    # fair-share of the Slurm path alone; seen in CI, where earlier tests leave jobs behind)
    time.sleep(1.0)
    return slurm_cluster


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    policy = yaml.safe_load((Path(__file__).resolve().parents[3] / "predictor/policy/default_policy.yaml").read_text())
    policy["weights"]["age"] = 0.0  # decisions independent of the instant each path decides at
    out = {"inventory": tmp_path / "inventory.yaml", "policy": tmp_path / "policy.yaml"}
    out["inventory"].write_text(INVENTORY)
    out["policy"].write_text(yaml.safe_dump(policy))
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _workload(row: dict) -> dict:
    """The Kueue Workload of a canonical row (what Kueue would hold for the same job)."""
    obj = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
        "metadata": {"name": f"job-{row['job_id']}", "namespace": row["team"],
                     "creationTimestamp": _iso(row["submit_ts"])},
        "spec": {"queueName": row["queue"], "priorityClassName": row["tier"], "active": True,
                 "maximumExecutionTimeSeconds": int(row["time_limit_s"]),
                 "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                     "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A10"},
                     "containers": [{"name": "train", "image": "trainer:1", "resources": {
                         "requests": {"nvidia.com/gpu": str(int(row["num_gpus"])), "cpu": "1"}}}]}}}]},
    }
    if row["state"] == "RUNNING":
        obj["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": "NVIDIA-A10"}}]},
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                            "lastTransitionTime": _iso(row["start_ts"])}]}
    return obj


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": server}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
        "users": [{"name": "t", "user": {"token": "not-checked"}}]}))
    return path


def _summary(action: str, priority: int, flavor: str | None, reservation_ts: float | None) -> tuple:
    return (action, int(priority), flavor, None if reservation_ts is None else round(float(reservation_ts), 3))


def _sync(args: list[str], capsys) -> dict[str, tuple]:
    get_engine_settings.cache_clear()
    assert main(["sync", "--once", "--dry-run", "--json", "--history-days", "0", *args]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {d["model_version"] for d in doc["decisions"]} == {"fallback"}
    return {d["job_id"]: _summary(d["action"], d["priority"], d["flavor"], d["reservation_start_ts"])
            for d in doc["decisions"]}


def _replay_first_cycle(table: pd.DataFrame, inventory_path: Path, policy_path: Path, now: float) -> dict[str, tuple]:
    from models.fallback import FallbackPredictor
    from predictor.capacity.inventory_sources import load_inventory
    from predictor.capacity.layout import ClusterLayout
    from predictor.sim.predictions import PredictionTable
    from predictor.sim.replay import Replay
    from predictor.sim.rules import PolicyRules, load_policy
    from predictor.sim.workload import load_workload

    # true run times are unknown to every path; the replay needs one per job, which only matters after this cycle
    frame = table.assign(duration_s=table["time_limit_s"], state="COMPLETED")
    jobs, _ = load_workload(frame)
    inventory = load_inventory(inventory_path)
    preds = PredictionTable.from_frame(FallbackPredictor().predict_frame(jobs.frame), "fallback")
    plans = []

    class FirstCycle(PolicyRules):
        def may_evict(self, pending, running):  # plan the first instant even where nothing can start
            return True

        def plan(self, view):
            out = super().plan(view)
            plans.append(getattr(out, "plan", out))
            return out

    rules = FirstCycle("ours", load_policy(str(policy_path)), jobs, inventory, preds)
    replay = Replay(jobs, inventory, rules, preds)
    layout = ClusterLayout.of(inventory)
    running = {i: [layout.gpu_index("localhost", g) for g in range(3)]
               for i, state in enumerate(table.set_index("job_id").loc[jobs.job_ids, "state"]) if state == "RUNNING"}
    replay.start_from(now - jobs.origin_ts, running)
    replay.run()
    first = plans[0]
    return {d.job_id: _summary(d.action, d.priority, d.flavor, None if d.reservation is None else d.reservation.start_ts)
            for d in first.queue()}


def test_one_table_five_paths_same_decisions(cluster, files, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # no model: the fallback
    for key in ("PREDICTOR_POLICY_FILE", "PREDICTOR_INVENTORY_FILE", "PREDICTOR_MODEL_URI"):
        monkeypatch.delenv(key, raising=False)
    running = cluster.submit("-A", "research", "--gres=gpu:a10:3", "-c", "1", "--mem=100", "-t", "30")
    _until(lambda: "RUNNING" in cluster.run("squeue", "-h", "-j", running, "-o", "%T").stdout, "the job running")
    cluster.set_partition("DOWN")  # what follows stays pending
    cluster.submit("-A", "nlp", "--gres=gpu:a10:2", "-c", "1", "--mem=100", "-t", "60")
    cluster.submit("-A", "vision", "--gres=gpu:4", "-c", "1", "--mem=100", "-t", "120")
    cluster.submit("-A", "nlp", "--gres=gpu:a10:2", "-c", "1", "--mem=100", "-t", "10")
    adapter = SlurmAdapter(SlurmCommands(env={"SLURM_CONF": str(cluster.conf)}), retry=RetryPolicy(max_attempts=2))
    table = pd.concat([adapter.pending_jobs(), adapter.running_jobs()], ignore_index=True)
    assert sorted(table["state"]) == ["PENDING", "PENDING", "PENDING", "RUNNING"]
    assert table.loc[table["state"] == "RUNNING", "nodes"].tolist() == ["localhost"]
    now = float(int(time.time()))
    assert adapter.finished_jobs(now).empty  # every path decides on the same picture: no history to learn from
    common = ["--now", str(now), "--inventory", str(files["inventory"]), "--policy", str(files["policy"])]

    # 1. sync against the real Slurm
    slurm = _sync(["--target", "slurm", "--slurm-conf", str(cluster.conf), *common], capsys)
    assert len(slurm) == 3

    # 2. sync against the Kueue emulator holding the same jobs as Workloads
    with kube_emulator() as (_, api):
        custom = client.CustomObjectsApi(api)
        for row in table.to_dict("records"):
            obj = _workload(row)
            custom.create_namespaced_custom_object(GROUP, VERSION, row["team"], "workloads", obj, _preload_content=False)
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        kueue = {k.split("/job-", 1)[1]: v for k, v in _sync(["--target", "kueue", *common], capsys).items()}

    # 3. policy decide on the table as a file
    table.to_parquet(tmp_path / "table.parquet")
    assert main(["policy", "decide", "--jobs", str(tmp_path / "table.parquet"), "--cluster", str(files["inventory"]),
                 "--policy", str(files["policy"]), "--now", str(now), "--model", "fallback", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    decided = {d["job_id"]: _summary(d["action"], d["priority"], d["flavor"],
                                     (d["reservation"] or {}).get("start_ts")) for d in lines}

    # 4. the tracked queue of a real server
    from tests.serving.conftest import TOKENS
    from tests.serving.live import live_server, server_env

    env = server_env(f"sqlite:///{tmp_path / 'service.db'}", tmp_path, PREDICTOR_INVENTORY_FILE=str(files["inventory"]),
                     PREDICTOR_POLICY_FILE=str(files["policy"]))
    token = next(t.token for t in TOKENS.values() if t.role == "scheduler")
    with live_server(env, tmp_path / "uvicorn.log", factory="serving.app:create_app") as base:
        http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        run_row = table.loc[table["state"] == "RUNNING"].iloc[0].to_dict()
        assert http.post("/v1/jobs", json=job_request(run_row)).status_code == 201
        started = {"kind": "started", "ts": float(run_row["start_ts"]),
                   "nodes": [{"node": "localhost", "gpu_indices": [0, 1, 2]}]}
        assert http.post(f"/v1/jobs/{run_row['job_id']}/events", json=started).status_code == 200
        for row in table.loc[table["state"] == "PENDING"].to_dict("records"):
            assert http.post("/v1/jobs", json=job_request(row)).status_code == 201
        queue = http.get("/v1/queue").json()["jobs"]
    served = {j["job_id"]: _summary(j["decision"]["action"], j["decision"]["priority"], j["decision"]["flavor"],
                                    (j["decision"]["reservation"] or {}).get("start_ts")) for j in queue if j["status"] == "pending"}

    # 5. the first cycle of a replay started from the same state
    replayed = _replay_first_cycle(table, files["inventory"], files["policy"], now)

    assert kueue == slurm
    assert decided == slurm
    assert served == slurm
    assert replayed == slurm
    order = [j for j, _ in sorted(slurm.items(), key=lambda kv: -kv[1][1])]
    assert [j["job_id"] for j in queue if j["status"] == "pending"] == order  # the service's rank order too
    assert {v[2] for v in slurm.values()} == {"A10"}
    # one GPU is free: no pending job starts on the running job's GPUs; the first reserves its end
    assert {v[0] for v in slurm.values()} <= {"reserve", "wait"} and "reserve" in {v[0] for v in slurm.values()}


def test_sync_with_a_registered_champion_names_the_model_and_keeps_running_gpus(cluster, files, tmp_path,
                                                                                monkeypatch, capsys):
    """``predictor sync --once`` with a champion in the registry: every decision names the model version, and
    a pending job never gets GPUs that a running job holds."""
    from features.synth import generate

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.delenv("PREDICTOR_MODEL_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    generate(1_500, seed=5).to_parquet(tmp_path / "history.parquet", index=False)
    assert main(["train", "--jobs", str(tmp_path / "history.parquet"), "--register", "--no-progress", "--trees", "20"]) == 0
    assert main(["promote", "--force", "--reason", "test"]) == 0
    capsys.readouterr()

    running = cluster.submit("-A", "research", "--gres=gpu:a10:3", "-c", "1", "--mem=100", "-t", "30")
    _until(lambda: "RUNNING" in cluster.run("squeue", "-h", "-j", running, "-o", "%T").stdout, "the job running")
    cluster.set_partition("DOWN")
    pending = [cluster.submit("-A", team, f"--gres=gpu:a10:{n}", "-c", "1", "--mem=100", "-t", "20")
               for team, n in (("nlp", 1), ("vision", 2), ("nlp", 4))]
    get_engine_settings.cache_clear()
    args = ["sync", "--target", "slurm", "--slurm-conf", str(cluster.conf), "--once", "--json", "--history-days", "1",
            "--inventory", str(files["inventory"]), "--policy", str(files["policy"])]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert doc["model_version"] == "job-predictor/1" and doc["fallback_reason"] is None
    decisions = {d["job_id"]: d for d in doc["decisions"]}
    assert set(decisions) == set(pending) and {d["model_version"] for d in decisions.values()} == {"job-predictor/1"}
    starting = [d for d in decisions.values() if d["action"] == "start"]
    # three of four GPUs are held: at most the 1-GPU job can start, and only on the free GPU
    assert sum(d["num_gpus"] for d in starting) <= 1
    assert all(r["ok"] for r in doc["applied"]), [r.get("error") for r in doc["applied"]]
    prio = {line.split()[0]: int(line.split()[1])
            for line in cluster.run("squeue", "-h", "-o", "%i %Q").stdout.splitlines() if line.split()[0] in pending}
    assert prio == {j: d["priority"] for j, d in decisions.items()}
