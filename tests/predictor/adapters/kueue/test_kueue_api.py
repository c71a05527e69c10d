"""The Kueue adapter's API call flow against a Kubernetes API emulator (kmock); every Kueue object the
emulator ends up holding is checked against the real CRD schemas (the emulator validates nothing)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from predictor.adapters.cluster_policy import ClusterPolicy, TeamSpec, TierSpec
from predictor.adapters.kueue.adapter import PREFERRED_TOPOLOGY, QUEUE_LABEL, REQUIRED_TOPOLOGY, KueueAdapter
from predictor.adapters.kueue.manifests import all_manifests
from predictor.adapters.retry import RetryPolicy
from predictor.capacity.inventory import Inventory, Node
from predictor.policy.decision import Decision, EvictionPlan, Placement, Priority, Victim
from tests.predictor.adapters.kube_emulator import kube_emulator
from tests.predictor.adapters.kueue_objects import batch_job, workload

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = 1_795_990_000.0


@pytest.fixture
def cluster():
    with kube_emulator() as (emulator, api):
        custom, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)

        def add_workload(obj):
            custom.create_namespaced_custom_object(GROUP, VERSION, obj["metadata"]["namespace"], "workloads", obj,
                                                   _preload_content=False)

        def add_job(obj):
            batch.create_namespaced_job(obj["metadata"]["namespace"], obj, _preload_content=False)

        add_workload(workload("vision", "job-a", priority=10))
        add_job(batch_job("vision", "job-a"))
        add_workload(workload("vision", "job-b", priority=20, admitted=True))
        add_workload(workload("nlp", "job-c", priority=5, admitted=True, gpus=8))
        yield api, custom, batch


@pytest.fixture
def adapter(cluster):
    api, _, _ = cluster
    return KueueAdapter(api, retry=RetryPolicy(max_attempts=2, base_delay_s=0.01), clock=lambda: NOW, move_queues=True)


def _wl(custom, ns, name):
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, "workloads", name)


def _decision(job_id, priority, **kw):
    return Decision(job_id=job_id, priority=Priority(priority), factors=(), action=kw.pop("action", "wait"),
                    tier=kw.pop("tier", "research"), **kw)


def test_pending_and_running_workloads_as_rows(adapter):
    pending = adapter.pending_jobs().set_index("job_id")
    running = adapter.running_jobs().set_index("job_id")
    assert list(pending.index) == ["vision/job-a"] and sorted(running.index) == ["nlp/job-c", "vision/job-b"]
    a = pending.loc["vision/job-a"]
    assert (a["team"], a["queue"], a["num_gpus"], a["cpus"], a["mem_mib"], a["state"]) == (
        "vision", "gpus", 2, 8, 65536, "PENDING")
    assert running.loc["nlp/job-c", "num_gpus"] == 8 and running.loc["nlp/job-c", "start_ts"] > 0


def test_priority_is_patched_once(adapter, cluster, crds):
    _, custom, _ = cluster
    d = _decision("vision/job-a", 200_000)
    result = adapter.apply(d)
    assert result.ok and [op.kind for op in result.done] == ["set_priority"]
    stored = _wl(custom, "vision", "job-a")
    assert stored["spec"]["priority"] == d.kueue_priority == 100_000
    crds.validate(stored)
    assert not adapter.apply(d).changed  # idempotent
    assert [op.kind for op in adapter.apply(_decision("vision/job-b", 999_999)).done] == []  # admitted: untouched


def test_queue_flavor_and_topology_land_on_the_workload_and_its_job(adapter, cluster, crds):
    _, custom, batch = cluster
    d = _decision("vision/job-a", 40, action="start", queue="Vision_Urgent", flavor="H100-80GB",
                  placement=Placement("H100-80GB", (("n1", 4), ("n2", 4)), "cross_node_same_rack"))
    result = adapter.apply(d)
    assert result.ok, result.error
    assert [op.kind for op in result.done] == ["set_priority", "set_queue", "patch_job"]
    crds.validate(_wl(custom, "vision", "job-a"))
    assert _wl(custom, "vision", "job-a")["spec"]["queueName"] == "vision-urgent"
    job = json.loads(batch.read_namespaced_job("job-a", "vision", _preload_content=False).data)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "vision-urgent"
    tpl = job["spec"]["template"]
    assert tpl["spec"]["nodeSelector"] == {"predictor/gpu-type": "H100-80GB"}
    assert tpl["metadata"]["annotations"] == {REQUIRED_TOPOLOGY: "predictor/rack"}
    assert not adapter.apply(d).changed

    across = _decision("vision/job-a", 40, action="start", queue="vision-urgent", flavor="H100-80GB",
                       placement=Placement("H100-80GB", (("n1", 8), ("n9", 8)), "cross_rack"))
    assert [op.kind for op in adapter.apply(across).done] == ["patch_job"]
    job = json.loads(batch.read_namespaced_job("job-a", "vision", _preload_content=False).data)
    assert job["spec"]["template"]["metadata"]["annotations"].get(PREFERRED_TOPOLOGY) == "predictor/block"


def test_eviction_deactivates_then_requeues_after_grace(cluster, crds):
    api, custom, _ = cluster
    clock = [NOW]
    adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=1), clock=lambda: clock[0])
    plan = EvictionPlan("vision/job-a", (Victim("nlp/job-c", "nlp", 5, (("n1", 8),), 600.0, 1.3),), grace_s=30.0)
    d = _decision("vision/job-a", 20, action="preempt", eviction=plan)  # kueue priority 10: unchanged
    first = adapter.apply(d)
    assert [op.kind for op in first.done] == ["deactivate"] and [op.kind for op in first.deferred] == ["requeue"]
    victim = _wl(custom, "nlp", "job-c")
    assert victim["spec"]["active"] is False
    assert victim["metadata"]["annotations"]["predictor/evicted-for"] == "vision/job-a"
    crds.validate(victim)
    clock[0] = NOW + 10
    assert not adapter.apply(d).changed  # still in grace
    clock[0] = NOW + 31
    assert [op.kind for op in adapter.apply(d).done] == ["requeue"]
    assert _wl(custom, "nlp", "job-c")["spec"]["active"] is True
    clock[0] = NOW + 60
    assert not adapter.apply(d).changed  # requeued once


def test_dry_run_changes_nothing(adapter, cluster):
    _, custom, _ = cluster
    result = adapter.apply(_decision("vision/job-a", 4_000), dry_run=True)
    assert result.dry_run and [op.kind for op in result.done] == ["set_priority"]
    assert result.done[0].render() == ('PATCH workloads.kueue.x-k8s.io vision/job-a {"spec":{"priority":2000}}')
    assert _wl(custom, "vision", "job-a")["spec"]["priority"] == 10


def test_missing_workload_is_permanent(adapter):
    result = adapter.apply(_decision("vision/nope", 5))
    assert not result.ok and not result.retryable and "not found" in result.error


def test_unreachable_api_server_is_transient():
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    sleeps = []
    adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, sleep=sleeps.append))
    result = adapter.apply(_decision("vision/job-a", 5))
    assert not result.ok and result.retryable and result.attempts == 3 and len(sleeps) == 2


def test_configuration_objects_are_created_then_kept_in_line(cluster, crds):
    api, custom, _ = cluster
    adapter = KueueAdapter(api, retry=RetryPolicy(max_attempts=1))
    policy = ClusterPolicy(tiers=(TierSpec("production", 1.0, 100_000, ("best_effort",)), TierSpec("best_effort", 0.0, 0)),
                           teams=(TeamSpec("vision", 2.0), TeamSpec("nlp", 1.0)))
    inventory = Inventory(nodes=tuple(Node(f"n{i}", "A100-80GB", 8, rack=f"r{i // 2}", cpus=128, mem_mib=1 << 20)
                                      for i in range(4)))
    objs = all_manifests(policy, inventory)
    created = adapter.ensure_objects(objs)
    assert created.ok and [op.kind for op in created.done] == ["create"] * len(objs)
    assert not adapter.ensure_objects(objs).changed
    stored = [custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", n) for n in ("vision", "nlp")]
    assert [q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] for q in stored] == [21, 11]  # 32 GPUs split 2:1, largest remainder
    for obj in stored:
        crds.validate(obj)
    policy2 = ClusterPolicy(tiers=policy.tiers, teams=(TeamSpec("vision", 1.0), TeamSpec("nlp", 1.0)))
    updated = adapter.ensure_objects(all_manifests(policy2, inventory))
    assert sorted(op.description.split(":")[0] for op in updated.done) == ["update ClusterQueue nlp",
                                                                          "update ClusterQueue vision"]


def test_a_constraint_lands_on_the_job_as_node_selection(adapter, cluster):
    """Residency (docs/residency.md): rule *constraint to node labels* on the suspended Job's template."""
    _, _, batch = cluster
    d = _decision("vision/job-a", 40, action="start", flavor="H100-80GB",
                  constraint="label=sensitive;partition=gpu;pool=secure;region=eu-central|eu-west")
    result = adapter.apply(d)
    assert result.ok, result.error
    op = [op for op in result.done if op.kind == "patch_job"][0]
    assert "no Kubernetes form for partition=gpu" in op.description
    tpl = json.loads(batch.read_namespaced_job("job-a", "vision", _preload_content=False).data)["spec"]["template"]
    assert tpl["spec"]["nodeSelector"] == {"predictor/gpu-type": "H100-80GB", "sensitive": "true",
                                           "predictor/pool": "secure"}
    terms = tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/region", "operator": "In",
                                            "values": ["eu-central", "eu-west"]}]}]
    assert not adapter.apply(d).changed  # idempotent


def test_node_label_commands_carry_residency_attributes():
    """Residency attributes after the flavor and topology labels (the example-regions inventory's DGX nodes)."""
    from predictor.adapters.kueue.manifests import node_label_commands
    from predictor.capacity.inventory_sources import load_inventory
    inv = Inventory(nodes=(Node("n1", "A100-80GB", 8, region="eu-west", site="fra1", pool="secure",
                                features=("sensitive",), labels=(("example.com/tier", "gold"),)),))
    cmd = node_label_commands(inv)[0]
    assert {"topology.kubernetes.io/region=eu-west", "topology.kubernetes.io/zone=fra1", "predictor/pool=secure",
            "sensitive=true", "example.com/tier=gold"} <= set(cmd)
    assert node_label_commands(load_inventory("data/inventory/example-regions.yaml"))[0] == [
        "kubectl", "label", "node", "dgx-00", "--overwrite", "predictor/gpu-type=A100-80GB", "predictor/rack=rack-a",
        "predictor/block=pod-1", "topology.kubernetes.io/region=eu-west", "topology.kubernetes.io/zone=fra1",
        "predictor/pool=dgx", "sensitive=true"]
