"""Memory descriptors of a training job: their canonical values and every spelling readers accept.

The descriptors that decide a job's peak GPU memory beside its size (``model_params``, ``batch_size``,
``seq_len``) are canonical columns (``features.schema``); this module is the one place their
spellings are parsed. Readers call :func:`normalise_descriptors` on a table (the generic CSV); the
per-record conventions (``features.memory_conventions``) call the scalar parsers.

Canonical values
----------------
``precision_mode``
    ``fp32``, ``fp16-mixed``, ``bf16-mixed`` (16-bit compute, fp32 master weights and optimizer
    state), ``fp16-true``, ``bf16-true`` (weights, gradients and optimizer state all 16-bit), ``fp8``
    (fp8 matmuls, Transformer Engine / torchao Float8). Lightning's names (``32-true``, ``16-mixed``,
    ``bf16-mixed``, ``bf16-true``, ``transformer-engine``), Hugging Face's (``bf16=True``, ``fp16``,
    ``torch_dtype=bfloat16``, accelerate ``mixed_precision=bf16``) and DeepSpeed's are accepted. A bare
    ``bf16`` / ``fp16`` names the 16-bit type but not the mode: ``precision`` is set, the mode stays
    unknown (the memory estimate then bounds both).
``quantization`` (of the frozen base weights)
    ``none``, ``nf4`` (bitsandbytes 4-bit NormalFloat, QLoRA), ``fp4`` (bitsandbytes FP4, NVFP4,
    MXFP4), ``int4`` (GPTQ / AWQ 4-bit), ``int8`` (LLM.int8, GPTQ 8-bit), ``fp8``.
``parallel_strategy``
    ``ddp`` (replicated states; also one GPU, FSDP ``NO_SHARD``, ZeRO-0), ``zero1`` (optimizer state
    sharded), ``zero2`` (+ gradients; FSDP ``SHARD_GRAD_OP``), ``zero3`` / ``fsdp`` (+ weights;
    ``FULL_SHARD``, ``HYBRID_SHARD``, FSDP2), and ``zero2-offload``, ``zero3-offload``,
    ``fsdp-offload`` (states kept in CPU memory). Lightning's ``deepspeed_stage_3_offload`` etc.
``tensor_parallel_size``, ``pipeline_parallel_size``, ``context_parallel_size``
    Positive integers (``tp8``, ``tp=8``, ``tensor_parallel_size=8``; context parallelism also as
    ``cp``, ``sp`` or ``sequence_parallel_size``: DeepSpeed-Ulysses and ring attention split the
    sequence alike).
``grad_checkpointing``
    ``off``, ``selective`` (selective activation recomputation), ``full`` (every layer recomputed;
    also activation offloading). ``true``/``on``/``1`` mean ``full``.
``loss_implementation``
    ``standard`` (the logits materialised, upcast to fp32 for the loss), ``chunked`` (the loss
    computed chunk by chunk: torchtune's ``CEWithChunkedOutputLoss``), ``fused`` (the output layer
    and the loss fused, no logits kept: Liger's fused linear cross-entropy, Apple's Cut
    Cross-Entropy, Unsloth).
``lora_rank``
    The LoRA rank ``r`` (``16``, ``r=16``, ``lora_r=16``, ``rank16``).
``trainable_params``
    Parameters the optimizer updates, as PEFT and Lightning print them (``20M``, ``1.5e7``); known,
    it replaces the adapter size estimated from the rank.
``image_size``
    Input side length in pixels of a vision model (``224``, ``224x224``, ``512px``).
``vocab_size``
    The tokenizer's vocabulary (the logits' width). Where a model name is known (a ``model`` key,
    a job name) and no size is given, ``features.memory_conventions.vocab_from_model_name`` looks
    the family up (the families' published ``config.json`` values).

The conventions that carry these in Kubernetes labels, Slurm comments and job names are
``features.memory_conventions``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "PRECISION_MODES",
    "QUANTIZATIONS",
    "PARALLEL_STRATEGIES",
    "GRAD_CHECKPOINTING",
    "LOSS_IMPLEMENTATIONS",
    "DESCRIPTOR_COLUMNS",
    "parse_precision",
    "parse_precision_mode",
    "parse_quantization",
    "parse_parallel_strategy",
    "parse_grad_checkpointing",
    "parse_loss_implementation",
    "parse_positive_int",
    "parse_model_params",
    "parse_image_size",
    "parse_finetune_method",
    "normalise_descriptors",
    "norm_token",
    "PARSERS",
]

PRECISION_MODES: tuple[str, ...] = ("fp32", "fp16-mixed", "bf16-mixed", "fp16-true", "bf16-true", "fp8")
QUANTIZATIONS: tuple[str, ...] = ("none", "nf4", "fp4", "int4", "int8", "fp8")
PARALLEL_STRATEGIES: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3", "fsdp", "zero2-offload", "zero3-offload",
                                        "fsdp-offload")
GRAD_CHECKPOINTING: tuple[str, ...] = ("off", "selective", "full")
LOSS_IMPLEMENTATIONS: tuple[str, ...] = ("standard", "chunked", "fused")
#: Canonical columns this module parses, in ``features.schema`` order.
DESCRIPTOR_COLUMNS: tuple[str, ...] = ("precision_mode", "quantization", "parallel_strategy", "tensor_parallel_size",
                                       "pipeline_parallel_size", "context_parallel_size", "grad_checkpointing",
                                       "loss_implementation", "lora_rank", "trainable_params", "image_size",
                                       "vocab_size")


def norm_token(text: Any) -> str | None:
    """Lower case, separators as ``-``, no quotes or ``torch.`` prefix; None for null/blank."""
    if text is None or (isinstance(text, float) and np.isnan(text)) or text is pd.NA:
        return None
    if isinstance(text, bool):
        return "true" if text else "false"
    s = str(text).strip().strip("\"'").lower().replace("torch.", "")
    s = re.sub(r"[\s_]+", "-", s)
    return s or None


# ---- precision ---------------------------------------------------------------------------------

# spelling -> (precision, precision_mode); a mode of None means the 16-bit type is known, its mode not
_PRECISION: dict[str, tuple[str, str | None]] = {}
for _names, _value in (
    (("fp32", "float32", "32", "32-true", "full", "no", "none", "float", "64", "64-true", "fp64", "float64",
      "mixed-precision=no", "amp=false"), ("fp32", "fp32")),
    (("tf32",), ("tf32", "fp32")),
    (("bf16-mixed", "bf16mixed", "mixed-bf16", "bf16-amp", "amp-bf16", "bf16=true", "bf16=1", "--bf16", "bf16-autocast",
      "mixed-precision=bf16", "autocast-bf16", "bf16-enabled", "deepspeed-bf16", "bf16-mixed-precision"),
     ("bf16", "bf16-mixed")),
    (("fp16-mixed", "16-mixed", "fp16mixed", "mixed-fp16", "fp16-amp", "amp-fp16", "amp", "fp16=true", "fp16=1",
      "--fp16", "mixed-precision=fp16", "native-amp", "apex", "autocast", "fp16-enabled", "deepspeed-fp16",
      "16-mixed-precision"), ("fp16", "fp16-mixed")),
    (("bf16-true", "bf16true", "pure-bf16", "bf16-pure", "true-bf16", "torch-dtype=bfloat16", "dtype=bfloat16",
      "torch-dtype=bf16", "dtype=bf16", "bf16-full"), ("bf16", "bf16-true")),
    (("fp16-true", "16-true", "fp16true", "pure-fp16", "fp16-pure", "torch-dtype=float16", "dtype=float16",
      "torch-dtype=fp16", "dtype=fp16", "half-true"), ("fp16", "fp16-true")),
    (("fp8", "float8", "fp8-mixed", "8-mixed", "transformer-engine", "transformer-engine-float16", "te-fp8", "fp8-e4m3",
      "e4m3", "fp8-hybrid", "hybrid-fp8", "mixed-precision=fp8", "float8-linears"), ("fp8", "fp8")),
    (("bf16", "bfloat16", "bf-16", "brain-float16"), ("bf16", None)),
    (("fp16", "float16", "half", "16", "fp-16"), ("fp16", None)),
    (("int8",), ("int8", None)),
    (("int4",), ("int4", None)),
):
    for _n in _names:
        _PRECISION[_n] = _value


_CANONICAL_PRECISIONS = frozenset(("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4"))


def parse_precision(text: Any) -> tuple[str | None, str | None]:
    """``(precision, precision_mode)`` from any accepted spelling; ``(None, None)`` for null.

    Raises
    ------
    ValueError
        When the text is not a precision this module knows.
    """
    s = norm_token(text)
    if s is None:
        return None, None
    if s in _PRECISION:
        return _PRECISION[s]
    raise ValueError(f"unknown precision {text!r}")


def parse_precision_mode(text: Any) -> str | None:
    """The canonical ``precision_mode`` (None for null or a bare 16-bit type such as ``bf16``)."""
    return parse_precision(text)[1]


# ---- quantisation ------------------------------------------------------------------------------

_QUANT: dict[str, str] = {}
for _names, _value in (
    (("none", "no", "false", "0", "off", "bf16", "fp16", "fp32", "16-bit", "full", "null"), "none"),
    (("nf4", "bnb-nf4", "nf4-double", "nf4-dq", "4bit", "4-bit", "load-in-4bit", "load-in-4bit=true", "bnb-4bit",
      "bitsandbytes-4bit", "bnb4", "q4", "qlora", "nf4-torchao"), "nf4"),
    (("fp4", "bnb-fp4", "nvfp4", "mxfp4", "fp4-e2m1"), "fp4"),
    (("int4", "gptq", "gptq-int4", "gptq-4bit", "awq", "awq-int4", "w4a16", "int4-weight-only", "hqq-4bit"), "int4"),
    (("int8", "8bit", "8-bit", "load-in-8bit", "load-in-8bit=true", "llm-int8", "bnb-8bit", "bitsandbytes-8bit",
      "gptq-int8", "gptq-8bit", "w8a16", "int8-weight-only", "llm.int8"), "int8"),
    (("fp8", "float8", "fp8-e4m3", "fbgemm-fp8", "w8a8-fp8"), "fp8"),
):
    for _n in _names:
        _QUANT[_n] = _value


def parse_quantization(text: Any) -> str | None:
    """Canonical quantisation of the frozen weights (None for null); ValueError when unknown."""
    s = norm_token(text)
    if s is None:
        return None
    if s in _QUANT:
        return _QUANT[s]
    raise ValueError(f"unknown quantization {text!r}")


# ---- parallel strategy -------------------------------------------------------------------------

_STRATEGY: dict[str, str] = {}
for _names, _value in (
    (("ddp", "dp", "data-parallel", "single", "single-device", "single-gpu", "none", "no-shard", "fsdp-no-shard",
      "zero0", "zero-0", "stage0", "zero-stage=0", "deepspeed-stage-0", "ddp-spawn", "ddp-find-unused-parameters-true",
      "ddp-notebook", "dataparallel"), "ddp"),
    (("zero1", "zero-1", "z1", "stage1", "zero-stage=1", "deepspeed-stage-1", "ds-z1", "deepspeed-zero1"), "zero1"),
    (("zero2", "zero-2", "z2", "stage2", "zero-stage=2", "deepspeed-stage-2", "ds-z2", "deepspeed-zero2", "deepspeed",
      "shard-grad-op", "fsdp-shard-grad-op", "fsdp-grad-op"), "zero2"),
    (("zero3", "zero-3", "z3", "stage3", "zero-stage=3", "deepspeed-stage-3", "ds-z3", "deepspeed-zero3"), "zero3"),
    (("fsdp", "fsdp2", "fsdp-full-shard", "full-shard", "fsdp-full-shard-auto-wrap", "full-shard-auto-wrap",
      "hybrid-shard", "fsdp-hybrid-shard", "hsdp"), "fsdp"),
    (("zero2-offload", "zero-2-offload", "deepspeed-stage-2-offload", "ds-z2-offload", "z2-offload"), "zero2-offload"),
    (("zero3-offload", "zero-3-offload", "deepspeed-stage-3-offload", "deepspeed-stage-3-offload-nvme", "ds-z3-offload",
      "z3-offload", "zero-infinity"), "zero3-offload"),
    (("fsdp-offload", "fsdp-cpu-offload", "full-shard-offload", "fsdp-full-shard-offload", "full-shard-auto-wrap-offload",
      "fsdp-offload-params", "fsdp2-offload"), "fsdp-offload"),
):
    for _n in _names:
        _STRATEGY[_n] = _value


def parse_parallel_strategy(text: Any) -> str | None:
    """Canonical parallel strategy (None for null); ValueError when unknown.

    A bare ZeRO stage number (``0``-``3``, as in ``zero_stage=3``) is read as that stage; a bare
    ``deepspeed`` as Lightning's default, stage 2.
    """
    s = norm_token(text)
    if s is None:
        return None
    if s in ("0", "1", "2", "3"):
        return "ddp" if s == "0" else f"zero{s}"
    for spelling in (s, s.replace("stage-", "stage"), s.replace("stage", "stage-")):
        if spelling in _STRATEGY:
            return _STRATEGY[spelling]
    raise ValueError(f"unknown parallel_strategy {text!r}")


# ---- checkpointing, integers, sizes ------------------------------------------------------------

_CKPT: dict[str, str] = {}
for _names, _value in (
    (("off", "false", "0", "no", "none", "disabled", "n", "f"), "off"),
    (("selective", "selective-ac", "sac", "op", "selective-recompute", "partial"), "selective"),
    (("full", "on", "true", "1", "yes", "enabled", "y", "t", "full-ac", "ac", "gc", "gradient-checkpointing",
      "activation-checkpointing", "recompute", "offload", "activation-offloading", "unsloth"), "full"),
):
    for _n in _names:
        _CKPT[_n] = _value


def parse_grad_checkpointing(text: Any) -> str | None:
    """Canonical gradient checkpointing (None for null); ValueError when unknown."""
    s = norm_token(text)
    if s is None:
        return None
    if s in _CKPT:
        return _CKPT[s]
    raise ValueError(f"unknown grad_checkpointing {text!r}")


_LOSS: dict[str, str] = {}
for _names, _value in (
    (("standard", "full", "default", "none", "cross-entropy", "ce", "naive"), "standard"),
    (("chunked", "chunked-ce", "chunk", "cewithchunkedoutputloss", "chunked-cross-entropy"), "chunked"),
    (("fused", "liger", "liger-kernel", "fused-linear-cross-entropy", "flce", "cce", "cut-cross-entropy",
      "cutcrossentropy", "unsloth", "fused-ce"), "fused"),
):
    for _n in _names:
        _LOSS[_n] = _value


def parse_loss_implementation(text: Any) -> str | None:
    """Canonical loss implementation (None for null); ValueError when unknown."""
    s = norm_token(text)
    if s is None:
        return None
    if s in _LOSS:
        return _LOSS[s]
    raise ValueError(f"unknown loss_implementation {text!r}")


def parse_positive_int(text: Any) -> float | None:
    """A positive integer (``8``, ``8.0``, ``r=8``, ``tp8``, ``rank16``) as float; None for null."""
    if isinstance(text, int | float | np.integer | np.floating) and not isinstance(text, bool):
        value = float(text)
        if np.isnan(value):
            return None
    else:
        s = norm_token(text)
        if s is None:
            return None
        match = re.fullmatch(r"(?:[a-z][a-z-]*[=:]?)?(\d+(?:\.0*)?)", s)
        if not match:
            raise ValueError(f"not a positive integer: {text!r}")
        value = float(match.group(1))
    if value < 1 or value != int(value):
        raise ValueError(f"not a positive integer: {text!r}")
    return value


def parse_image_size(text: Any) -> float | None:
    """An image side in pixels: ``224``, ``224x224`` (the larger side of ``HxW``), ``512px``."""
    if isinstance(text, int | float | np.integer | np.floating) and not isinstance(text, bool):
        return parse_positive_int(text)
    s = norm_token(text)
    if s is None:
        return None
    match = re.fullmatch(r"(\d+)(?:-?x-?(\d+))?(?:-?px)?", s)
    if not match:
        raise ValueError(f"not an image size: {text!r}")
    return float(max(int(match.group(1)), int(match.group(2) or 0)))


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmbt])$")
_SIZE_FACTOR = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_model_params(text: Any) -> float | None:
    """A parameter count: a number (``7e9``) or a size token (``7b``, ``350m``, ``1.5B``)."""
    s = norm_token(text)
    if s is None:
        return None
    try:
        return float(s)
    except ValueError:
        pass
    match = _SIZE.match(s)
    if not match:
        raise ValueError(f"not a parameter count: {text!r}")
    return float(match.group(1)) * _SIZE_FACTOR[match.group(2)]


_METHOD = {"full": "full", "fft": "full", "full-finetune": "full", "sft": None, "lora": "lora", "dora": "lora",
           "peft": "lora", "qlora": "qlora", "q-lora": "qlora"}


def parse_finetune_method(text: Any) -> str | None:
    """``full``, ``lora`` or ``qlora`` (DoRA and other adapters count as ``lora``)."""
    s = norm_token(text)
    if s is None:
        return None
    if s in _METHOD:
        return _METHOD[s]
    raise ValueError(f"unknown finetune_method {text!r}")


# ---- tables ------------------------------------------------------------------------------------

#: Parser of each descriptor column.
PARSERS: dict[str, Callable[[Any], Any]] = {
    "precision_mode": parse_precision_mode,
    "quantization": parse_quantization,
    "parallel_strategy": parse_parallel_strategy,
    "tensor_parallel_size": parse_positive_int,
    "pipeline_parallel_size": parse_positive_int,
    "context_parallel_size": parse_positive_int,
    "grad_checkpointing": parse_grad_checkpointing,
    "loss_implementation": parse_loss_implementation,
    "lora_rank": parse_positive_int,
    "trainable_params": parse_model_params,
    "image_size": parse_image_size,
    "vocab_size": parse_positive_int,
}


def _map_unique(values: pd.Series, parse: Callable[[Any], Any]) -> tuple[np.ndarray, np.ndarray]:
    """Parse each distinct value once: (parsed values as objects, unparseable mask)."""
    raw = values.to_numpy(dtype=object, na_value=None)
    out = np.full(len(raw), None, dtype=object)
    bad = np.zeros(len(raw), dtype=bool)
    cache: dict[Any, tuple[Any, bool]] = {}
    for i, v in enumerate(raw):
        key = v if isinstance(v, str | int | float | bool) or v is None else str(v)
        if key not in cache:
            try:
                cache[key] = (parse(v), False)
            except ValueError:
                cache[key] = (None, True)
        out[i], bad[i] = cache[key]
    return out, bad


def normalise_descriptors(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[np.ndarray, str]]]:
    """Canonical spellings of ``precision`` and the descriptor columns a table has (in place).

    ``precision`` accepts every precision spelling: a mode spelling there (``bf16-mixed``) also fills
    ``precision_mode`` where it is null. Canonical values are left exactly as they are.

    Returns
    -------
    frame : DataFrame
        The same frame, columns rewritten.
    checks : list of (mask, reason)
        Rows whose value did not parse, one reason per column: ``unknown <column>`` for a
        vocabulary (the bad text kept as written, for the rejects file), ``unparseable <column>``
        for a number.
    """
    checks: list[tuple[np.ndarray, str]] = []
    mode_from_precision = None
    if "precision" in frame.columns:
        raw = frame["precision"].to_numpy(dtype=object, na_value=None)
        pairs, bad = _map_unique(frame["precision"], parse_precision)
        parsed = np.array([p[0] if p else None for p in pairs], dtype=object)
        frame["precision"] = pd.Series(np.where(bad, raw, parsed), index=frame.index, dtype=object)
        # a mode written in the precision column (``bf16-mixed``) also fills precision_mode; a canonical
        # precision (``fp32``, ``bf16``) stays as it is, without a mode (canonical tables round-trip)
        canonical = np.array([isinstance(v, str) and v.strip() in _CANONICAL_PRECISIONS for v in raw], dtype=bool)
        mode_from_precision = np.array([None if c or not p else p[1] for p, c in zip(pairs, canonical, strict=True)],
                                       dtype=object)
        checks.append((bad, "unknown precision"))
    for col, parse in PARSERS.items():
        if col not in frame.columns:
            continue
        raw = frame[col].to_numpy(dtype=object, na_value=None)
        values, bad = _map_unique(frame[col], parse)
        if col.endswith(("_size", "_params")) or col == "lora_rank":  # numeric columns
            frame[col] = np.array([np.nan if v is None else v for v in values], dtype="float64")
            checks.append((bad, f"unparseable {col}"))
        else:  # a bad value stays as written, for the rejects file
            frame[col] = pd.Series(np.where(bad, raw, values), index=frame.index, dtype=object)
            checks.append((bad, f"unknown {col}"))
    if mode_from_precision is not None and mode_from_precision.any():
        current = frame["precision_mode"].to_numpy(dtype=object) if "precision_mode" in frame.columns else \
            np.full(len(frame), None, dtype=object)
        current = np.where(pd.isna(current), mode_from_precision, current)
        frame["precision_mode"] = pd.Series(current, index=frame.index, dtype=object)
    return frame, checks
