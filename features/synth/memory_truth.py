"""Peak GPU memory per GPU: the ground-truth model and the analytic estimate a user could make.

The ground truth (:func:`true_peak_vram_mib`) and the analytic estimate
(:func:`analytic_peak_vram_mib`) share every formula below. They differ in what they know: the truth
uses the model's real architecture and per-family settings that never appear in a job record
(activation checkpointing, FlashAttention, LoRA rank, the ZeRO stage actually used, allocator
fragmentation, framework overhead); the estimate derives the shape from the parameter count and
assumes defaults for the rest. The gap is what a learned memory correction has to learn.

Formulas (bytes per GPU; ``P`` parameters, ``T`` trainable parameters, ``d`` data-parallel GPUs)
-------------------------------------------------------------------------------------------------
Model states (ZeRO paper, Rajbhandari et al., SC'20, section 3.1; DeepSpeed's
``estimate_zero2/3_model_states_mem_needs``):

* trainable parameters cost ``w + g + m + o`` bytes each: weights ``w`` and gradients ``g`` in the
  training precision (4 for fp32/tf32, 2 for fp16/bf16/fp8, whose Transformer Engine recipe keeps
  bf16 weights), an fp32 master copy ``m = 4`` under mixed precision, and optimizer state ``o``:
  AdamW 8 (two fp32 moments), 8-bit Adam 2 (Dettmers et al., ICLR'22), SGD with momentum 4,
  Adafactor ~0 (factored second moment, O(rows + cols) per matrix, no momentum by default). Mixed
  precision AdamW gives the paper's ``2 + 2 + 12 = 16`` bytes per parameter.
* LoRA/QLoRA (Hu et al., 2021; Dettmers et al., 2023): ``T = lora_fraction * P`` adapter weights
  kept in fp32 (``w = g = 4``, no master), plus ``P - T`` frozen weights at ``w`` bytes (LoRA) or
  NF4 with double-quantised constants, 4.127 bits = 0.516 bytes per parameter (QLoRA).
* ZeRO stage 0 (plain DDP): everything on every GPU. Stage 2: ``F + T w + T (g + m + o) / d``.
  Stage 3 / FSDP full-shard: ``(F + T (w + g + m + o)) / d`` plus two gathered layers of weights
  (``2 * 12 h^2 * w``, the working unit and its prefetch). ``F`` is the frozen-weight term.

Activations (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
MLSys'23, Eq. 1): per layer ``s b h (34 + 5 a s / h)`` bytes with 16-bit activations, ``s`` the
sequence length, ``b`` the per-GPU micro-batch, ``h`` hidden, ``a`` heads. FlashAttention never
materialises the ``5 a s^2 b`` attention matrices, leaving ``34 s b h``. Full activation
checkpointing stores only each layer's input (``2 s b h``) and re-materialises one layer at a time.
fp32 activations take x2, fp8 (Transformer Engine) x0.75. LoRA keeps the same activations (the
adapters read the same layer inputs). Logits: ``b * s * f * V`` values at 10 bytes (16-bit logits,
their fp32 upcast and the fp32 softmax gradient; 8 bytes in fp32 training), ``f`` the share of
positions with logits (:data:`features.synth.zoo.LOGIT_FRACTION`).

Peak (MiB): ``(states + activations + logits) * fragmentation + overhead``. Fragmentation is the
PyTorch caching allocator's reserved-over-allocated ratio, which ``nvidia-smi`` sees (5-20 % in
practice); overhead is the CUDA context and cuBLAS workspaces (~450 MiB on A100/H100 with
PyTorch 2), NCCL buffers for multi-GPU jobs and whatever else a framework keeps resident.
Hugging Face ``accelerate estimate-memory`` covers only the model-state term (its "x4 for Adam"
rule is the mixed-precision 16 bytes); it is the lower bound this module extends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.synth.zoo import transformer_shape

__all__ = [
    "PRECISIONS",
    "OPTIMIZERS",
    "METHODS",
    "to_codes",
    "ZERO_STAGES",
    "DEFAULT_LORA_FRACTION",
    "ANALYTIC_OVERHEAD_MIB",
    "ANALYTIC_VOCAB",
    "MemoryCodes",
    "encode",
    "model_state_bytes",
    "activation_bytes",
    "peak_from_codes",
    "true_peak_vram_mib",
    "analytic_peak_vram_mib",
]

MIB = float(2**20)
#: Training precisions the memory model knows (a subset of features.schema.PRECISIONS; int8/int4
#: are inference formats). Index = integer code.
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adamw_8bit", "sgd", "adafactor")
METHODS: tuple[str, ...] = ("full", "lora", "qlora")
ZERO_STAGES: tuple[int, ...] = (0, 2, 3)
_OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "adamw_8bit": 2.0, "sgd": 4.0, "adafactor": 0.0}
_QLORA_FROZEN_BYTES = 4.127 / 8.0
#: What the analytic estimate assumes where the record is silent.
DEFAULT_LORA_FRACTION = 0.005
ANALYTIC_OVERHEAD_MIB = 1024.0
ANALYTIC_VOCAB = 50_257.0


def to_codes(values, names: tuple[str, ...], what: str) -> np.ndarray:
    """Index of each value in ``names``; integer input is taken as codes already.

    Raises ValueError naming up to five unknown values.
    """
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        if arr.size and (arr.min() < 0 or arr.max() >= len(names)):
            raise ValueError(f"{what} code outside 0..{len(names) - 1}")
        return arr
    flat = pd.Series(np.asarray(values, dtype=object).ravel(), dtype=object)
    codes = flat.map({n: i for i, n in enumerate(names)})
    if codes.isna().any():
        bad = sorted({str(x) for x in flat[codes.isna()]})[:5]
        raise ValueError(f"unknown {what}: {', '.join(bad)}; expected one of {', '.join(names)}")
    return codes.to_numpy(dtype=np.int64).reshape(arr.shape)


@dataclass(frozen=True)
class MemoryCodes:
    """Numeric form of the string descriptors, computed once per table (see :func:`encode`).

    ``weight_bytes`` per weight/gradient value of the training precision; ``activation_scale``
    relative to 16-bit activations; ``logit_bytes`` per logit value; ``optimizer_bytes`` of state
    per trainable parameter; ``method`` 0 full, 1 LoRA, 2 QLoRA.
    """

    weight_bytes: np.ndarray
    activation_scale: np.ndarray
    logit_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    method: np.ndarray


def encode(precision, optimizer, finetune_method) -> MemoryCodes:
    """Turn precision, optimizer and fine-tuning method into :class:`MemoryCodes`.

    Each argument is an array of names (:data:`PRECISIONS`, :data:`OPTIMIZERS`, :data:`METHODS`)
    or of integer indices into them. Raises ValueError naming an unknown value.
    """
    p = to_codes(precision, PRECISIONS, "precision")
    return MemoryCodes(
        weight_bytes=np.array([4.0, 4.0, 2.0, 2.0, 2.0])[p],
        activation_scale=np.array([2.0, 2.0, 1.0, 1.0, 0.75])[p],
        logit_bytes=np.array([8.0, 8.0, 10.0, 10.0, 10.0])[p],
        optimizer_bytes=np.array([_OPTIMIZER_STATE_BYTES[o] for o in OPTIMIZERS])[
            to_codes(optimizer, OPTIMIZERS, "optimizer")],
        method=to_codes(finetune_method, METHODS, "finetune_method"),
    )


def model_state_bytes(params, codes: MemoryCodes, zero_stage, data_parallel, lora_fraction, hidden) -> np.ndarray:
    """Bytes of weights, gradients and optimizer state held by one GPU (see module docstring).

    Parameters
    ----------
    params, lora_fraction, hidden : array-like of float, shape (n,)
        Total parameters, trainable share under LoRA/QLoRA, hidden size (for ZeRO-3 buffers).
    codes : MemoryCodes
        Encoded precision, optimizer and fine-tuning method (:func:`encode`).
    zero_stage, data_parallel : array-like of int, shape (n,)
        ZeRO stage (0, 2 or 3) and the number of GPUs the states are sharded over.
    """
    p = np.asarray(params, dtype=float)
    stage = np.asarray(zero_stage)
    d = np.maximum(np.asarray(data_parallel, dtype=float), 1.0)
    w_prec = codes.weight_bytes
    full = codes.method == 0
    trainable = np.where(full, p, p * np.asarray(lora_fraction, dtype=float))
    w = np.where(full, w_prec, 4.0)
    master = np.where(full & (w_prec == 2.0), 4.0, 0.0)
    frozen = np.where(full, 0.0, (p - trainable) * np.where(codes.method == 2, _QLORA_FROZEN_BYTES, w_prec))
    grads = trainable * w
    rest = trainable * (w + master + codes.optimizer_bytes)  # weights + master + optimizer state
    zero3 = (frozen + rest + grads) / d + 2.0 * 12.0 * np.asarray(hidden, dtype=float) ** 2 * w_prec
    zero2 = frozen + trainable * w + (grads + trainable * (master + codes.optimizer_bytes)) / d
    return np.where(stage == 3, zero3, np.where(stage == 2, zero2, frozen + rest + grads))


def activation_bytes(hidden, layers, heads, vocab, logit_fraction, batch_size, seq_len, codes: MemoryCodes,
                     checkpointing, flash_attention) -> np.ndarray:
    """Activation and logit bytes of one micro-batch on one GPU (Korthikanti et al., Eq. 1).

    Parameters
    ----------
    hidden, layers, heads, vocab, logit_fraction : array-like of float, shape (n,)
        Transformer shape and the share of positions that produce logits.
    batch_size, seq_len : array-like of float, shape (n,)
        Per-GPU micro-batch and sequence length.
    codes : MemoryCodes
    checkpointing, flash_attention : array-like of bool, shape (n,)
    """
    h = np.asarray(hidden, dtype=float)
    s = np.asarray(seq_len, dtype=float)
    b = np.asarray(batch_size, dtype=float)
    a = np.asarray(heads, dtype=float)
    scale = codes.activation_scale
    attn = np.where(np.asarray(flash_attention, dtype=bool), 0.0, 5.0 * a * s / h)
    layer = s * b * h * (34.0 + attn) * scale
    stored = np.where(np.asarray(checkpointing, dtype=bool),
                      np.asarray(layers, dtype=float) * 2.0 * s * b * h * scale + layer,
                      np.asarray(layers, dtype=float) * layer)
    logit_positions = np.maximum(np.ceil(s * np.asarray(logit_fraction, dtype=float)), 1.0)
    return stored + b * logit_positions * np.asarray(vocab, dtype=float) * codes.logit_bytes


def peak_from_codes(*, params, hidden, layers, heads, vocab, logit_fraction, codes: MemoryCodes, batch_size,
                    seq_len, num_gpus, zero_stage, lora_fraction, checkpointing, flash_attention, fragmentation,
                    overhead_mib) -> np.ndarray:
    """:func:`true_peak_vram_mib` with the string descriptors already encoded (for repeated calls)."""
    states = model_state_bytes(params, codes, zero_stage, num_gpus, lora_fraction, hidden)
    acts = activation_bytes(hidden, layers, heads, vocab, logit_fraction, batch_size, seq_len, codes,
                            checkpointing, flash_attention)
    return (states + acts) * np.asarray(fragmentation, dtype=float) / MIB + np.asarray(overhead_mib, dtype=float)


def true_peak_vram_mib(*, params, hidden, layers, heads, vocab, logit_fraction, precision, optimizer,
                       finetune_method, batch_size, seq_len, num_gpus, zero_stage, lora_fraction,
                       checkpointing, flash_attention, fragmentation, overhead_mib) -> np.ndarray:
    """Ground-truth peak memory per GPU (MiB) before measurement noise.

    All arguments are arrays of shape (n,) (scalars broadcast). ``fragmentation`` >= 1 multiplies
    everything PyTorch allocates; ``overhead_mib`` is added on top (CUDA context, NCCL, framework).
    Raises ValueError on an unknown precision, optimizer or fine-tuning method.
    """
    p = np.atleast_1d(np.asarray(params, dtype=float))
    shape = p.shape

    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=object), shape)

    return peak_from_codes(params=p, hidden=hidden, layers=layers, heads=heads, vocab=vocab,
                           logit_fraction=logit_fraction,
                           codes=encode(full(precision), full(optimizer), full(finetune_method)),
                           batch_size=batch_size, seq_len=seq_len, num_gpus=num_gpus, zero_stage=zero_stage,
                           lora_fraction=lora_fraction, checkpointing=checkpointing,
                           flash_attention=flash_attention, fragmentation=fragmentation, overhead_mib=overhead_mib)


def analytic_peak_vram_mib(model_params, precision, optimizer, finetune_method, batch_size, seq_len,
                           num_gpus, gpu_memory_mib=None) -> np.ndarray:
    """The estimate a user can make from a job record alone (the documented analytic model).

    Shape from :func:`features.synth.zoo.transformer_shape`; FlashAttention on, no activation
    checkpointing, a 50,257-token vocabulary with logits at every position, LoRA rank giving
    :data:`DEFAULT_LORA_FRACTION` trainable parameters, no fragmentation and
    :data:`ANALYTIC_OVERHEAD_MIB` of overhead. Multi-GPU jobs are assumed to use the lowest ZeRO
    stage (0, 2, 3) whose estimate fits ``gpu_memory_mib`` (stage 3 when none fits or the memory
    is unknown).

    Parameters
    ----------
    model_params, batch_size, seq_len, num_gpus : array-like of float, shape (n,)
    precision, optimizer, finetune_method : array-like of str, shape (n,)
    gpu_memory_mib : array-like of float, shape (n,), optional
        Memory of the GPU each job runs on.

    Returns
    -------
    ndarray of float, shape (n,)
        Estimated peak memory per GPU, MiB.
    """
    p = np.atleast_1d(np.asarray(model_params, dtype=float))
    h, layers, heads = transformer_shape(p)
    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=object), p.shape)

    codes = encode(full(precision), full(optimizer), full(finetune_method))
    common = dict(params=p, hidden=h, layers=layers, heads=heads, vocab=ANALYTIC_VOCAB, logit_fraction=1.0,
                  codes=codes, batch_size=np.asarray(batch_size, dtype=float), seq_len=np.asarray(seq_len, dtype=float),
                  num_gpus=np.asarray(num_gpus, dtype=float), lora_fraction=DEFAULT_LORA_FRACTION,
                  checkpointing=False, flash_attention=True, fragmentation=1.0, overhead_mib=ANALYTIC_OVERHEAD_MIB)
    by_stage = [peak_from_codes(zero_stage=s, **common) for s in ZERO_STAGES]
    single = np.asarray(num_gpus, dtype=float) <= 1
    if gpu_memory_mib is None:
        return np.where(single, by_stage[0], by_stage[-1])
    cap = np.asarray(gpu_memory_mib, dtype=float)
    out = by_stage[-1]
    for est in reversed(by_stage[:-1]):
        out = np.where(est <= cap, est, out)
    return np.where(single, by_stage[0], out)
