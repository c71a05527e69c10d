"""Where memory descriptors live in job records: key=value comments, job names, Kubernetes labels and
annotations; read end to end through the real Slurm and Kueue readers and ``features.ingest``."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from features.ingest import ingest, load_jobs
from features.memory_conventions import (
    descriptors_from_comment,
    descriptors_from_job_name,
    descriptors_from_kubernetes,
    vocab_from_model_name,
)


def test_comment_pairs_with_aliases() -> None:
    found = descriptors_from_comment("precision=bf16-mixed quant=nf4, strategy=zero3; ckpt=on lora_r=16 tp=2 "
                                     "pp=1 cp=2 params=7b method=qlora loss=liger vocab=32000 bogus=1 rank=x")
    assert found == {"precision": "bf16", "precision_mode": "bf16-mixed", "quantization": "nf4",
                     "parallel_strategy": "zero3", "grad_checkpointing": "full", "lora_rank": 16.0,
                     "tensor_parallel_size": 2.0, "pipeline_parallel_size": 1.0, "context_parallel_size": 2.0,
                     "model_params": 7e9, "finetune_method": "qlora", "loss_implementation": "fused",
                     "vocab_size": 32000.0}
    assert descriptors_from_comment("zero=3") == {"parallel_strategy": "zero3"}
    assert descriptors_from_comment("precision=bf16") == {"precision": "bf16"}  # the mode stays unknown
    assert descriptors_from_comment("nothing to see") == {} and descriptors_from_comment(None) == {}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama3-8b-qlora-r16-bf16true-z3-gc", {"model_params": 8e9, "finetune_method": "qlora", "lora_rank": 16.0,
                                               "precision_mode": "bf16-true", "precision": "bf16",
                                               "parallel_strategy": "zero3", "grad_checkpointing": "full",
                                               "vocab_size": 128_256.0}),
        ("sft_mistral-7b_fsdp_tp2_nogc", {"model_params": 7e9, "parallel_strategy": "fsdp",
                                          "tensor_parallel_size": 2.0, "grad_checkpointing": "off",
                                          "vocab_size": 32_000.0}),
        ("resnet50-r16", {}),  # a rank token only counts beside lora/qlora
        ("run-2024-05-01", {}),
    ],
)
def test_job_name_tokens(name: str, expected: dict) -> None:
    assert descriptors_from_job_name(name) == expected


def test_model_family_vocabularies() -> None:
    assert vocab_from_model_name("Qwen/Qwen2.5-7B-Instruct") == 151_936.0
    assert vocab_from_model_name("meta-llama/Llama-3.1-8B") == 128_256.0
    assert vocab_from_model_name("meta-llama/Llama-2-7b-hf") == 32_000.0
    assert vocab_from_model_name("my-own-model") is None


def test_kubernetes_maps_earlier_win() -> None:
    found = descriptors_from_kubernetes([
        {"predictor/precision": "bf16-true", "predictor/memory": "quant=nf4 lora_r=8 precision=fp32", "app": "x"},
        None,
        {"predictor/precision": "fp32", "predictor/parallel-strategy": "FULL_SHARD", "predictor/tp": "4"},
    ])
    assert found == {"precision": "bf16", "precision_mode": "bf16-true", "quantization": "nf4", "lora_rank": 8.0,
                     "parallel_strategy": "fsdp", "tensor_parallel_size": 4.0}


def test_sacct_reads_comment_then_job_name(tmp_path) -> None:
    log = tmp_path / "sacct.txt"
    log.write_text(
        "JobID|JobName|User|Submit|Start|End|State|Comment|ReqTRES\n"
        "1|llama3-8b-qlora-r16|alice|2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-01T01:00:00|COMPLETED|"
        "precision=bf16-true strategy=zero3 r=32|cpu=4,gres/gpu=2\n"
        "1.batch|batch||2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-01T01:00:00|COMPLETED||\n"
        "2|train|bob|2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-01T01:00:00|COMPLETED||cpu=4\n")
    out = tmp_path / "jobs.parquet"
    ingest("sacct", [log], out)
    jobs = load_jobs(out).set_index("job_id")
    assert jobs.loc["1", "precision_mode"] == "bf16-true" and jobs.loc["1", "parallel_strategy"] == "zero3"
    assert jobs.loc["1", "lora_rank"] == 32.0  # the comment wins over the name's r16
    assert jobs.loc["1", "finetune_method"] == "qlora" and jobs.loc["1", "model_params"] == 8e9
    assert pd.isna(jobs.loc["2", "precision_mode"]) and pd.isna(jobs.loc["2", "lora_rank"])


def test_kueue_reads_workload_and_pod_template_annotations(tmp_path) -> None:
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "ft", "namespace": "team-a", "creationTimestamp": "2024-05-01T10:00:00Z",
                     "annotations": {"predictor/precision": "bf16-mixed", "predictor/memory": "quant=nf4 lora_r=8"}},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {
            "metadata": {"labels": {"predictor/parallel-strategy": "fsdp", "predictor/precision": "fp32"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}}]},
        "status": {"conditions": [
            {"type": "Admitted", "status": "True", "lastTransitionTime": "2024-05-01T10:01:00Z"},
            {"type": "Finished", "status": "True", "reason": "Succeeded", "lastTransitionTime": "2024-05-01T11:00:00Z"}]},
    }
    path = tmp_path / "workloads.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [workload]}))
    out = tmp_path / "jobs.parquet"
    ingest("kueue", [path], out)
    row = load_jobs(out).set_index("job_id").loc["team-a/ft"]
    assert (row["precision_mode"], row["quantization"], row["lora_rank"], row["parallel_strategy"]) == (
        "bf16-mixed", "nf4", 8.0, "fsdp")
