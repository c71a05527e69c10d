"""Spellings of the memory descriptors (Lightning's, Hugging Face's, DeepSpeed's, FSDP's) and the
generic CSV reader that reads them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.memory_descriptors import (
    PARALLEL_STRATEGIES,
    PRECISION_MODES,
    normalise_descriptors,
    parse_grad_checkpointing,
    parse_image_size,
    parse_loss_implementation,
    parse_model_params,
    parse_parallel_strategy,
    parse_positive_int,
    parse_precision,
    parse_quantization,
)
from features.schema import validate
from features.sources import read_chunks


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Lightning's Trainer(precision=...)
        ("bf16-mixed", ("bf16", "bf16-mixed")), ("16-mixed", ("fp16", "fp16-mixed")),
        ("bf16-true", ("bf16", "bf16-true")), ("16-true", ("fp16", "fp16-true")), ("32-true", ("fp32", "fp32")),
        ("32", ("fp32", "fp32")), ("64-true", ("fp32", "fp32")), ("transformer-engine", ("fp8", "fp8")),
        # Hugging Face TrainingArguments / from_pretrained / accelerate
        ("bf16=True", ("bf16", "bf16-mixed")), ("--fp16", ("fp16", "fp16-mixed")),
        ("torch_dtype=torch.bfloat16", ("bf16", "bf16-true")), ("mixed_precision=fp8", ("fp8", "fp8")),
        ("mixed_precision=no", ("fp32", "fp32")),
        # bare types: the 16-bit type is known, its mode is not
        ("bf16", ("bf16", None)), ("bfloat16", ("bf16", None)), ("FP16", ("fp16", None)), ("tf32", ("tf32", "fp32")),
        (None, (None, None)), ("", (None, None)),
    ],
)
def test_precision_spellings(text, expected) -> None:
    assert parse_precision(text) == expected


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (parse_quantization, "load_in_4bit", "nf4"), (parse_quantization, "bnb-nf4", "nf4"),
        (parse_quantization, "NVFP4", "fp4"), (parse_quantization, "GPTQ", "int4"), (parse_quantization, "awq", "int4"),
        (parse_quantization, "load_in_8bit", "int8"), (parse_quantization, "LLM.int8", "int8"),
        (parse_quantization, "none", "none"), (parse_quantization, "fp8", "fp8"),
        (parse_parallel_strategy, "FULL_SHARD", "fsdp"), (parse_parallel_strategy, "SHARD_GRAD_OP", "zero2"),
        (parse_parallel_strategy, "NO_SHARD", "ddp"), (parse_parallel_strategy, "HYBRID_SHARD", "fsdp"),
        (parse_parallel_strategy, "deepspeed_stage_3_offload", "zero3-offload"),
        (parse_parallel_strategy, "deepspeed_stage_1", "zero1"), (parse_parallel_strategy, "deepspeed", "zero2"),
        (parse_parallel_strategy, "ddp_find_unused_parameters_true", "ddp"), (parse_parallel_strategy, "3", "zero3"),
        (parse_parallel_strategy, "full_shard auto_wrap offload", "fsdp-offload"),
        (parse_grad_checkpointing, "True", "full"), (parse_grad_checkpointing, True, "full"),
        (parse_grad_checkpointing, "selective", "selective"), (parse_grad_checkpointing, "0", "off"),
        (parse_grad_checkpointing, "activation_offloading", "full"),
        (parse_loss_implementation, "liger", "fused"), (parse_loss_implementation, "CEWithChunkedOutputLoss", "chunked"),
        (parse_positive_int, "r=16", 16.0), (parse_positive_int, "tp8", 8.0), (parse_positive_int, 4, 4.0),
        (parse_positive_int, "lora_r:32", 32.0), (parse_image_size, "224x224", 224.0), (parse_image_size, "512px", 512.0),
        (parse_model_params, "7b", 7e9), (parse_model_params, "350M", 350e6), (parse_model_params, "1.5e9", 1.5e9),
    ],
)
def test_descriptor_spellings(parse, text, expected) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("parse", "text"),
    [(parse_precision, "fp64x"), (parse_quantization, "3bit"), (parse_parallel_strategy, "ring"),
     (parse_grad_checkpointing, "sometimes"), (parse_positive_int, "0"), (parse_positive_int, "2.5"),
     (parse_positive_int, "-1"), (parse_model_params, "huge")],
)
def test_unknown_spellings_raise_naming_the_value(parse, text) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        parse(text)


def test_every_canonical_value_parses_to_itself() -> None:
    assert all(parse_precision(m)[1] == m for m in PRECISION_MODES)
    assert all(parse_parallel_strategy(s) == s for s in PARALLEL_STRATEGIES)


def test_normalise_rewrites_spellings_and_reports_the_bad_ones() -> None:
    frame = pd.DataFrame({
        "precision": ["bf16-mixed", "bf16", "fp32", "quarter"],
        "precision_mode": [None, "bf16=True", None, None],
        "parallel_strategy": ["FULL_SHARD", "ring", None, "ddp"],
        "lora_rank": ["r=16", "8", None, "many"],
    })
    out, checks = normalise_descriptors(frame)
    assert out["precision"].tolist() == ["bf16", "bf16", "fp32", "quarter"]  # the bad one kept as written
    assert out["precision_mode"].tolist() == ["bf16-mixed", "bf16-mixed", None, None]  # no mode made up for fp32
    assert out["parallel_strategy"].tolist() == ["fsdp", "ring", None, "ddp"]
    assert np.allclose(out["lora_rank"], [16.0, 8.0, np.nan, np.nan], equal_nan=True)
    reasons = {reason: np.flatnonzero(mask).tolist() for mask, reason in checks if mask.any()}
    assert reasons == {"unknown precision": [3], "unknown parallel_strategy": [1], "unparseable lora_rank": [3]}


def test_csv_reader_accepts_lightning_and_hugging_face_names(tmp_path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(
        "job_id,submit_ts,state,model_params,precision,precision_mode,quantization,parallel_strategy,"
        "tensor_parallel_size,grad_checkpointing,lora_rank\n"
        "a,1,COMPLETED,7e9,bf16-mixed,,,deepspeed_stage_2,,true,\n"
        "b,2,COMPLETED,7e9,,torch_dtype=bfloat16,load_in_4bit,FULL_SHARD,2,selective,r=16\n"
        "c,3,COMPLETED,7e9,fp32,,,,tp4,0,\n"
        "d,4,COMPLETED,7e9,bf16,,3bit,,,,\n")
    raw = pd.concat(list(read_chunks("csv", [path])), ignore_index=True)
    assert raw["reader_reject_reason"][:3].isna().all()
    assert raw["reader_reject_reason"][3] == "unknown quantization"
    jobs = validate(raw.loc[raw["reader_reject_reason"].isna()].drop(columns="reader_reject_reason")).jobs
    def text(col: str) -> list[str]:
        return jobs[col].fillna("").tolist()

    assert text("precision") == ["bf16", "", "fp32"]  # a mode alone says it all; precision is not made up
    assert text("precision_mode") == ["bf16-mixed", "bf16-true", ""]
    assert text("parallel_strategy") == ["zero2", "fsdp", ""]
    assert text("quantization") == ["", "nf4", ""]
    assert text("grad_checkpointing") == ["full", "selective", "off"]
    assert np.allclose(jobs["tensor_parallel_size"], [np.nan, 2.0, 4.0], equal_nan=True)
    assert np.allclose(jobs["lora_rank"], [np.nan, 16.0, np.nan], equal_nan=True)


def test_schema_rejects_unknown_descriptor_values() -> None:
    rows = pd.DataFrame({"job_id": ["a", "b", "c"], "submit_ts": [1.0, 2.0, 3.0], "state": ["COMPLETED"] * 3,
                         "precision_mode": ["bf16-mixed", "bf16-sometimes", None],
                         "tensor_parallel_size": [1.0, 2.0, 0.0]})
    result = validate(rows)
    assert result.jobs["job_id"].tolist() == ["a"]
    assert result.rejects["reject_reason"].tolist() == ["unknown precision_mode", "tensor_parallel_size below 1"]
