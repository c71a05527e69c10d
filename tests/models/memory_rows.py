"""Varied descriptor rows for the analytic memory fast-path tests and benchmark: synthetic jobs
(``features.synth``), the measured tables (``models.memory_measured``) and random combinations of
every descriptor, known, missing, unparseable, zero or negative."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from features.memory_descriptors import (
    GRAD_CHECKPOINTING,
    LOSS_IMPLEMENTATIONS,
    PARALLEL_STRATEGIES,
    PRECISION_MODES,
)
from features.synth import generate
from models.memory_measured import read_measured_folder

NAN = float("nan")
#: Candidate values per column read by ``analytic_memory``; the first is "missing".
POOLS: dict[str, list] = {
    "model_params": [NAN, 0.0, -5.0, 1.1e8, 3.5e8, 7e8, 1e9, 1.3e9, 6.74e9, 7e9, 13e9, 70e9, 405e9, float("inf")],
    "finetune_method": [None, "full", "lora", "qlora", "LoRA", "QLoRA", "adapter"],
    "num_gpus": [NAN, 0.0, -1.0, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0],
    "gpu_type": [None, "A100-80GB", "A100-40GB", "V100", "RTX3090", "H200", "T4", "no-such-gpu"],
    "batch_size": [NAN, 0.0, 1.0, 2.0, 4.0, 8.0, 32.0, 256.0],
    "seq_len": [NAN, 0.0, 128.0, 512.0, 2048.0, 8192.0, 32768.0],
    "precision": [None, "bf16", "fp16", "fp32", "tf32", "fp8", "int8", "int4", "BF16", "weird"],
    "optimizer": [None, "adamw", "adamw_8bit", "paged_adamw_8bit", "sgd", "adafactor", "lion", "adamw_in_bwd", "lomo",
                  "galore_adamw", "unknown-opt"],
    "precision_mode": [None, *PRECISION_MODES, "BF16-Mixed", "bogus"],
    "quantization": [None, "none", "nf4", "fp4", "int4", "int8", "fp8", "NF4", "gptq"],
    "parallel_strategy": [None, *PARALLEL_STRATEGIES, "ZeRO3", "bogus"],
    "tensor_parallel_size": [NAN, 0.0, 1.0, 2.0, 4.0, 8.0],
    "pipeline_parallel_size": [NAN, 1.0, 2.0, 4.0],
    "context_parallel_size": [NAN, 1.0, 2.0],
    "grad_checkpointing": [None, *GRAD_CHECKPOINTING, "bogus"],
    "loss_implementation": [None, *LOSS_IMPLEMENTATIONS, "bogus"],
    "lora_rank": [NAN, 0.0, 0.5, 8.0, 16.0, 64.0, 256.0],
    "trainable_params": [NAN, 0.0, 1e6, 4.2e6, 1e8, 1e12],
    "vocab_size": [NAN, 0.0, 32_000.0, 151_936.0, 256_000.0],
    "image_size": [NAN, 0.0, 224.0, 384.0, 512.0],
}
MEASURED = Path(os.environ.get("PREDICTOR_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")) / (
    "gpu-memory/measured")


def random_rows(n: int, seed: int, missing: float = 0.4) -> pd.DataFrame:
    """``n`` rows drawing each column from ``POOLS``: "missing" with probability ``missing``, else uniformly."""
    rng = np.random.default_rng(seed)
    data = {}
    for col, pool in POOLS.items():
        pick = np.where(rng.random(n) < missing, 0, rng.integers(1, len(pool), n))
        values = [pool[i] for i in pick]
        data[col] = pd.Series(values, dtype=float if isinstance(pool[1], float) else object)
    return pd.DataFrame(data)


def synthetic_rows(n: int, seed: int) -> pd.DataFrame:
    """Synthetic jobs (every memory descriptor missing, as most cluster logs)."""
    return generate(n, seed=seed)


def measured_rows() -> pd.DataFrame | None:
    """The measured tables' rows (None where the shared data is not there)."""
    return read_measured_folder(MEASURED) if MEASURED.is_dir() else None
