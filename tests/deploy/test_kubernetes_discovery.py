"""Reading a Kubernetes cluster running Kueue, through the official client against the API emulator:
``ingest --from-kubernetes`` (finished Workloads), ``inventory --from-kubernetes`` (nodes with the
labels NVIDIA's GPU feature discovery sets, topology from Kueue's Topology), ``init --target kueue``,
then ``kueue manifests`` / ``slurm config`` from another folder with nothing else, and ``kueue apply``
refusing the shipped example inventory."""

from __future__ import annotations

import json
from pathlib import Path

import kmock
import pandas as pd
import pytest
import yaml
from kubernetes import client

from features.ingest import ingest
from features.schema import TERMINAL_STATES
from predictor.capacity.inventory_sources import load_inventory
from predictor.cli import main
from tests.deploy.manifests import ROOT, name_of, render, schema_problems
from tests.predictor.adapters.kube_emulator import kube_emulator

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
WORKLOADS = ROOT / "tests" / "fixtures" / "kueue" / "workloads.json"
TAS_BLOCK, TAS_RACK = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"
GIB = 2**30


def _node(name: str, *, product: str | None = None, gpus: int = 0, memory_mib: int | None = None,
          block: str = "block-1", rack: str = "rack-1", cpus: int = 64, mem_gib: int = 512) -> dict:
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", TAS_BLOCK: block, TAS_RACK: rack}
    capacity = {"cpu": str(cpus), "memory": f"{mem_gib * 2**20}Ki", "pods": "110"}
    if product:  # what gpu-feature-discovery labels a node with, and the device plugin's capacity
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                       "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.memory": str(memory_mib),
                       "nvidia.com/gpu.family": "ampere", "nvidia.com/cuda.driver.major": "550"})
        capacity["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}


NODES = [
    _node("dgx-a-01", product="NVIDIA-A100-SXM4-80GB", gpus=8, memory_mib=81920, cpus=128, mem_gib=2048),
    _node("dgx-a-02", product="NVIDIA-A100-SXM4-80GB", gpus=8, memory_mib=81920, cpus=128, mem_gib=2048),
    _node("l40s-01", product="NVIDIA-L40S", gpus=4, memory_mib=46068, rack="rack-2"),
    _node("a10-01", product="NVIDIA-A10", gpus=2, memory_mib=23028, rack="rack-2", block="block-2"),
    _node("cpu-01", rack="rack-3", block="block-2"),
]


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "not-checked"}}]}))
    return path


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An emulated cluster: GPU nodes, a Kueue Topology, teams' LocalQueues, priority classes, Workloads."""
    with kube_emulator() as (emulator, api):
        for key, kind in (("v1/nodes", "Node"), ("scheduling.k8s.io/v1/priorityclasses", "PriorityClass")):
            emulator.resources[key] = kmock.ResourceInfo(namespaced=False, kind=kind)
        core, sched, custom = client.CoreV1Api(api), client.SchedulingV1Api(api), client.CustomObjectsApi(api)
        for node in NODES:
            core.create_node(node, _preload_content=False)
        for name, value in (("system-cluster-critical", 2_000_000_000), ("high-priority", 100_000),
                            ("default-priority", 1000), ("low-priority", 10)):
            sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                         "metadata": {"name": name}, "value": value}, _preload_content=False)
        custom.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"},
            "value": 50_000}, _preload_content=False)
        custom.create_cluster_custom_object(GROUP, VERSION, "topologies", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": "default"},
            "spec": {"levels": [{"nodeLabel": TAS_BLOCK}, {"nodeLabel": TAS_RACK},
                                {"nodeLabel": "kubernetes.io/hostname"}]}}, _preload_content=False)
        for team, weight in (("nlp", "2"), ("vision", None)):
            spec = {"namespaceSelector": {}, "resourceGroups": []}
            if weight:
                spec["fairSharing"] = {"weight": weight}
            custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": team},
                "spec": spec}, _preload_content=False)
            custom.create_namespaced_custom_object(GROUP, VERSION, team, "localqueues", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                "metadata": {"name": "gpus", "namespace": team}, "spec": {"clusterQueue": team}},
                _preload_content=False)
        for item in json.loads(WORKLOADS.read_text())["items"]:
            if item.get("kind") == "Workload" and (item.get("metadata") or {}).get("namespace"):
                custom.create_namespaced_custom_object(GROUP, VERSION, item["metadata"]["namespace"], "workloads",
                                                       item, _preload_content=False)
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        yield api, custom


def test_ingest_from_kubernetes_appends_finished_workloads_once(site, tmp_path: Path, capsys) -> None:
    out = tmp_path / "history.parquet"
    assert main(["ingest", "--from-kubernetes", "--out", str(out)]) == 0
    reference = ingest("kueue", [WORKLOADS], tmp_path / "reference.parquet")
    assert reference.rows_kept > 0
    expected = pd.read_parquet(tmp_path / "reference.parquet")
    expected = expected.loc[expected["state"].isin(list(TERMINAL_STATES)) & expected["job_id"].str.contains("/")]
    table = pd.read_parquet(out)
    assert sorted(table["job_id"]) == sorted(expected["job_id"]) and len(table) >= 3
    assert "team-a/job-long-run-1a2b3" not in set(table["job_id"])  # still running: a later run takes it
    first = capsys.readouterr().out
    assert f"{len(table)} jobs added, 0 updated" in first
    assert main(["ingest", "--from-kubernetes", "--out", str(out)]) == 0  # again: nothing doubled
    pd.testing.assert_frame_equal(pd.read_parquet(out), table)
    assert "0 jobs added" in capsys.readouterr().out


def test_inventory_from_kubernetes_is_accepted_by_policy_decide(site, tmp_path: Path) -> None:
    out = tmp_path / "inventory.yaml"
    assert main(["inventory", "--from-kubernetes", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["gpu_types"]["A100-80GB"] == {"memory_mib": 81920, "cost_per_hour": 1.6}  # label normalises to it
    assert doc["gpu_types"]["A10"]["memory_mib"] == 23028  # what the device reports, not the datasheet
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["dgx-a-01"] == {"name": "dgx-a-01", "gpu_type": "A100-80GB", "gpus": 8, "nvlink_islands": "all",
                                 "rack": "rack-1", "block": "block-1", "cpus": 128, "mem_mib": 2048 * 1024}
    assert nodes["l40s-01"]["nvlink_islands"] == "none" and nodes["l40s-01"]["rack"] == "rack-2"
    assert "gpu_type" not in nodes["cpu-01"]
    inventory = load_inventory(str(out))
    assert inventory.total_gpus == 22
    jobs = tmp_path / "queue.csv"
    jobs.write_text("job_id,user,team,tier,num_gpus,gpu_type,submit_ts,state\n"
                    "a,ana,nlp,research,8,A100-80GB,1735680000,PENDING\n"
                    "b,bo,vision,production,2,,1735680100,PENDING\n"
                    "c,cy,vision,research,1,nvidia-a10,1735680200,PENDING\n")
    assert main(["policy", "decide", "--jobs", str(jobs), "--cluster", str(out), "--json"]) == 0
    refused = tmp_path / "exists.yaml"
    refused.write_text("keep me")
    assert main(["inventory", "--from-kubernetes", "--out", str(refused)]) == 2  # no --force: kept
    assert refused.read_text() == "keep me"


def test_init_then_generators_from_another_folder(site, tmp_path: Path, monkeypatch, kubectl, crds, capsys) -> None:
    site_dir = tmp_path / "site"
    assert main(["init", "--target", "kueue", "--out", str(site_dir)]) == 0
    policy = yaml.safe_load((site_dir / "policy.yaml").read_text())
    assert policy["teams"] == {"nlp": {"share": 2.0}, "vision": {"share": 1.0}}
    aliases = policy["tier_aliases"]
    assert (aliases["high-priority"], aliases["urgent"], aliases["low-priority"]) == (
        "production", "production", "best_effort")
    assert aliases["default-priority"] == "research" and "system-cluster-critical" not in aliases
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # only the two files init wrote, named from here
    assert main(["kueue", "manifests", "--policy", "../site/policy.yaml", "--inventory", "../site/inventory.yaml",
                 "--out", "kueue", "--crds", str(Path(crds.sources["Workload"]).parent)]) == 0
    assert main(["slurm", "config", "--policy", "../site/policy.yaml", "--out", "slurm"]) == 0
    assert (elsewhere / "slurm" / "sacctmgr.sh").is_file()
    objs = render(elsewhere / "kueue")  # the generated kustomization, rendered as a GitOps tool would
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology", "WorkloadPriorityClass"]
    problems = [f"{name_of(o)}: {p}" for o in objs for p in schema_problems(o, crds)]
    assert not problems, "\n".join(problems)
    assert main(["kueue", "manifests", "--out", "k2"]) == 2  # no default inventory relative to anything


def test_apply_refuses_the_example_inventory(site, tmp_path: Path, capsys) -> None:
    policy = ROOT / "data" / "policy" / "example-site.yaml"
    example = ROOT / "data" / "inventory" / "example-cluster.yaml"
    copy = tmp_path / "inventory.yaml"
    copy.write_text(example.read_text())
    for spec in (example, copy):
        assert main(["kueue", "apply", "--policy", str(policy), "--inventory", str(spec), "--dry-run"]) == 2
        assert "is the shipped example cluster" in capsys.readouterr().err
    assert main(["kueue", "apply", "--policy", str(policy), "--inventory", str(copy), "--dry-run",
                 "--allow-example-inventory"]) == 0
    printed = capsys.readouterr().out
    assert "would create WorkloadPriorityClass production" in printed and "ClusterQueue nlp" in printed
