"""The doctor's checks on pictures built by hand (as a recorded picture would hold them): the branches
the live tests cannot plant on a one-node Slurm or the emulator, the exit-status rule, the history
reader, and that every check has its heading in docs/adapters.md."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from features.errors import InputError
from predictor.adapters.cluster_policy import ClusterPolicy, TeamSpec, TierSpec
from predictor.adapters.doctor import (
    KUEUE_CHECKS,
    SLURM_CHECKS,
    DoctorReport,
    Expectations,
    Finding,
    JobHistory,
    KueuePicture,
    Severity,
    SlurmPicture,
    diagnose_kueue,
    diagnose_slurm,
    load_expectations,
)
from predictor.adapters.doctor.expectations import vocabulary_for
from predictor.adapters.doctor.slurm_picture import (
    GresConf,
    GresConfLine,
    GresEntry,
    SlurmAccount,
    SlurmNode,
    SlurmPartition,
    SlurmPendingJob,
    SlurmQos,
    parse_config,
    parse_gres,
)

ROOT = Path(__file__).resolve().parents[4]
POLICY = ClusterPolicy(tiers=(TierSpec("production", 1.0, 100_000), TierSpec("research", 0.3, 10_000)),
                       teams=(TeamSpec("vision", 2.0), TeamSpec("nlp", 1.0)),
                       weights={"tier": 3.0, "age": 2.0, "fairshare": 1.5}, age_cap_s=86_400.0)
EXPECT = Expectations(policy=POLICY, tier_aliases={"normal": "research"})
CONFIG = {"PriorityType": "priority/multifactor", "PriorityWeightQOS": "30000", "PriorityWeightAge": "20000",
          "PriorityWeightFairShare": "15000", "PriorityWeightJobSize": "0", "PriorityWeightPartition": "0",
          "PriorityWeightAssoc": "0", "PriorityMaxAge": "1-00:00:00", "PriorityDecayHalfLife": "7-00:00:00",
          "SLURM_CONF": "/etc/slurm/slurm.conf"}


def slurm_picture(**changes) -> SlurmPicture:
    """A clean picture for POLICY: one a10 node with Cores= in gres.conf, QoS and accounts as generated."""
    base = SlurmPicture(
        config=CONFIG, nodes=(SlurmNode("gpu-01", "IDLE", ("gpu",), (GresEntry("a10", 4),)),),
        partitions=(SlurmPartition("gpu", "UP", True),),
        qos=(SlurmQos("normal", 0), SlurmQos("production", 1000), SlurmQos("research", 300)),
        accounts=(SlurmAccount("vision", "200"), SlurmAccount("nlp", "100")),
        gres_conf=GresConf("/etc/slurm/gres.conf", True, (
            GresConfLine(1, "Name=gpu Type=a10 File=/dev/nvidia[0-3] Cores=0-15",
                         {"name": "gpu", "type": "a10", "file": "/dev/nvidia[0-3]", "cores": "0-15"}),)))
    return replace(base, **changes)


def _checks(report: DoctorReport) -> set[str]:
    return {f.check for f in report.findings}


def test_the_clean_slurm_picture_gives_nothing():
    report = diagnose_slurm(slurm_picture(), EXPECT)
    assert report.findings == () and report.exit_status == 0
    assert dict(report.checks_skipped) == {"slurm-quota-below-largest-job": "needs jobs (--jobs)",
                                           "inventory-drift": "needs inventory (--inventory)"}


def test_exit_status_is_the_worst_severity():
    warn = Finding("x", Severity.WARNING, "s", "e", "f")
    error = Finding("y", Severity.ERROR, "s", "e", "f")
    assert [DoctorReport("slurm", f, ()).exit_status for f in ((), (warn,), (warn, error))] == [0, 1, 2]


@pytest.mark.parametrize(("changes", "check", "severity"), [
    ({"config": {**CONFIG, "PriorityType": "priority/basic"}}, "slurm-priority-weights-zero", Severity.ERROR),
    ({"config": {**CONFIG, "PriorityWeightAge": "0"}}, "slurm-weights-contradict-policy", Severity.WARNING),
    ({"config": {**CONFIG, "PriorityDecayHalfLife": "14-00:00:00"}}, "slurm-weights-contradict-policy",
     Severity.WARNING),
    ({"config": {**CONFIG, "PriorityWeightAssoc": "500"}}, "slurm-weights-contradict-policy", Severity.WARNING),
    ({"partitions": (SlurmPartition("gpu", "UP", True), SlurmPartition("old", "INACTIVE"))},
     "slurm-partition-down", Severity.WARNING),
    ({"gres_conf": GresConf("/etc/slurm/gres.conf", False)}, "slurm-gres-without-cores", Severity.WARNING),
    ({"accounts": (SlurmAccount("vision", "200", 4), SlurmAccount("nlp", "100")),
      "pending": (SlurmPendingJob("9", "vision", "gpu", "normal", 8, None, "AssocGrpGRES"),)},
     "slurm-quota-too-small", Severity.ERROR),
], ids=["priority-basic", "age-weight-zero", "half-life", "assoc-weight", "inactive-partition", "no-gres-conf",
        "grp-tres"])
def test_slurm_branches(changes, check, severity):
    report = diagnose_slurm(slurm_picture(**changes), EXPECT)
    assert _checks(report) == {check}
    assert {f.severity for f in report.findings} == {severity}
    assert all(f.fix and f.evidence for f in report.findings)


def test_a_pending_job_spelling_a_gres_type_unlike_the_nodes():
    pending = (SlurmPendingJob("5", "nlp", "gpu", "normal", 2, "A10", "BadConstraints"),)
    (finding,) = diagnose_slurm(slurm_picture(pending=pending), EXPECT).findings
    assert (finding.check, finding.severity, finding.subject) == ("slurm-gres-type-unrequested", Severity.ERROR,
                                                                   "request gpu:A10")
    assert finding.fix == "scancel 5 and resubmit with --gres=gpu:a10:N"


def test_a_family_name_asks_for_every_type_of_the_family():
    nodes = (SlurmNode("gpu-01", "IDLE", ("gpu",), (GresEntry("a100", 8),)),)
    for asked, found in (({"A100-80GB": 3}, set()), ({"A10": 3}, {"slurm-gres-type-unrequested"})):
        expect = replace(EXPECT, history=JobHistory(requested_types=asked))
        assert _checks(diagnose_slurm(slurm_picture(nodes=nodes), expect)) == found


def test_autodetected_gpus_need_no_cores():
    lines = (GresConfLine(1, "AutoDetect=nvml", {"autodetect": "nvml"}), GresConfLine(2, "Name=gpu Type=a10", {
        "name": "gpu", "type": "a10"}))
    assert diagnose_slurm(slurm_picture(gres_conf=GresConf("/g", True, lines)), EXPECT).findings == ()
    no_cores = replace(slurm_picture(), gres_conf=GresConf("/g", True, lines[1:]))
    assert _checks(diagnose_slurm(no_cores, EXPECT)) == {"slurm-gres-without-cores"}


def test_slurm_parsers():
    assert parse_gres("gpu:a10:4(S:0-1),gpu:2,shard:8") == (GresEntry("a10", 4), GresEntry(None, 2))
    assert parse_config("Configuration data as of x\nPriorityType            = priority/multifactor\n") == {
        "PriorityType": "priority/multifactor"}
    assert not SlurmNode("n", "IDLE+DRAIN").available and SlurmNode("n", "MIXED").available
    assert SlurmAccount("a", "parent").fairshare_value is None


def test_job_history_reads_the_largest_job_per_team():
    frame = pd.DataFrame({"job_id": ["1", "2", "3", "4"], "team": ["a", "a", "b", None],
                          "num_gpus": [2.0, 3.5, 1.0, 64.0], "gpu_type": ["a10", "NVIDIA-A10", None, "A100-80GB"]})
    history = JobHistory.from_frame(frame, vocabulary_for(None))
    assert {t: (j.job_id, j.gpus) for t, j in history.largest.items()} == {"a": ("2", 4), "b": ("3", 1)}
    assert history.requested_types == {"A10": 2, "A100-80GB": 1}
    with pytest.raises(InputError, match="lacks column"):
        JobHistory.from_frame(frame.drop(columns=["team"]), vocabulary_for(None))


def test_bad_input_files_are_one_clear_error(tmp_path: Path):
    with pytest.raises(InputError, match="--jobs: .* does not exist"):
        load_expectations(jobs=tmp_path / "none.parquet")
    (tmp_path / "jobs.json").write_text("[]")
    with pytest.raises(InputError, match="expected a .parquet or .csv"):
        load_expectations(jobs=tmp_path / "jobs.json")


# -- Kueue -------------------------------------------------------------------------------------

def _node(name: str, product: str | None, gpus: int, **labels: str) -> dict:
    meta_labels = {**labels, **({"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)} if product else {})}
    return {"metadata": {"name": name, "labels": meta_labels}, "status": {"capacity": {"nvidia.com/gpu": str(gpus)}}}


def _cq(name: str, flavors: dict[str, dict], cohort: str | None = "all", weight: str | None = None) -> dict:
    spec: dict = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", **q}]} for f, q in flavors.items()]}]}
    if cohort:
        spec["cohortName"] = cohort
    if weight:
        spec["fairSharing"] = {"weight": weight}
    return {"metadata": {"name": name}, "spec": spec}


def kueue_picture(**kinds) -> KueuePicture:
    objects = {
        "Node": (_node("a1", "NVIDIA-A100-SXM4-80GB", 8, **{"predictor/gpu-type": "A100-80GB"}),
                 _node("l1", "NVIDIA-L40S", 4, **{"predictor/gpu-type": "L40S"})),
        "ResourceFlavor": ({"metadata": {"name": "a100-80gb"}, "spec": {"nodeLabels": {"predictor/gpu-type": "A100-80GB"}}},
                           {"metadata": {"name": "l40s"}, "spec": {"nodeLabels": {"predictor/gpu-type": "L40S"}}}),
        "ClusterQueue": (_cq("vision", {"a100-80gb": {"nominalQuota": 5}, "l40s": {"nominalQuota": 3}}, weight="2"),
                         _cq("nlp", {"a100-80gb": {"nominalQuota": 3}, "l40s": {"nominalQuota": 1}}, weight="1")),
        "LocalQueue": ({"metadata": {"name": "gpus", "namespace": "vision"}, "spec": {"clusterQueue": "vision"}},
                       {"metadata": {"name": "gpus", "namespace": "nlp"}, "spec": {"clusterQueue": "nlp"}}),
        "WorkloadPriorityClass": ({"metadata": {"name": "production"}, "value": 100_000},
                                  {"metadata": {"name": "research"}, "value": 10_000}),
    }
    objects.update(kinds)
    return KueuePicture(objects=objects)


def test_the_clean_kueue_picture_gives_nothing_and_survives_recording():
    picture = kueue_picture()
    assert diagnose_kueue(picture, EXPECT).findings == ()
    assert KueuePicture.from_json(picture.to_json()) == picture


def test_admissible_gpus_follow_borrowing_and_lending_limits():
    queues = (_cq("vision", {"a100-80gb": {"nominalQuota": 5, "borrowingLimit": 1}}),
              _cq("nlp", {"a100-80gb": {"nominalQuota": 3, "lendingLimit": 2}}),
              _cq("solo", {"a100-80gb": {"nominalQuota": 2}}, cohort=None))
    picture = kueue_picture(ClusterQueue=queues)
    assert picture.admissible("vision") == {"a100-80gb": 6.0}  # 5 + min(borrowingLimit 1, nlp lends 2)
    assert picture.admissible("nlp") == {"a100-80gb": 8.0}  # 3 + all of vision's 5
    assert picture.admissible("solo") == {"a100-80gb": 2.0}  # no cohort: nothing to borrow


def test_a_flavor_without_node_labels_lands_anywhere():
    flavors = ({"metadata": {"name": "a100-80gb"}, "spec": {}},
               {"metadata": {"name": "l40s"}, "spec": {"nodeLabels": {"predictor/gpu-type": "L40S"}}})
    (finding,) = diagnose_kueue(kueue_picture(ResourceFlavor=flavors), EXPECT).findings
    assert (finding.check, finding.subject) == ("kueue-flavor-wrong-gpu", "ResourceFlavor a100-80gb")
    assert finding.fix.startswith("kubectl patch resourceflavor a100-80gb --type merge -p")


def test_a_flavor_with_quota_but_no_nodes_is_an_error():
    flavors = kueue_picture().of("ResourceFlavor") + (
        {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"predictor/gpu-type": "H100-80GB"}}},)
    queues = (_cq("vision", {"a100-80gb": {"nominalQuota": 5}, "l40s": {"nominalQuota": 3}, "h100": {"nominalQuota": 8}},
                  weight="2"),) + kueue_picture().of("ClusterQueue")[1:]
    (finding,) = diagnose_kueue(kueue_picture(ResourceFlavor=flavors, ClusterQueue=queues), EXPECT).findings
    assert (finding.check, finding.severity) == ("kueue-flavor-without-nodes", Severity.ERROR)
    assert "GPU quota in it: vision (8)" in finding.evidence


def test_priority_classes_out_of_order_are_recreated_when_immutable():
    classes = ({"metadata": {"name": "production"}, "value": 5},)
    wpcs = ({"metadata": {"name": "research"}, "value": 10_000},)
    (finding,) = diagnose_kueue(kueue_picture(PriorityClass=classes, WorkloadPriorityClass=wpcs), EXPECT).findings
    assert finding.check == "kueue-priority-class-order"
    assert "kubectl delete priorityclass production && kubectl create priorityclass production --value=100000" \
        in finding.fix


def test_every_check_has_its_heading_in_the_docs():
    text = (ROOT / "docs" / "adapters.md").read_text()
    headings = {re.sub(r"[`*]", "", m).strip() for m in re.findall(r"^#{2,6} (.+)$", text, flags=re.M)}
    ids = {c.id for c in SLURM_CHECKS + KUEUE_CHECKS}
    assert ids <= headings, sorted(ids - headings)
    assert "Doctor" in headings
