"""The Slurm adapter against a real single-node Slurm 22.05 (slurmctld, slurmd, slurmdbd on MariaDB),
started once for the session by tests/integration/slurm_cluster.py."""

from __future__ import annotations

import dataclasses
import json
import time
from functools import partial

import pytest

from predictor.adapters.cluster_policy import ClusterPolicy, TeamSpec, TierSpec
from predictor.adapters.retry import RetryExhausted, RetryPolicy
from predictor.adapters.slurm.adapter import SlurmAdapter, SlurmOptions
from predictor.adapters.slurm.commands import SlurmCommands
from predictor.adapters.slurm.config import account_commands, priority_weight_lines, qos_commands
from predictor.adapters.slurm.state import slurm_time
from predictor.nodeinfo.pinning import plan_pinning
from predictor.nodeinfo.sysfs import read_host_cpus
from predictor.nodeinfo.topology import GpuDevice, NodeTopology
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Reservation, Victim
from tests.integration.slurm_cluster import NODE_GPUS, SlurmCluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

TRAP_SCRIPT = """#!/bin/bash
trap 'echo "TERM received"; exit 0' TERM
echo "training started"
sleep 600 &
wait
"""


def _decision(job_id: str, priority: int = 1000, **kw) -> Decision:
    return Decision(job_id=job_id, priority=Priority(priority), factors=(), action=kw.pop("action", "wait"),
                    tier=kw.pop("tier", "research"), **kw)


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The session cluster with an empty queue, no reservations, and the partition DOWN."""
    slurm_cluster.run("scancel", "--user=root")
    for name in slurm_cluster.run("scontrol", "show", "reservation", "-o").stdout.split():
        if name.startswith("ReservationName="):
            slurm_cluster.run("scontrol", "delete", f"reservationname={name.split('=', 1)[1]}")
    _until(lambda: not slurm_cluster.run("squeue", "-h").stdout.strip(), "queue empty")
    slurm_cluster.set_partition("DOWN")
    return slurm_cluster


@pytest.fixture
def adapter(cluster: SlurmCluster) -> SlurmAdapter:
    return SlurmAdapter(SlurmCommands(env={"SLURM_CONF": str(cluster.conf)}),
                        retry=RetryPolicy(max_attempts=2, base_delay_s=0.1))


_until = partial(wait_until, timeout_s=20.0)  # tests.waiting


def _squeue(cluster: SlurmCluster, fmt: str) -> dict[str, list[str]]:
    out = cluster.run("squeue", "-h", "-o", f"%i {fmt}").stdout
    return {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}


def test_cluster_came_up_quickly(slurm_cluster: SlurmCluster):
    assert slurm_cluster.started_in_s < 30, slurm_cluster.started_in_s
    print(f"\nSlurm cluster started in {slurm_cluster.started_in_s:.1f} s")
    assert set(slurm_cluster.pids()) == {"munged", "slurmdbd", "slurmctld", "slurmd"}


def test_pending_jobs_read_as_canonical_rows(cluster, adapter):
    job = cluster.submit("-A", "vision", "--gres=gpu:2", "-c", "1", "--mem=200", "-t", "30", "-J", "llama-ft")
    rows = adapter.pending_jobs().set_index("job_id")
    row = rows.loc[job]
    assert (row["team"], row["queue"], row["user"], row["job_name"], row["state"]) == (
        "vision", "gpu", "root", "llama-ft", "PENDING")
    assert (row["num_gpus"], row["cpus"], row["mem_mib"], row["time_limit_s"]) == (2, 1, 200, 1800)
    assert row["pending_reason"] == "PartitionDown" and row["censored"]
    assert adapter.running_jobs().empty


def test_priorities_decide_the_order_slurm_runs_jobs_in(cluster, adapter):
    full = f"--gres=gpu:{NODE_GPUS}"  # each job takes every GPU: they must run one after another
    jobs = [cluster.submit("-A", "research", full, "-c", "1", "--mem=100", "-t", "10") for _ in range(3)]
    wanted = {jobs[0]: 1_000, jobs[1]: 3_000, jobs[2]: 2_000}
    results = adapter.apply_many([_decision(j, p) for j, p in wanted.items()])
    assert all(r.ok and [op.kind for op in r.done] == ["set_priority"] for r in results)
    assert {j: int(v[0]) for j, v in _squeue(cluster, "%Q").items()} == wanted
    sprio = cluster.run("sprio", "-h", "-o", "%i %Y").stdout.split()
    assert dict(zip(sprio[::2], map(int, sprio[1::2]), strict=True)) == wanted
    assert all(not r.changed for r in adapter.apply_many([_decision(j, p) for j, p in wanted.items()]))

    cluster.set_partition("UP")  # Slurm now runs them, highest priority first
    order = []
    for _ in range(3):
        running = _until(lambda: [j for j, v in _squeue(cluster, "%T").items() if v[0] == "RUNNING"], "a job running")
        assert len(running) == 1
        order.append(running[0])
        cluster.run("scancel", running[0])
        _until(lambda r=running[0]: r not in _squeue(cluster, "%T"), "job gone")
    assert order == [jobs[1], jobs[2], jobs[0]]


def test_nice_mode_keeps_slurm_factors_and_adds_the_decision(cluster, adapter):
    low, high = (cluster.submit("-A", "research", "--gres=gpu:1", "-c", "1", "--mem=100", "-t", "10") for _ in range(2))
    base = {j: int(v[0]) for j, v in _squeue(cluster, "%Q").items()}
    adapter.options = SlurmOptions(priority_mode="nice", nice_divisor=10)
    results = adapter.apply_many([_decision(low, 1_000), _decision(high, 30_000)])
    assert [[op.kind for op in r.done] for r in results] == [["set_nice"], ["set_nice"]]
    shown = _squeue(cluster, "%y %Q")
    assert (shown[low][0], shown[high][0]) == ("-100", "-3000")
    assert int(shown[low][1]) == base[low] + 100 and int(shown[high][1]) == base[high] + 3000
    assert not any(r.changed for r in adapter.apply_many([_decision(low, 1_000), _decision(high, 30_000)]))


def test_time_limit_qos_partition_and_nodes(cluster, adapter):
    cluster.run("sacctmgr", "-i", "add", "qos", "production")
    cluster.run("sacctmgr", "-i", "modify", "user", "root", "set", "qos+=production")
    job = cluster.submit("-A", "nlp", "--gres=gpu:1", "-c", "1", "--mem=100", "-t", "600")
    adapter.options = SlurmOptions(tier_qos={"production": "production"})
    d = _decision(job, 5_000, action="start", tier="production", queue="gpu", time_limit_s=5_341.0,
                  placement=Placement("A10", (("localhost", 1),), "nvlink"))
    result = adapter.apply(d)
    assert result.ok, result.error
    assert [op.kind for op in result.done] == ["set_priority", "set_qos", "set_time_limit", "set_nodes"]
    assert _squeue(cluster, "%Q %q %l %P")[job] == ["5000", "production", "1:30:00", "gpu"]
    assert "ReqNodeList=localhost" in cluster.run("scontrol", "show", "job", job).stdout
    assert not adapter.apply(d).changed


def test_reservation_is_created_read_back_and_moved(cluster, adapter):
    job = cluster.submit("-A", "research", "--gres=gpu:2", "-c", "1", "--mem=100", "-t", "30")
    start = time.time() + 3_600
    placement = Placement("A10", (("localhost", 2),), "pcie_same_numa")
    d = _decision(job, 9_000, action="reserve",
                  reservation=Reservation(job, start, start + 7_200, placement, start + 1_800))
    first = adapter.apply(d)
    assert first.ok, first.error
    assert [op.kind for op in first.done] == ["set_priority", "create_reservation", "attach_reservation"]
    shown = cluster.run("scontrol", "show", "reservation", f"pred-{job}").stdout
    assert f"StartTime={slurm_time(start)}" in shown and f"EndTime={slurm_time(start + 7_200)}" in shown
    assert "Nodes=localhost" in shown and "Users=root" in shown
    assert _squeue(cluster, "%v")[job] == [f"pred-{job}"]
    assert not adapter.apply(d).changed

    later = dataclasses.replace(d, reservation=Reservation(job, start + 600, start + 7_800, placement, start + 2_400))
    moved = adapter.apply(later)
    assert [op.kind for op in moved.done] == ["update_reservation"]
    assert f"StartTime={slurm_time(start + 600)}" in cluster.run("scontrol", "show", "reservation", f"pred-{job}").stdout


def test_eviction_signals_then_requeues_after_grace(cluster, adapter, tmp_path):
    script = tmp_path / "train.sh"
    script.write_text(TRAP_SCRIPT)
    log = tmp_path / "victim.out"
    cluster.set_partition("UP")
    victim = cluster.run("sbatch", "--parsable", "-o", str(log), "-A", "research", "--gres=gpu:2", "-c", "1",
                         "--mem=100", "-t", "10", str(script)).stdout.strip()
    _until(lambda: log.exists() and "training started" in log.read_text(), "victim running its script")
    cluster.set_partition("DOWN")
    waiting = cluster.submit("-A", "nlp", f"--gres=gpu:{NODE_GPUS}", "-c", "1", "--mem=100", "-t", "10")
    plan = EvictionPlan(for_job_id=waiting, victims=(Victim(victim, "research", 10, (("localhost", 2),), 60.0, 0.03),),
                        grace_s=2.0)
    d = _decision(waiting, 50_000, action="preempt", eviction=plan)
    first = adapter.apply(d)
    assert first.ok, first.error
    assert [op.kind for op in first.done] == ["set_priority", "mark_eviction", "signal"]
    assert [op.kind for op in first.deferred] == ["requeue"]
    _until(lambda: log.exists() and "TERM received" in log.read_text(), "victim got SIGTERM")
    assert [op.kind for op in adapter.apply(d).done] == []  # grace not over yet: nothing new

    time.sleep(2.1)
    second = adapter.apply(d)
    assert [op.kind for op in second.done] == ["requeue"]
    out = cluster.run("scontrol", "show", "job", victim).stdout
    assert "Restarts=1" in out and "predictor-evict:for=" in out
    assert not adapter.apply(d).changed  # requeued once, never twice


def test_unreachable_controller_is_retried_then_reported(cluster, tmp_path):
    dead = tmp_path / "slurm.conf"
    dead.write_text("\n".join(
        "SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
        for line in cluster.conf.read_text().splitlines()) + "\nMessageTimeout=1\n")
    sleeps: list[float] = []
    adapter = SlurmAdapter(SlurmCommands(env={"SLURM_CONF": str(dead)}),
                           retry=RetryPolicy(max_attempts=3, base_delay_s=0.5, sleep=sleeps.append))
    result = adapter.apply(_decision("1", 100))
    assert not result.ok and result.retryable and result.attempts == 3
    assert "slurm_load_jobs" in result.error or "Unable to contact" in result.error
    assert len(sleeps) == 2 and all(0 <= s <= 1.0 for s in sleeps)
    adapter.retry = RetryPolicy(max_attempts=1)
    with pytest.raises(RetryExhausted):
        adapter.pending_jobs()


def test_unknown_job_is_a_permanent_error(adapter):
    result = adapter.apply(_decision("987654", 100))
    assert not result.ok and not result.retryable and "not in squeue" in result.error


def test_generated_configuration_is_accepted_by_slurm(cluster):
    policy = ClusterPolicy(
        tiers=(TierSpec("production", 1.0, 100_000, ("best_effort",)), TierSpec("best_effort", 0.0, 0)),
        teams=(TeamSpec("vision", 2.0, 8, 4), TeamSpec("nlp", 0.5)),
        weights={"tier": 3.0, "age": 2.0, "fairshare": 1.5, "shortness": 3.0}, name="live")
    for _ in range(2):  # the generated script can be run again: every modify succeeds the second time too
        for argv in qos_commands(policy) + account_commands(policy):
            cluster.run(*argv, check=argv[2] != "add")  # add exits 1 when an earlier test made the QoS
    qos = cluster.run("sacctmgr", "-n", "-P", "show", "qos", "format=name,priority,preempt,preemptmode,gracetime").stdout
    assert "production|1000|best_effort|requeue|00:02:00" in qos.splitlines()
    assocs = cluster.run("sacctmgr", "-n", "-P", "show", "assoc", "where", "user=", "format=account,fairshare,grptres").stdout
    assert {"vision|200|gres/gpu=12", "nlp|50|"} <= set(assocs.splitlines())

    cluster.replace_config(priority_weight_lines(policy))
    config = cluster.run("scontrol", "show", "config").stdout
    for expected in ("PriorityWeightQOS       = 30000", "PriorityWeightAge       = 20000",
                     "PriorityWeightFairShare = 15000", "PriorityMaxAge          = 1-00:00:00"):
        assert expected in config

    # gres.conf with Cores= from the node agent, for this host's real CPUs and the test node's GPUs
    host = read_host_cpus()
    topo = NodeTopology(hostname="localhost", host=host,
                        gpus=tuple(GpuDevice(i, "NVIDIA A10", 23028, numa_node=host.numa_nodes[0]) for i in range(NODE_GPUS)),
                        pcie=tuple(tuple("X" if i == j else "PHB" for j in range(NODE_GPUS)) for i in range(NODE_GPUS)),
                        nvlink=tuple((0,) * NODE_GPUS for _ in range(NODE_GPUS)))
    lines = plan_pinning(topo, reserved_cores_per_socket=0).gres_conf_lines(
        device_pattern=str(cluster.root / "dev" / "nvidia{index}"))
    report = cluster.gres_report("\n".join(lines) + "\n")
    assert report.returncode == 0 and "Invalid GRES" not in report.stderr, report.stderr
    cores = sorted({line.rsplit("Cores=", 1)[1] for line in lines})
    for c in cores:  # slurmd parsed every line with its Cores= list
        assert f"Cores={c} " in report.stderr + report.stdout


def test_sync_once_applies_rules_layer_decisions(cluster, tmp_path, monkeypatch, capsys):
    from predictor.cli import main

    jobs = [cluster.submit("-A", team, f"--gres=gpu:{n}", "-c", "1", "--mem=100", "-t", "60")
            for team, n in (("vision", 1), ("nlp", 2), ("research", 4))]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(f"nodes:\n  - {{name: localhost, gpu_type: A10, gpus: {NODE_GPUS}, nvlink_islands: none}}\n")
    monkeypatch.setenv("PREDICTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    args = ["sync", "--target", "slurm", "--once", "--decider", "rules", "--inventory", str(inventory),
            "--slurm-conf", str(cluster.conf)]
    before = _squeue(cluster, "%Q")
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 pending, 0 running, " in out and "3 decision(s)" in out and f"would run: scontrol update jobid={jobs[0]} priority=" in out
    assert _squeue(cluster, "%Q") == before  # a dry run changes nothing

    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    applied = {a["job_id"]: a for a in doc["applied"]}
    assert set(applied) == set(jobs) and all(a["ok"] for a in applied.values())
    after = _squeue(cluster, "%Q")
    for job in jobs:
        calls = [op["call"] for op in applied[job]["done"] if op["kind"] == "set_priority"]
        assert calls == [f"scontrol update jobid={job} priority={after[job][0]}"]
        assert after[job] != before[job]
