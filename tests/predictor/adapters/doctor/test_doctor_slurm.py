"""``predictor doctor --target slurm`` against the suite's real Slurm: set up as the policy means it
(``predictor slurm config``'s lines and commands, gres.conf with Cores=), it finds nothing and exits 0;
each test then plants one problem, checks that the doctor finds exactly that, and undoes it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pandas as pd
import pytest
import yaml

from predictor.adapters.cluster_policy import load_cluster_policy
from predictor.adapters.doctor import SlurmPicture, diagnose_slurm, load_expectations
from predictor.adapters.slurm.config import account_commands, priority_weight_lines, qos_commands
from predictor.cli import main
from tests.integration.slurm_cluster import ACCOUNTS, GPU_TYPE, NODE_GPUS, SlurmCluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

POLICY = {
    "name": "doctor-test",
    "tiers": {"production": {"rank": 1.0, "kueue_priority": 100_000, "can_preempt": ["best_effort"]},
              "research": {"rank": 0.3, "kueue_priority": 10_000},
              "best_effort": {"rank": 0.0, "kueue_priority": 0}},
    "default_tier": "research",
    "tier_aliases": {"normal": "research"},
    "weights": {"tier": 3.0, "age": 2.0, "fairshare": 1.5, "shortness": 6.0},
    "teams": {"vision": {"share": 2.0}, "nlp": {"share": 1.0}, "research": {"share": 1.0}},
}


def _write_policy(path: Path, **changes) -> Path:
    doc = json.loads(json.dumps(POLICY))
    for key, value in changes.items():
        doc[key] = value
    path.write_text(yaml.safe_dump(doc))
    return path


def _gres_line(cluster: SlurmCluster, cores: bool = True) -> str:
    line = f"Name=gpu Type={GPU_TYPE} File={cluster.root}/dev/nvidia[0-{NODE_GPUS - 1}]"
    return line + (f" Cores=0-{cluster.cpus - 1}\n" if cores else "\n")


_until = partial(wait_until, timeout_s=20.0)  # tests.waiting


def _apply_policy_commands(cluster: SlurmCluster, policy_path: Path) -> None:
    policy = load_cluster_policy(policy_path)
    for argv in qos_commands(policy) + account_commands(policy):
        # Preempt= lists left out: once a QoS's list was set empty, Slurm 22.05's sacctmgr refuses every later
        # Preempt= naming it ("QOS Preemption loop detected"), so the generated lines cannot be run twice
        argv = [a for a in argv if not a.startswith("Preempt=")]
        cluster.run(*argv, check=argv[2] != "add")  # add exits 1 for a QoS an earlier test made
    for account in ACCOUNTS:  # no GPU limits left over from other tests
        cluster.run("sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set", "GrpTRES=gres/gpu=-1")


def _reset(cluster: SlurmCluster) -> None:
    """No jobs, the partition up, the node resumed, gres.conf with Cores=."""
    cluster.run("scancel", "--user=root")
    _until(lambda: not cluster.run("squeue", "-h").stdout.strip(), "queue empty")
    cluster.set_partition("UP")
    if "drain" in cluster.run("sinfo", "-h", "-n", "localhost", "-o", "%t").stdout:
        cluster.run("scontrol", "update", "nodename=localhost", "state=resume")
    (cluster.root / "etc" / "gres.conf").write_text(_gres_line(cluster))


def _sacctmgr_rows(cluster: SlurmCluster, *args: str) -> list[list[str]]:
    out = cluster.run("sacctmgr", "-n", "-P", "show", *args).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def configured(slurm_cluster: SlurmCluster, tmp_path_factory) -> Iterator[SlurmCluster]:
    """The session's Slurm configured from the test policy; slurm.conf, gres.conf, the QoS and the
    accounts' fair-share and GPU limits as they were afterwards (other tests share this cluster)."""
    conf, gres = slurm_cluster.conf, slurm_cluster.root / "etc" / "gres.conf"
    saved = conf.read_text(), gres.read_text()
    qos_before = {name for (name,) in _sacctmgr_rows(slurm_cluster, "qos", "format=Name")}
    accounts_before = _sacctmgr_rows(slurm_cluster, "association", "where", "user=", "format=Account,Fairshare,GrpTRES")
    policy = _write_policy(tmp_path_factory.mktemp("doctor") / "policy.yaml")
    gres.write_text(_gres_line(slurm_cluster))
    slurm_cluster.replace_config(priority_weight_lines(load_cluster_policy(policy)))  # also reconfigures gres.conf
    _apply_policy_commands(slurm_cluster, policy)
    try:
        yield slurm_cluster
    finally:
        _reset(slurm_cluster)
        conf.write_text(saved[0])
        gres.write_text(saved[1])
        slurm_cluster.run("scontrol", "reconfigure")
        for (name,) in _sacctmgr_rows(slurm_cluster, "qos", "format=Name"):
            if name not in qos_before:
                slurm_cluster.run("sacctmgr", "-i", "delete", "qos", name)
        for account, fairshare, grp in accounts_before:
            if account != "root":
                slurm_cluster.run("sacctmgr", "-i", "modify", "account", "where", f"name={account}", "set",
                                  f"Fairshare={fairshare or 'parent'}", f"GrpTRES={grp or 'gres/gpu=-1'}")


@pytest.fixture
def cluster(configured: SlurmCluster, tmp_path: Path) -> Iterator[SlurmCluster]:
    """Clean before and after each test: no jobs, partition up, node resumed, QoS and accounts as the policy says."""
    _reset(configured)
    _apply_policy_commands(configured, _write_policy(tmp_path / "policy.yaml"))
    yield configured
    _reset(configured)


@pytest.fixture
def doctor(cluster: SlurmCluster, tmp_path: Path, capsys):
    """Run ``predictor doctor --target slurm --json`` (policy: the test policy unless given); (exit status, report)."""

    def run(*extra: str, policy: Path | None = None) -> tuple[int, dict]:
        policy = policy or _write_policy(tmp_path / "policy.yaml")
        capsys.readouterr()
        status = main(["doctor", "--target", "slurm", "--slurm-conf", str(cluster.conf), "--policy", str(policy),
                       "--json", *extra])
        return status, json.loads(capsys.readouterr().out)

    run.cluster = cluster
    return run


def _checks(report: dict) -> set[str]:
    return {f["check"] for f in report["findings"]}


def _history(path: Path, rows: list[tuple[str, str, int, str | None]]) -> Path:
    pd.DataFrame(rows, columns=["job_id", "team", "num_gpus", "gpu_type"]).to_csv(path, index=False)
    return path


def _inventory(path: Path, gpu_type: str = "A10", gpus: int = NODE_GPUS) -> Path:
    path.write_text(f"nodes:\n  - {{name: localhost, gpu_type: {gpu_type}, gpus: {gpus}, nvlink_islands: none}}\n")
    return path


def test_clean_configuration_gives_nothing(doctor, tmp_path: Path, capsys):
    history = _history(tmp_path / "jobs.csv", [("1", "vision", 4, "A10"), ("2", "nlp", 2, None), ("3", "research", 1, "a10")])
    inventory = _inventory(tmp_path / "inventory.yaml")
    status, report = doctor("--jobs", str(history), "--inventory", str(inventory))
    assert (status, report["findings"], report["checks_skipped"]) == (0, [], [])
    assert len(report["checks_run"]) == 14
    args = ["doctor", "--target", "slurm", "--policy", str(tmp_path / "policy.yaml")]
    assert main([*args, "--slurm-conf", str(doctor.cluster.conf)]) == 0  # the readable report says so too
    assert "0 error(s), 0 warning(s) from 12 checks" in capsys.readouterr().out
    assert main([*args, "--slurm-conf", str(tmp_path / "missing.conf")]) == 2  # bad input: one line, exit 2
    assert "--slurm-conf" in capsys.readouterr().err


def test_priority_weights_all_zero(cluster, doctor):
    zero = [f"{k}=0" for k in ("PriorityWeightAge", "PriorityWeightFairshare", "PriorityWeightJobSize",
                               "PriorityWeightPartition", "PriorityWeightQOS")]
    cluster.replace_config(zero)
    try:
        status, report = doctor()
    finally:
        cluster.replace_config(priority_weight_lines(load_cluster_policy(_write_policy(cluster.root / "p.yaml"))))
    assert status == 2 and _checks(report) == {"slurm-priority-weights-zero"}
    (finding,) = report["findings"]
    assert "PriorityWeightQOS=30000" in finding["fix"] and "scontrol reconfigure" in finding["fix"]
    assert finding["doc"] == "docs/adapters.md#slurm-priority-weights-zero"


def test_weights_that_contradict_the_policy(cluster, doctor):
    cluster.replace_config(["PriorityWeightQOS=100000", "PriorityWeightJobSize=100", "PriorityMaxAge=7-00:00:00"])
    try:
        status, report = doctor()
    finally:
        cluster.replace_config(priority_weight_lines(load_cluster_policy(_write_policy(cluster.root / "p.yaml"))))
    assert status == 1 and _checks(report) == {"slurm-weights-contradict-policy"}
    subjects = {f["subject"]: f for f in report["findings"]}
    assert set(subjects) == {"PriorityWeightQOS/Age/Fairshare", "PriorityWeightJobSize", "PriorityMaxAge"}
    assert "out of proportion: tier, age, fairshare" in subjects["PriorityWeightQOS/Age/Fairshare"]["evidence"]
    assert "PriorityMaxAge=1-00:00:00" in subjects["PriorityMaxAge"]["fix"]


def test_a_qos_the_policy_names_but_sacctmgr_lacks(doctor, tmp_path: Path):
    tiers = {**POLICY["tiers"], "gold": {"rank": 0.9, "kueue_priority": 90_000}}
    status, report = doctor(policy=_write_policy(tmp_path / "gold.yaml", tiers=tiers))
    assert status == 2 and _checks(report) == {"slurm-qos-missing"}
    (finding,) = report["findings"]
    assert finding["subject"] == "tier gold"
    assert finding["fix"].startswith("sacctmgr -i add qos gold && sacctmgr -i modify qos where name=gold set Priority=900")


def test_qos_priorities_against_the_tiers(cluster, doctor):
    cluster.run("sacctmgr", "-i", "modify", "qos", "where", "name=best_effort", "set", "Priority=2000")
    status, report = doctor()
    assert status == 1 and _checks(report) == {"slurm-qos-priority-order"}
    (finding,) = report["findings"]
    assert finding["subject"] == "QoS research / best_effort" and "priority 2000" in finding["evidence"]
    assert "name=best_effort set Priority=0" in finding["fix"]


def test_a_team_without_an_account(doctor, tmp_path: Path):
    teams = {**POLICY["teams"], "robotics": {"share": 1.0}}
    status, report = doctor(policy=_write_policy(tmp_path / "teams.yaml", teams=teams))
    assert status == 1 and _checks(report) == {"slurm-team-without-account"}
    assert report["findings"][0]["fix"].startswith("sacctmgr -i add account robotics && sacctmgr -i modify account")


def test_an_account_without_a_team(doctor, tmp_path: Path):
    teams = {"vision": {"share": 2.0}, "nlp": {"share": 1.0}}
    status, report = doctor(policy=_write_policy(tmp_path / "teams.yaml", teams=teams))
    assert status == 1 and _checks(report) == {"slurm-account-without-team"}
    assert [f["subject"] for f in report["findings"]] == ["account research"]


def test_fairshare_against_the_policy_shares(cluster, doctor):
    cluster.run("sacctmgr", "-i", "modify", "account", "where", "name=vision", "set", "Fairshare=10")
    status, report = doctor()
    assert status == 1 and _checks(report) == {"slurm-fairshare-unbalanced"}
    vision = next(f for f in report["findings"] if f["subject"] == "account vision")
    assert vision["fix"] == "sacctmgr -i modify account where name=vision set Fairshare=200"


def test_a_partition_down(cluster, doctor):
    cluster.set_partition("DOWN")
    job = cluster.submit("-A", "vision", "--gres=gpu:1", "-c", "1", "--mem=100", "-t", "10")
    status, report = doctor()
    assert status == 2 and _checks(report) == {"slurm-partition-down"}
    (finding,) = report["findings"]
    assert finding["severity"] == "error" and job in finding["evidence"]
    assert finding["fix"] == "scontrol update partitionname=gpu state=up"


def test_a_drained_gpu_node(cluster, doctor):
    cluster.run("scontrol", "update", "nodename=localhost", "state=drain", "reason=doctor-test")
    status, report = doctor()
    assert status == 1 and _checks(report) == {"slurm-node-unavailable"}
    assert "DRAIN" in report["findings"][0]["evidence"]


def test_a_gres_type_no_job_asks_for(doctor, tmp_path: Path):
    history = _history(tmp_path / "jobs.csv", [("1", "vision", 2, "L40S"), ("2", "nlp", 1, "NVIDIA-L40S")])
    status, report = doctor("--jobs", str(history))
    assert status == 1 and _checks(report) == {"slurm-gres-type-unrequested"}
    (finding,) = report["findings"]
    assert finding["subject"] == f"gres type {GPU_TYPE}" and "L40S (2)" in finding["evidence"]


def test_gpus_without_cores_in_gres_conf(cluster, doctor):
    (cluster.root / "etc" / "gres.conf").write_text(_gres_line(cluster, cores=False))
    status, report = doctor()
    assert status == 1 and _checks(report) == {"slurm-gres-without-cores"}
    assert report["findings"][0]["subject"] == "gres.conf:1 (every node)"


def test_a_gpu_limit_below_a_pending_job(cluster, doctor):
    cluster.run("sacctmgr", "-i", "modify", "account", "where", "name=nlp", "set", "GrpTRES=gres/gpu=1")
    job = cluster.submit("-A", "nlp", "--gres=gpu:2", "-c", "1", "--mem=100", "-t", "10")
    _until(lambda: "AssocGrp" in cluster.run("squeue", "-h", "-j", job, "-o", "%r").stdout, "job held by its limit")
    status, report = doctor()
    assert status == 2 and _checks(report) == {"slurm-quota-too-small"}
    (finding,) = report["findings"]
    assert f"job {job} asks 2 GPUs" in finding["evidence"]
    assert finding["fix"] == "sacctmgr -i modify account where name=nlp set GrpTRES=gres/gpu=2"


def test_a_gpu_limit_below_the_largest_job_in_history(cluster, doctor, tmp_path: Path):
    cluster.run("sacctmgr", "-i", "modify", "account", "where", "name=vision", "set", "GrpTRES=gres/gpu=2")
    history = _history(tmp_path / "jobs.csv", [("7", "vision", 4, "A10"), ("8", "vision", 1, "A10")])
    status, report = doctor("--jobs", str(history))
    assert status == 2 and _checks(report) == {"slurm-quota-below-largest-job"}
    assert "(7) had 4 GPUs" in report["findings"][0]["evidence"]


def test_an_inventory_that_differs_from_the_nodes(doctor, tmp_path: Path):
    status, report = doctor("--inventory", str(_inventory(tmp_path / "inv.yaml", "A100-80GB", 8)))
    assert status == 1 and _checks(report) == {"inventory-drift"}
    (finding,) = report["findings"]
    assert "plans 8 x A100-80GB" in finding["evidence"] and "--from-slurm" in finding["fix"]


def test_a_recorded_picture_gives_the_same_report(cluster, doctor, tmp_path: Path):
    cluster.run("scontrol", "update", "nodename=localhost", "state=drain", "reason=doctor-test")
    saved = tmp_path / "picture.json"
    live = doctor("--save-picture", str(saved))
    assert live == doctor("--picture", str(saved))
    picture = SlurmPicture.from_json(saved.read_text())
    again = diagnose_slurm(picture, load_expectations(_write_policy(tmp_path / "policy.yaml")))
    assert [f.to_dict() for f in again.findings] == live[1]["findings"]
