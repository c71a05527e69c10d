"""Kueue manifests from the policy and the inventory; every object validated against the real CRDs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.errors import InputError
from predictor.adapters.cluster_policy import ClusterPolicy, TeamSpec, TierSpec, load_cluster_policy
from predictor.adapters.kueue.manifests import (
    KueueNaming,
    all_manifests,
    apportion,
    cluster_queues,
    node_label_commands,
)
from predictor.capacity.inventory import Inventory, Node
from predictor.capacity.inventory_sources import load_inventory

TEAMS = (TeamSpec("vision", 2.0), TeamSpec("nlp_team", 1.0, nominal_gpus=8, borrowing_limit_gpus=4),
         TeamSpec("research", 1.0))
EXAMPLE_INVENTORY = "data/inventory/example-cluster.yaml"
VALIDATED = {"count": 0}


def _policy(**kw) -> ClusterPolicy:
    return dataclasses.replace(load_cluster_policy(None), teams=TEAMS, **kw)


def _flat_inventory(**node_kw) -> Inventory:
    return Inventory(nodes=tuple(Node(f"gpu-{i}", "A100-80GB" if i < 3 else "H100-80GB", 8, **node_kw) for i in range(5)))


CASES = {
    "example-cluster": lambda: (_policy(), load_inventory(EXAMPLE_INVENTORY)),
    "no-racks-no-cpus": lambda: (_policy(), _flat_inventory()),
    "strict-no-preemption-no-borrowing": lambda: (
        _policy(strict_fifo=True, preemption_enabled=False, borrowing=False), _flat_inventory(rack="r1")),
    "default-policy-tiers-only-preemptors": lambda: (
        dataclasses.replace(_policy(), tiers=(TierSpec("prod", 1.0, 1000), TierSpec("low", 0.0, 0))), _flat_inventory()),
}


@pytest.mark.parametrize("api_version", ["v1beta2", "v1beta1"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_validates_against_the_crds(crds, case, api_version):
    policy, inventory = CASES[case]()
    objs = all_manifests(policy, inventory, KueueNaming(api_version=api_version))
    assert {o["kind"] for o in objs} >= {"WorkloadPriorityClass", "ResourceFlavor", "ClusterQueue", "LocalQueue"}
    VALIDATED["count"] += crds.validate_all(objs)


def test_quotas_never_exceed_a_flavors_capacity():
    objs = cluster_queues(_policy(), load_inventory(EXAMPLE_INVENTORY))
    totals: dict[str, int] = {}
    for q in objs:
        for flavor in q["spec"]["resourceGroups"][0]["flavors"]:
            totals[flavor["name"]] = totals.get(flavor["name"], 0) + flavor["resources"][0]["nominalQuota"]
    assert totals == {"a100-80gb": 32, "a10": 16, "l40s": 16}


def test_cluster_queue_for_a_team_with_an_explicit_quota():
    queues = {q["metadata"]["name"]: q["spec"] for q in cluster_queues(_policy(), load_inventory(EXAMPLE_INVENTORY))}
    nlp = queues["nlp-team"]
    assert nlp["cohortName"] == "gpu-cluster" and nlp["fairSharing"] == {"weight": "1"}
    assert nlp["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "nlp-team"}}
    flavors = {f["name"]: f["resources"] for f in nlp["resourceGroups"][0]["flavors"]}
    assert sum(r[0]["nominalQuota"] for r in flavors.values()) == 8  # 8 GPUs over three flavors
    assert flavors["a100-80gb"][0] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 2}
    assert flavors["a100-80gb"][1] == {"name": "cpu", "nominalQuota": "64", "borrowingLimit": "32"}
    assert nlp["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority", "maxPriorityThreshold": 10_000}
    assert queues["vision"]["fairSharing"] == {"weight": "2"}


def test_v1beta1_uses_cohort_not_cohort_name():
    q = cluster_queues(_policy(), _flat_inventory(), KueueNaming(api_version="v1beta1"))[0]
    assert q["apiVersion"] == "kueue.x-k8s.io/v1beta1" and q["spec"]["cohort"] == "gpu-cluster"


def test_without_host_resources_only_gpus_are_covered():
    q = cluster_queues(_policy(), _flat_inventory())[0]
    assert q["spec"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("policy", "inventory", "message"),
    [
        (dataclasses.replace(load_cluster_policy(None), teams=()), _flat_inventory(), "lists no teams"),
        (_policy(), Inventory(nodes=(Node("cpu-1", None, 0),)), "no GPUs"),
        (dataclasses.replace(_policy(), teams=(TeamSpec("a", 1.0, nominal_gpus=100),)), _flat_inventory(), "more than"),
    ],
)
def test_bad_inputs_are_input_errors(policy, inventory, message):
    with pytest.raises(InputError, match=message):
        cluster_queues(policy, inventory)


def test_node_labels_match_flavors_and_topology():
    cmds = node_label_commands(load_inventory(EXAMPLE_INVENTORY))
    assert cmds[0] == ["kubectl", "label", "node", "dgx-00", "--overwrite", "predictor/gpu-type=A100-80GB",
                       "predictor/rack=rack-a", "predictor/block=pod-1"]


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.01, 100), min_size=1), st.integers(0, 500))
@settings(max_examples=200)
def test_apportion_sums_exactly_and_stays_within_one_of_exact(weights, total):
    out = apportion(weights, total)
    assert sum(out.values()) == total
    norm = sum(weights.values())
    assert all(abs(out[k] - total * w / norm) < 1 for k, w in weights.items())


def test_report_objects_validated():
    print(f"\nKueue objects validated against the CRDs in this module: {VALIDATED['count']}")
