"""The constraint grammar (features.constraints) and where job records carry constraints and
checkpoint fields (features.job_conventions, the Kueue and Slurm readers)."""

import pandas as pd
import pytest

from features.constraints import (
    combine_constraints,
    constraint_from_node_affinity,
    constraint_from_node_selector,
    constraint_from_slurm_features,
    normalise_constraints,
)
from features.job_conventions import (
    job_fields_from_comment,
    job_fields_from_kubernetes,
    parse_checkpoint_kind,
)
from features.schema import validate
from features.sources.kueue import workload_record
from features.sources.sacct import read_sacct_text
from features.sources.slurm_fields import slurm_job_fields


@pytest.mark.parametrize("text, canonical", [
    ("region=eu-west; label=sensitive", "label=sensitive;region=eu-west"),
    ("region=us|eu;region=eu|us", "region=eu|us"),
    ("pool=a;;", "pool=a"),
    ("example.com/tier=gold", "example.com/tier=gold"),
    ("", None),
    (None, None),
])
def test_canonical_form(text, canonical):
    assert normalise_constraints(text) == canonical


@pytest.mark.parametrize("text, message", [
    ("region", "'region' is not key=value"),
    ("region=", "names no value"),
    ("re gion=eu", "bad key"),
    ("region=eu west", "bad value"),
])
def test_malformed_constraints_name_the_term(text, message):
    with pytest.raises(ValueError, match=message):
        normalise_constraints(text)


def test_combining_keeps_every_term():
    assert combine_constraints("region=eu", "region=us", None) == "region=eu;region=us"
    assert combine_constraints(None, None) is None


def test_kubernetes_selectors():
    sel = {"topology.kubernetes.io/region": "eu-west", "karpenter.sh/nodepool": "gpu", "sensitive": "true",
           "example.com/tier": "gold", "nvidia.com/gpu.product": "A100"}
    assert constraint_from_node_selector(sel, ignore=["nvidia.com/gpu.product"]) == \
        "example.com/tier=gold;label=sensitive;pool=gpu;region=eu-west"
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]},
                              {"key": "x", "operator": "NotIn", "values": ["c"]}]}]}}}
    assert constraint_from_node_affinity(affinity) == "site=a|b"
    two_terms = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}, {}]}}}
    assert constraint_from_node_affinity(two_terms) is None  # alternatives: Kubernetes' to enforce


@pytest.mark.parametrize("expr, canonical", [
    ("a100&ib", "label=a100;label=ib"),
    ("eu|us", "label=eu|us"),
    ("[rack1*2&rack2*4]", "label=rack1;label=rack2"),
    ("(null)", None),
])
def test_slurm_feature_expressions(expr, canonical):
    assert constraint_from_slurm_features(expr) == canonical


def test_checkpoint_and_residency_pairs():
    assert job_fields_from_comment('precision=bf16 ckpt-kind=criu ckpt-size-gb=1.5T checkpoint-interval=30m '
                                   'data-class=pii constraints="region=eu;pool=a"') == {
        "checkpoint_kind": "system", "checkpoint_size_gb": 1500.0, "checkpoint_interval_s": 1800.0,
        "data_class": "pii", "constraints": "pool=a;region=eu"}
    assert job_fields_from_comment("checkpoint-kind=sometimes") == {}  # a bad value is skipped
    assert job_fields_from_kubernetes([{"predictor/checkpoint-kind": "app"}, {"predictor/checkpoint-kind": "none"}]) \
        == {"checkpoint_kind": "application"}
    with pytest.raises(ValueError, match="application, system, none"):
        parse_checkpoint_kind("maybe")


def test_validate_rejects_malformed_constraints_and_unknown_kinds():
    res = validate(pd.DataFrame({"job_id": ["a", "b", "c"], "submit_ts": [1.0] * 3, "state": ["PENDING"] * 3,
                                 "constraints": ["label=x; region=eu", "region", None],
                                 "checkpoint_kind": [None, None, "sometimes"]}))
    assert res.jobs["constraints"].tolist() == ["label=x;region=eu"]
    assert res.rejects["reject_reason"].tolist() == [
        "malformed constraints: constraint term 'region' is not key=value (e.g. region=eu-west)",
        "unknown checkpoint_kind"]


def test_kueue_reader_takes_residency_labels_only():
    w = {"kind": "Workload", "metadata": {"name": "a", "namespace": "ml", "annotations": {
        "predictor/checkpoint-kind": "criu", "predictor/checkpoint-size-gb": "40", "predictor/data-class": "pii",
        "predictor/constraints": "label=ib"}},
        "spec": {"queueName": "q", "podSets": [{"count": 1, "template": {"spec": {
            "nodeSelector": {"topology.kubernetes.io/region": "eu-west", "kubernetes.io/arch": "amd64",
                             "predictor/gpu-type": "A100-80GB", "predictor/secure": "true"},
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}}]}}
    r = workload_record(w)
    assert r["constraints"] == "label=ib;label=predictor/secure;region=eu-west"
    assert (r["data_class"], r["checkpoint_kind"], r["checkpoint_size_gb"]) == ("pii", "system", 40.0)


def test_sacct_reader_reads_constraints_and_comment_pairs():
    text = ("JobID|User|Account|Partition|Submit|State|Constraints|Comment\n"
            "1|u|t|gpu|2024-01-01T00:00:00|PENDING|eu&ib|ckpt-kind=app checkpoint-interval=600\n"
            "2|u|t|gpu|2024-01-01T00:00:00|PENDING|bad name|\n"
            "3|u|t|gpu|2024-01-01T00:00:00|PENDING||data-class=pii\n")
    jobs = read_sacct_text(text)
    one = jobs.set_index("job_id")
    assert one.loc["1", "constraints"] == "label=eu;label=ib"
    assert one.loc["1", "checkpoint_kind"] == "application" and one.loc["1", "checkpoint_interval_s"] == 600.0
    assert one.loc["3", "data_class"] == "pii" and pd.isna(one.loc["3", "constraints"])
    assert "2" not in one.index  # an unparseable feature expression is rejected, never dropped silently
    fields, reasons = slurm_job_fields(["bad name"], [None])
    assert fields == [{}] and "bad feature name 'bad name'" in reasons[0]
