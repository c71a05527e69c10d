"""The analytic memory estimate against the published estimators it cites."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.memory_analytic import (
    CUDA_CONTEXT_MIB,
    LORA_FRACTION,
    NCCL_BUFFERS_MIB,
    analytic_memory,
    transformer_shape,
)

MIB = 2.0**20


def job(**fields) -> pd.DataFrame:
    base = {"job_id": "j", "model_params": 7e9, "precision": "bf16", "optimizer": "adamw", "finetune_method": "full",
            "batch_size": 1.0, "seq_len": 2048.0, "num_gpus": 1.0, "gpu_type": None}
    base.update(fields)
    return pd.DataFrame([base])


def states_mib(**fields) -> float:
    return float(analytic_memory(job(**fields))["states"][0])


@pytest.mark.parametrize(
    ("fields", "bytes_per_param"),
    [
        ({"precision": "fp32"}, 16.0),  # accelerate: Adam needs 4x the fp32 model size
        ({"precision": "bf16"}, 16.0),  # ZeRO paper: 2 + 2 + 12
        ({"precision": "fp32", "optimizer": "sgd"}, 12.0),  # weights, grads, momentum
        ({"precision": "bf16", "optimizer": "adamw_8bit"}, 10.0),
        ({"precision": "fp32", "optimizer": "adafactor"}, 8.0),
        ({"precision": "bf16", "optimizer": None}, 16.0),  # unknown optimizer: AdamW (conservative)
    ],
    ids=["fp32-adamw", "bf16-adamw", "fp32-sgd", "bf16-adam8bit", "fp32-adafactor", "unknown-optimizer"],
)
def test_single_gpu_model_states_per_parameter(fields: dict, bytes_per_param: float) -> None:
    assert states_mib(**fields) == pytest.approx(7e9 * bytes_per_param / MIB)


@pytest.mark.parametrize("gpus", [8, 16, 32])
def test_zero2_matches_deepspeed_estimator(gpus: int) -> None:
    """DeepSpeed estimate_zero2_model_states_mem_needs (no offload): 4P + 16P/N bytes.

    13B in bf16 does not fit DDP on an H200 (16 x 13e9 bytes) but does with ZeRO-2 from 8 GPUs.
    """
    p = 13e9
    parts = analytic_memory(job(model_params=p, num_gpus=float(gpus), gpu_type="H200"))
    assert parts["zero_stage"][0] == 2
    assert parts["states"][0] == pytest.approx((4 * p + 16 * p / gpus) / MIB)


@pytest.mark.parametrize("gpus", [8, 16, 128])
def test_zero3_matches_deepspeed_estimator(gpus: int) -> None:
    """DeepSpeed estimate_zero3_model_states_mem_needs (no offload): 18P/N + 4 x largest layer."""
    p = 405e9  # never fits below ZeRO-3, and the GPU type is unknown anyway
    parts = analytic_memory(job(model_params=p, num_gpus=float(gpus)))
    hidden, _ = transformer_shape(np.array([p]))
    assert parts["zero_stage"][0] == 3
    assert parts["states"][0] == pytest.approx((18 * p / gpus + 4 * 12 * hidden[0] ** 2) / MIB)


def test_lowest_zero_stage_that_fits_the_gpu_is_assumed() -> None:
    small = analytic_memory(job(model_params=125e6, num_gpus=4.0, gpu_type="A100-80GB"))
    assert small["zero_stage"][0] == 0  # a 125M model replicates comfortably (DDP)
    big = analytic_memory(job(model_params=70e9, num_gpus=64.0, gpu_type="A100-80GB"))
    assert big["zero_stage"][0] == 3
    assert big["total"][0] <= 81_920


@pytest.mark.parametrize(
    ("method", "frozen_bytes"),
    [("lora", 2.0), ("qlora", 4.127 / 8)],
    ids=["lora-bf16", "qlora-nf4"],
)
def test_lora_and_qlora_states(method: str, frozen_bytes: float) -> None:
    p = 70e9
    trainable = p * LORA_FRACTION
    expected = ((p - trainable) * frozen_bytes + trainable * 16.0) / MIB
    assert states_mib(model_params=p, finetune_method=method) == pytest.approx(expected)


def test_activations_follow_korthikanti_with_flash_attention() -> None:
    p, b, s = 7e9, 4.0, 4096.0
    hidden, layers = transformer_shape(np.array([p]))
    parts = analytic_memory(job(model_params=p, batch_size=b, seq_len=s))
    expected = layers[0] * 34 * s * b * hidden[0] + b * s * 50_257 * 10
    assert parts["activations"][0] == pytest.approx(expected / MIB)
    doubled = analytic_memory(job(model_params=p, batch_size=2 * b, seq_len=s))
    assert doubled["activations"][0] == pytest.approx(2 * parts["activations"][0])


def test_overhead_and_unknown_model() -> None:
    frame = pd.concat([job(num_gpus=1.0), job(num_gpus=2.0, model_params=1e8), job(model_params=None)], ignore_index=True)
    parts = analytic_memory(frame)
    assert parts["overhead"][0] == CUDA_CONTEXT_MIB
    assert parts["overhead"][1] == CUDA_CONTEXT_MIB + NCCL_BUFFERS_MIB
    assert np.isnan(parts["total"][2])
    assert parts["total"][0] == pytest.approx(parts["states"][0] + parts["activations"][0] + CUDA_CONTEXT_MIB)


def test_scaling_rule_matches_published_shapes() -> None:
    """h ~ (100 P / 12)^(1/3): within ~15 % of Llama-2-7B (4096) and 70B (8192) hidden sizes."""
    hidden, _ = transformer_shape(np.array([6.74e9, 69e9]))
    assert hidden / np.array([4096, 8192]) == pytest.approx([1.0, 1.0], rel=0.15)
