"""``predictor doctor --target kueue`` against the Kubernetes API emulator holding real Kueue objects:
configured by ``predictor kueue apply`` (the generator) on labelled GPU nodes, it finds nothing and
exits 0; each test then plants one problem, checks that the doctor finds exactly that, and checks
every Kueue object the emulator holds against the real CRD schemas (the emulator validates nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import kmock
import pandas as pd
import pytest
import yaml
from kubernetes import client

from predictor.adapters.doctor import KueuePicture, diagnose_kueue, load_expectations
from predictor.adapters.kueue.adapter import QUEUE_LABEL
from predictor.cli import main
from tests.predictor.adapters.kube_emulator import KUEUE_KINDS, kube_emulator
from tests.predictor.adapters.kueue_objects import batch_job, workload

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
FLAVOR_LABEL = "predictor/gpu-type"
POLICY = {
    "name": "doctor-test",
    "tiers": {"production": {"rank": 1.0, "kueue_priority": 100_000, "can_preempt": ["best_effort"]},
              "research": {"rank": 0.3, "kueue_priority": 10_000},
              "best_effort": {"rank": 0.0, "kueue_priority": 0}},
    "default_tier": "research",
    "tier_aliases": {},
    "teams": {"vision": {"share": 2.0}, "nlp": {"share": 1.0, "borrowing_limit_gpus": 4}},
}
INVENTORY = {"nodes": [
    {"name": "a100-01", "gpu_type": "A100-80GB", "gpus": 8, "rack": "r1", "cpus": 128, "mem_mib": 1_048_576},
    {"name": "a100-02", "gpu_type": "A100-80GB", "gpus": 8, "rack": "r1", "cpus": 128, "mem_mib": 1_048_576},
    {"name": "l40s-01", "gpu_type": "L40S", "gpus": 4, "rack": "r2", "cpus": 64, "mem_mib": 524_288},
    {"name": "cpu-01", "cpus": 32, "mem_mib": 131_072},
]}
PRODUCTS = {"A100-80GB": "NVIDIA-A100-SXM4-80GB", "L40S": "NVIDIA-L40S", "H100-80GB": "NVIDIA-H100-80GB-HBM3"}


def node(name: str, gpu_type: str | None = None, gpus: int = 0, *, flavor: str | None = None,
         rack: str | None = None) -> dict:
    """A Node as gpu-feature-discovery and the device plugin leave it (``flavor``: the flavor label's value)."""
    labels = {"kubernetes.io/hostname": name}
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpu_type:
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": PRODUCTS[gpu_type],
                       "nvidia.com/gpu.count": str(gpus)})
        capacity["nvidia.com/gpu"] = str(gpus)
    if flavor:
        labels[FLAVOR_LABEL] = flavor
    if rack:
        labels["predictor/rack"] = rack
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity}}


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "not-checked"}}]}))
    return path


def _write(path: Path, doc: dict, **changes) -> Path:
    path.write_text(yaml.safe_dump({**json.loads(json.dumps(doc)), **changes}))
    return path


class Site:
    """The emulated cluster and the files describing it."""

    def __init__(self, api: client.ApiClient, folder: Path):
        self.api, self.folder = api, folder
        self.custom, self.core, self.batch = client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)
        self.policy = _write(folder / "policy.yaml", POLICY)
        self.inventory = _write(folder / "inventory.yaml", INVENTORY)

    def create(self, obj: dict) -> None:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "Node":
            self.core.create_node(obj, _preload_content=False)
        elif kind == "Job":
            self.batch.create_namespaced_job(meta["namespace"], obj, _preload_content=False)
        elif "namespace" in meta:
            plural = next(p for p, (k, _) in KUEUE_KINDS.items() if k == kind)
            self.custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], plural, obj,
                                                        _preload_content=False)
        else:
            plural = next(p for p, (k, _) in KUEUE_KINDS.items() if k == kind)
            self.custom.create_cluster_custom_object(GROUP, VERSION, plural, obj, _preload_content=False)

    def get(self, plural: str, name: str) -> dict:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name)

    def patch(self, plural: str, name: str, body: dict) -> None:
        self.custom.patch_cluster_custom_object(GROUP, VERSION, plural, name, body)

    def kueue_objects(self) -> list[dict]:
        out = []
        for plural in KUEUE_KINDS:
            doc = json.loads(self.custom.list_cluster_custom_object(GROUP, VERSION, plural, _preload_content=False).data)
            out += doc.get("items") or []
        return out


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> Site:
    """Labelled GPU nodes, the generated Kueue configuration (``predictor kueue apply``), a pending and an
    admitted workload with their Jobs, a finished Job without a queue label (Kueue never needed it)."""
    with kube_emulator() as (emulator, api):
        for key, kind in (("v1/nodes", "Node"), ("scheduling.k8s.io/v1/priorityclasses", "PriorityClass")):
            emulator.resources[key] = kmock.ResourceInfo(namespaced=False, kind=kind)
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        s = Site(api, tmp_path)
        for n in INVENTORY["nodes"]:
            s.create(node(n["name"], n.get("gpu_type"), n.get("gpus", 0), flavor=n.get("gpu_type"), rack=n.get("rack")))
        assert main(["kueue", "apply", "--policy", str(s.policy), "--inventory", str(s.inventory)]) == 0
        s.create(workload("vision", "train-a", priority=10, gpus=8))
        s.create(batch_job("vision", "train-a"))
        s.create(workload("nlp", "eval-b", priority=10, gpus=4, admitted=True))
        s.create(batch_job("nlp", "eval-b", suspend=False))
        done = batch_job("vision", "old-run", suspend=False)
        del done["metadata"]["labels"]
        done["status"] = {"completionTime": "2026-11-28T10:00:00Z", "succeeded": 1}
        s.create(done)
        capsys.readouterr()
        yield s


@pytest.fixture
def doctor(site: Site, crds, capsys):
    """Run ``predictor doctor --target kueue --json``; (exit status, report). Checks the emulator's objects first."""

    def run(*extra: str, policy: Path | None = None) -> tuple[int, dict]:
        for obj in site.kueue_objects():  # what was planted is a valid Kueue object
            crds.validate(obj)
        capsys.readouterr()
        status = main(["doctor", "--target", "kueue", "--policy", str(policy or site.policy), "--json", *extra])
        return status, json.loads(capsys.readouterr().out)

    return run


def _checks(report: dict) -> set[str]:
    return {f["check"] for f in report["findings"]}


def _history(path: Path, rows: list[tuple[str, str, int, str | None]]) -> Path:
    pd.DataFrame(rows, columns=["job_id", "team", "num_gpus", "gpu_type"]).to_parquet(path)
    return path


def test_clean_configuration_gives_nothing(site: Site, doctor, capsys):
    history = _history(site.folder / "jobs.parquet", [("vision/a", "vision", 16, "A100-80GB"), ("nlp/b", "nlp", 4, None)])
    status, report = doctor("--jobs", str(history), "--inventory", str(site.inventory))
    assert (status, report["findings"], report["checks_skipped"]) == (0, [], [])
    assert len(report["checks_run"]) == 15
    assert main(["doctor", "--target", "kueue", "--policy", str(site.policy)]) == 0
    assert "0 error(s), 0 warning(s) from 13 checks" in capsys.readouterr().out


def test_a_flavor_selecting_nodes_of_another_gpu_type(site: Site, doctor):
    site.create(node("l40s-02", "L40S", 4, flavor="A100-80GB"))  # labelled as an A100 node
    status, report = doctor()
    assert status == 2 and _checks(report) == {"kueue-flavor-wrong-gpu"}
    (finding,) = report["findings"]
    assert finding["subject"] == "node l40s-02" and "NVIDIA-L40S (L40S)" in finding["evidence"]
    assert finding["fix"] == f"kubectl label node l40s-02 --overwrite {FLAVOR_LABEL}=L40S"


def test_a_gpu_node_no_flavor_selects(site: Site, doctor):
    site.create(node("a100-03", "A100-80GB", 8))  # the flavor label was never set
    site.create(node("h100-01", "H100-80GB", 8, flavor="H100-80GB"))  # no flavor of that type at all
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-node-without-flavor"}
    fixes = {f["subject"]: f["fix"] for f in report["findings"]}
    assert fixes["node a100-03"] == f"kubectl label node a100-03 --overwrite {FLAVOR_LABEL}=A100-80GB"
    assert fixes["node h100-01"].startswith(f"predictor kueue apply --policy {site.policy}")


def test_a_flavor_no_node_carries(site: Site, doctor):
    site.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": "h100-80gb"},
                 "spec": {"nodeLabels": {FLAVOR_LABEL: "H100-80GB"}}})
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-flavor-without-nodes"}
    assert report["findings"][0]["fix"].startswith("kubectl delete resourceflavor h100-80gb")


def test_flavor_quotas_above_the_flavor_gpus(site: Site, doctor):
    spec = site.get("clusterqueues", "vision")["spec"]
    spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 20  # a100-80gb: 20 + 5 > 16
    site.patch("clusterqueues", "vision", {"spec": {"resourceGroups": spec["resourceGroups"]}})
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-quota-over-capacity"}
    assert "nlp (5) + vision (20) = 25 nominal GPUs; the flavor's nodes have 16" in report["findings"][0]["evidence"]


def test_a_pending_workload_its_quota_never_admits(site: Site, doctor):
    site.create(workload("nlp", "big", gpus=12))  # nlp: 5 A100s nominal + at most 3 borrowed
    status, report = doctor()
    assert status == 2 and _checks(report) == {"kueue-quota-too-small"}
    (finding,) = report["findings"]
    assert finding["subject"] == "ClusterQueue nlp" and "workload nlp/big asks 12 GPUs" in finding["evidence"]
    assert "a100-80gb: nominal 5, at most 8 with borrowing" in finding["evidence"]
    patch = json.loads(finding["fix"].split(" -p ", 1)[1].strip("'"))
    assert patch == [{"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota", "value": 9}]
    site.create(workload("vision", "huge", gpus=24))  # more than any flavor's nodes hold
    status, report = doctor()
    huge = next(f for f in report["findings"] if "vision/huge" in f["evidence"])
    assert "no flavor's nodes hold that many either (largest: a100-80gb, 16 GPUs)" in huge["evidence"]


def test_a_quota_below_the_largest_job_in_history(site: Site, doctor):
    history = _history(site.folder / "jobs.parquet", [("nlp/x", "nlp", 20, "A100-80GB"), ("nlp/y", "nlp", 2, None)])
    status, report = doctor("--jobs", str(history))
    assert status == 2 and _checks(report) == {"kueue-quota-below-largest-job"}
    assert "(nlp/x) had 20 GPUs" in report["findings"][0]["evidence"]


def test_jobs_without_the_queue_name_label(site: Site, doctor):
    for name, suspend in (("forgot-label", True), ("runs-around-kueue", False)):
        job = batch_job("vision", name, suspend=suspend)
        del job["metadata"]["labels"]
        site.create(job)
    status, report = doctor()
    assert status == 2 and _checks(report) == {"kueue-job-without-queue-name"}
    severities = {f["subject"]: f["severity"] for f in report["findings"]}
    assert severities == {"Job vision/forgot-label": "error", "Job vision/runs-around-kueue": "warning"}
    assert report["findings"][0]["fix"] == f"kubectl label job -n vision forgot-label {QUEUE_LABEL}=gpus"


def test_a_queue_name_no_local_queue_has(site: Site, doctor):
    site.create(batch_job("nlp", "typo", queue="gpu"))
    status, report = doctor()
    assert status == 2 and _checks(report) == {"kueue-queue-name-unknown"}
    assert report["findings"][0]["fix"] == f"kubectl label job -n nlp typo --overwrite {QUEUE_LABEL}=gpus"


def test_a_local_queue_pointing_at_a_missing_cluster_queue(site: Site, doctor):
    site.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                 "metadata": {"name": "urgent", "namespace": "vision"}, "spec": {"clusterQueue": "vision-urgent"}})
    status, report = doctor()
    assert status == 2 and _checks(report) == {"kueue-localqueue-missing-clusterqueue"}
    fix = report["findings"][0]["fix"]
    assert fix.startswith("kubectl delete localqueue -n vision urgent && echo ") and '"clusterQueue":"vision"' in fix


def test_fair_sharing_weights_against_the_policy(site: Site, doctor):
    site.patch("clusterqueues", "nlp", {"spec": {"fairSharing": {"weight": "2"}}})
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-fair-sharing-unbalanced"}
    fixes = {f["subject"]: f["fix"] for f in report["findings"]}
    assert fixes["ClusterQueue nlp"] == ("kubectl patch clusterqueue nlp --type merge -p "
                                         "'{\"spec\": {\"fairSharing\": {\"weight\": \"1\"}}}'")


def test_a_tier_without_a_priority_class(site: Site, doctor):
    site.custom.delete_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", "best-effort")
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-tier-without-priority-class"}
    (finding,) = report["findings"]
    assert finding["subject"] == "tier best_effort" and finding["fix"].endswith("| kubectl apply -f -")


def test_priority_class_values_against_the_tiers(site: Site, doctor):
    site.patch("workloadpriorityclasses", "research", {"value": 200_000})
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-priority-class-order"}
    assert "kubectl patch workloadpriorityclass research --type merge -p '{\"value\": 10000}'" in \
        report["findings"][0]["fix"]


def test_teams_without_a_queue_and_queues_without_a_team(site: Site, doctor):
    more = _write(site.folder / "more.yaml", POLICY, teams={**POLICY["teams"], "robotics": {"share": 1.0}})
    status, report = doctor(policy=more)
    assert status == 1 and _checks(report) == {"kueue-team-without-queue"}
    site.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                 "metadata": {"name": "gpus", "namespace": "ml-infra"}, "spec": {"clusterQueue": "vision"}})
    status, report = doctor()
    assert status == 1 and _checks(report) == {"kueue-queue-without-team"}
    assert report["findings"][0]["subject"] == "namespace ml-infra"


def test_an_inventory_that_differs_from_the_nodes(site: Site, doctor):
    inventory = _write(site.folder / "old.yaml", INVENTORY, nodes=[*INVENTORY["nodes"], {
        "name": "a100-09", "gpu_type": "A100-80GB", "gpus": 8}])
    status, report = doctor("--inventory", str(inventory))
    assert status == 1 and _checks(report) == {"inventory-drift"}
    assert report["findings"][0]["subject"] == "node a100-09"


def test_a_recorded_picture_gives_the_same_report(site: Site, doctor):
    site.create(workload("nlp", "huge", gpus=24))
    saved = site.folder / "picture.json"
    live = doctor("--save-picture", str(saved))
    assert live[0] == 2 and live == doctor("--picture", str(saved))
    again = diagnose_kueue(KueuePicture.from_json(saved.read_text()), load_expectations(site.policy))
    assert [f.to_dict() for f in again.findings] == live[1]["findings"]


def test_a_cluster_without_kueue_is_one_clear_error(tmp_path: Path, monkeypatch, capsys):
    with kube_emulator() as (_, api):  # the emulator serves no v1beta1 Kueue kinds
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", api.configuration.host)))
        assert main(["doctor", "--target", "kueue", "--kueue-api-version", "v1beta1"]) == 2
    assert "is Kueue installed" in capsys.readouterr().err
