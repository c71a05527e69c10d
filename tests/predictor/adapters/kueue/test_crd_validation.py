"""The CRD schema translation catches what the API server's structural validation would."""

import pytest

from predictor.adapters.kueue.crd_validation import CrdSchemas, ValidationFailure
from tests.predictor.adapters.kueue_objects import workload

WPC = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "prod"},
       "value": 100, "description": "production"}


def _cq(**spec):
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a"},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": spec.pop("quota", 8)}]}]}],
                     **spec}}


def test_all_kueue_kinds_load(crds):
    assert set(crds.kinds) >= {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology", "Workload",
                               "WorkloadPriorityClass", "Cohort", "AdmissionCheck"}
    # every create-time CEL rule compiles and is checked; only transition rules (oldSelf) are skipped
    assert crds.rules_evaluated["ClusterQueue"] == 4 and crds.rules_evaluated["Workload"] >= 16
    assert crds.rules_skipped["ClusterQueue"] == 0


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        ({**WPC, "value": 2**31}, "value: 2147483648 is greater than the maximum"),
        ({**WPC, "descripton": "typo"}, "'descripton' was unexpected"),
        ({**WPC, "metadata": {"name": "Prod_Tier"}}, "metadata.name: 'Prod_Tier' does not match"),
        ({**WPC, "apiVersion": "kueue.x-k8s.io/v9"}, "no CRD schema"),
        ({**WPC, "metadata": {"name": "prod", "namespace": "x"}}, "cluster-scoped"),
        (_cq(quota="eight"), "nominalQuota: 'eight' does not match"),
        (_cq(quota=True), "nominalQuota"),
        (_cq(queueingStrategy="Fastest"), "queueingStrategy: 'Fastest' is not one of"),
        (_cq(cohort="old-field"), "'cohort' was unexpected"),  # v1beta1 name in a v1beta2 object
        ({**workload("ns", "w"), "metadata": {"name": "w"}}, "metadata.namespace: required"),
    ],
    ids=["int32", "unknown-field", "dns-name", "version", "namespace-on-cluster-kind", "quantity", "bool-quantity",
         "enum", "renamed-field", "namespace-missing"],
)
def test_invalid_objects_are_caught(crds, obj, problem):
    with pytest.raises(ValidationFailure) as info:
        crds.validate(obj)
    assert any(problem in p for p in info.value.problems), info.value.problems


@pytest.mark.parametrize("quota", [8, "8", "500m", "1.5", "64Gi"])
def test_int_or_string_quantities_pass(crds, quota):
    crds.validate(_cq(quota=quota))


def test_test_workloads_are_valid(crds):
    crds.validate(workload("team-a", "job-1", admitted=True, pods=4))


def test_empty_folder_is_an_input_error(tmp_path):
    from features.errors import InputError

    with pytest.raises(InputError, match="no CustomResourceDefinition"):
        CrdSchemas.from_folder(tmp_path)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"cohortName": None}, "borrowingLimit must be nil when cohort is empty"),
        ({"preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}},
         "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"),
        ({"covered": ["nvidia.com/gpu", "cpu"]}, "flavors must have the same number of resources"),
    ],
    ids=["borrowing-without-cohort", "preemption-combination", "flavor-resources"],
)
def test_cel_rules_are_enforced(crds, spec, message):
    obj = _cq(cohortName="gpus")
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 2
    if "covered" in spec:
        obj["spec"]["resourceGroups"][0]["coveredResources"] = spec.pop("covered")
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key)
        else:
            obj["spec"][key] = value
    with pytest.raises(ValidationFailure) as info:
        crds.validate(obj)
    assert any(message in p for p in info.value.problems), info.value.problems


def test_topology_levels_must_end_with_hostname(crds):
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
           "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "predictor/rack"}]}}
    assert any("hostname" in p.lower() or "rule" in p for p in crds.problems(obj))
    obj["spec"]["levels"].reverse()
    assert crds.problems(obj) == []
