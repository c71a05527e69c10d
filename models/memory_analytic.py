"""Analytic peak GPU memory per GPU of a training job, from its record alone.

The estimate is the sum of three terms (bytes per GPU), then an overhead in MiB:

1. **Model states** (ZeRO paper, Rajbhandari et al., SC'20, sec. 3; DeepSpeed
   ``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs``; Hugging
   Face ``accelerate estimate-memory``). Per *trainable* parameter: weights and gradients in the
   training precision (``w = 4`` bytes for fp32/tf32, 2 for fp16/bf16/fp8), optimizer state ``o``
   (AdamW 8, 8-bit Adam 2, SGD+momentum 4, Adafactor ~0), and under mixed precision an fp32 master
   copy plus fp32 gradients (8) for the optimizer step. With ``N`` GPUs:

   * DDP (replicated): ``2w + o`` (+4 mixed) = 16 bytes for AdamW in fp32 *and* mixed precision:
     the ZeRO paper's ``2 + 2 + 12`` and accelerate's "Adam needs ~4x the fp32 model size";
   * ZeRO-2: ``2w + (o + 8) / N`` = DeepSpeed's ``4P + 16P/N`` for mixed-precision AdamW;
   * ZeRO-3 / FSDP full shard: ``(w + o + 8) / N`` (fp32: ``(2w + o) / N``) plus
     ``4 x largest-layer`` parameters = DeepSpeed's ``18P/N + 4L``, the largest layer taken as one
     transformer block (``12 h^2``).

   LoRA/QLoRA: ``LORA_FRACTION`` of the parameters train (fp32 adapters, 16 bytes each with AdamW);
   the frozen rest costs ``w`` (LoRA) or NF4 with double quantisation, 4.127 bits = 0.516 bytes
   (QLoRA, Dettmers et al., 2023), and is sharded only by ZeRO-3; int8/int4 precision stores frozen
   weights at 1 / 0.5 bytes. Single-GPU jobs use DDP; a multi-GPU job is assumed to use the
   *lowest* stage whose estimate fits its GPU type's memory (what an engineer configures), ZeRO-3
   when the GPU type is unknown or nothing fits.
2. **Activations** of one micro-batch (Korthikanti et al., "Reducing Activation Recomputation in
   Large Transformer Models", MLSys'23, Eq. 1): ``s b h (34 + 5 a s / h)`` bytes per layer with
   16-bit activations; FlashAttention (assumed: the default of current PyTorch/HF stacks) drops the
   ``5 a s / h`` attention-matrix term; no activation checkpointing is assumed (the upper case). fp32
   doubles it, fp8 takes 3/4. The shape comes from the parameter count by the **scaling rule**
   ``P ~= 12 L h^2`` (Kaplan et al., 2020: ~12 h^2 parameters per GPT block) with the aspect ratio
   ``h / L ~= 100`` of published models (GPT-3 6.7B 4096/32, Llama-2-70B 8192/80): so
   ``h = (100 P / 12)^(1/3)``, ``L = h / 100``. Logits: ``b s V`` values at 10 bytes (16-bit
   logits, their fp32 upcast, the fp32 softmax gradient; 8 in fp32), ``V = 50,257``.
   Jobs without a sequence length (vision CNNs) get ``ACTIVATION_PER_SAMPLE_MIB`` per sample
   (an ImageNet-resolution CNN such as ResNet-50 at fp32); nothing is known about resolution.
3. **Overhead**: ``CUDA_CONTEXT_MIB`` for the CUDA context, cuBLAS/cuDNN workspaces and the caching
   allocator's first blocks (500-1000 MiB in practice), plus ``NCCL_BUFFERS_MIB`` for multi-GPU jobs.

No fragmentation factor is applied: the learned correction (``models.memory``) picks that up from
measured peaks. Jobs without ``model_params`` get NaN (no estimate).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from features.history import numeric_column, object_column

__all__ = [
    "GPU_MEMORY_MIB",
    "LORA_FRACTION",
    "CUDA_CONTEXT_MIB",
    "NCCL_BUFFERS_MIB",
    "ACTIVATION_PER_SAMPLE_MIB",
    "VOCAB",
    "MemoryParts",
    "transformer_shape",
    "analytic_memory",
]

MIB = float(2**20)
#: Memory per device (MiB, as ``nvidia-smi`` reports it) of GPU types this layer knows; callers
#: pass their own inventory's table where it differs (models never import ``predictor``).
GPU_MEMORY_MIB: Mapping[str, float] = {
    "K80": 11_441, "P100": 16_384, "T4": 15_360, "V100": 16_384, "V100M32": 32_768, "G2": 24_576,
    "G3": 24_576, "A10": 24_576, "A40": 46_068, "L40S": 46_068, "A100-40GB": 40_960,
    "A100-80GB": 81_920, "H100-80GB": 81_559, "H200": 143_771, "B200": 183_359,
}
LORA_FRACTION = 0.005
CUDA_CONTEXT_MIB = 750.0
NCCL_BUFFERS_MIB = 250.0
ACTIVATION_PER_SAMPLE_MIB = 80.0
VOCAB = 50_257.0

_WEIGHT_BYTES = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 2.0, "int8": 2.0, "int4": 2.0}
_FROZEN_BYTES = {"int8": 1.0, "int4": 0.5}
_OPTIMIZER_BYTES = {"adamw": 8.0, "adam": 8.0, "adamw_8bit": 2.0, "adam8bit": 2.0, "sgd": 4.0, "adafactor": 0.0,
                    "lion": 4.0, "rmsprop": 4.0}
_QLORA_FROZEN_BYTES = 4.127 / 8.0


class MemoryParts(dict):
    """Named components of the estimate (MiB arrays): ``states``, ``activations``, ``overhead``,
    ``total``, and ``zero_stage`` (0, 2 or 3 as assumed)."""


def transformer_shape(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden size and layer count implied by a parameter count (the scaling rule above)."""
    hidden = np.cbrt(100.0 * np.asarray(params, dtype=float) / 12.0)
    return hidden, hidden / 100.0


def _lookup(values: np.ndarray, table: Mapping[str, float], default: float) -> np.ndarray:
    return np.fromiter(
        (table.get(v.lower(), default) if isinstance(v, str) else default for v in values), "float64", len(values)
    )


def analytic_memory(jobs: pd.DataFrame, gpu_memory_mib: Mapping[str, float] | None = None) -> MemoryParts:
    """Analytic peak memory per GPU for each job (see the module docstring for every term).

    Parameters
    ----------
    jobs : DataFrame of shape (n_jobs, n_columns)
        Canonical rows; uses ``model_params``, ``precision``, ``optimizer``, ``finetune_method``,
        ``batch_size``, ``seq_len``, ``num_gpus`` and ``gpu_type``. Missing precision means fp32,
        missing optimizer AdamW, missing method full fine-tuning, missing batch 1 (the conservative
        choices).
    gpu_memory_mib : mapping, optional
        GPU type -> memory per device (MiB) used to pick the ZeRO stage; default ``GPU_MEMORY_MIB``.

    Returns
    -------
    MemoryParts
        Arrays of shape (n_jobs,), MiB; NaN where ``model_params`` is unknown.
    """
    table = GPU_MEMORY_MIB if gpu_memory_mib is None else gpu_memory_mib
    n = len(jobs)
    p = numeric_column(jobs, "model_params")
    precision = np.array([v.lower() if isinstance(v, str) else "fp32" for v in object_column(jobs, "precision")],
                         dtype=object)
    method = np.array([v.lower() if isinstance(v, str) else "full" for v in object_column(jobs, "finetune_method")],
                      dtype=object)
    opt = _lookup(object_column(jobs, "optimizer"), _OPTIMIZER_BYTES, 8.0)
    gpus = np.maximum(np.nan_to_num(numeric_column(jobs, "num_gpus"), nan=1.0), 1.0)
    batch = numeric_column(jobs, "batch_size")
    batch = np.where(batch > 0, batch, 1.0)
    seq = numeric_column(jobs, "seq_len")
    cap = np.fromiter((table.get(t, np.nan) if isinstance(t, str) else np.nan for t in object_column(jobs, "gpu_type")),
                      "float64", n)

    w = _lookup(precision, _WEIGHT_BYTES, 4.0)
    full = method == "full"
    trainable = np.where(full, p, p * LORA_FRACTION)
    frozen_w = np.where(method == "qlora", _QLORA_FROZEN_BYTES, _lookup(precision, _FROZEN_BYTES, np.nan))
    frozen_w = np.where(np.isnan(frozen_w), w, frozen_w)
    frozen = np.where(full, 0.0, (p - trainable) * frozen_w)
    t_w = np.where(full, w, 4.0)  # LoRA adapters train in fp32
    # mixed precision keeps an fp32 master copy and fp32 gradients for the optimizer step
    mixed_extra = np.where(full & (w == 2.0), 8.0, 0.0)
    hidden, layers = transformer_shape(np.where(p > 0, p, 1.0))
    ddp = frozen + trainable * (2.0 * t_w + opt + mixed_extra / 2.0)
    zero2 = frozen + trainable * 2.0 * t_w + trainable * (opt + mixed_extra) / gpus
    zero3 = (frozen + trainable * (t_w + opt + np.where(mixed_extra > 0, mixed_extra, t_w))) / gpus \
        + 4.0 * 12.0 * hidden**2  # DeepSpeed's 4 x largest-layer parameters (one block, 12 h^2)

    act_scale = np.where(np.isin(precision, ("fp32", "tf32")), 2.0, np.where(precision == "fp8", 0.75, 1.0))
    logit_bytes = np.where(np.isin(precision, ("fp32", "tf32")), 8.0, 10.0)
    has_seq = seq > 0
    s = np.where(has_seq, seq, 0.0)
    transformer_acts = layers * 34.0 * s * batch * hidden * act_scale + batch * s * VOCAB * logit_bytes
    per_sample = ACTIVATION_PER_SAMPLE_MIB * MIB * act_scale / 2.0
    acts = np.where(has_seq, transformer_acts, batch * per_sample)
    overhead = CUDA_CONTEXT_MIB + np.where(gpus > 1, NCCL_BUFFERS_MIB, 0.0)

    def total(states: np.ndarray) -> np.ndarray:
        return (states + acts) / MIB + overhead

    fits2, fits0 = total(zero2) <= cap, total(ddp) <= cap  # False where cap is NaN
    multi = gpus > 1
    stage = np.where(~multi | fits0, 0, np.where(fits2, 2, 3))
    states = np.where(stage == 0, ddp, np.where(stage == 2, zero2, zero3))
    known = p > 0
    nan = np.full(n, np.nan)
    return MemoryParts(
        states=np.where(known, states / MIB, nan),
        activations=np.where(known, acts / MIB, nan),
        overhead=np.where(known, overhead, nan),
        total=np.where(known, total(states), nan),
        zero_stage=np.where(known, stage, nan),
    )
