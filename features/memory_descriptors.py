"""Memory descriptors of a training job: their canonical values and every spelling readers accept.

The descriptors that decide a job's peak GPU memory beside its size (``model_params``, ``batch_size``,
``seq_len``) are canonical columns (``features.schema``); this module is the one place their
spellings are parsed. Readers call :func:`normalise_descriptors` on a table (the generic CSV),
:func:`descriptors_from_kubernetes` on label/annotation maps (Kueue) and
:func:`descriptors_from_comment` / :func:`descriptors_from_job_name` on Slurm fields.

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
    a job name) and no size is given, :func:`vocab_from_model_name` looks the family up in
    :data:`MODEL_VOCAB` (the families' published ``config.json`` values).

Kubernetes and Slurm conventions (documented in ``docs/notes/memory.md``)
-------------------------------------------------------------------------
Annotations or labels ``predictor/<key>`` on the Workload or its pod templates, one per descriptor
(``predictor/precision: bf16-true``), or one ``predictor/memory`` holding ``key=value`` pairs.
A Slurm job's ``--comment`` holds the same ``key=value`` pairs (``precision=bf16-mixed quant=nf4
strategy=zero3 ckpt=full lora_r=16``). Job-name tokens (``llama-7b-qlora-r16-bf16-z3-gc``) fill what
the comment leaves unknown. Keys (with aliases): :data:`KEYS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
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
    "KEYS",
    "ANNOTATION_PREFIX",
    "parse_precision",
    "parse_precision_mode",
    "parse_quantization",
    "parse_parallel_strategy",
    "parse_grad_checkpointing",
    "parse_loss_implementation",
    "parse_positive_int",
    "parse_model_params",
    "parse_image_size",
    "MODEL_VOCAB",
    "vocab_from_model_name",
    "parse_finetune_method",
    "normalise_descriptors",
    "descriptors_from_pairs",
    "descriptors_from_comment",
    "descriptors_from_job_name",
    "descriptors_from_kubernetes",
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
ANNOTATION_PREFIX = "predictor/"


def _norm(text: Any) -> str | None:
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
    (("fp32", "float32", "32", "32-true", "full", "no", "none", "float", "tf32", "64", "64-true", "fp64", "float64",
      "mixed-precision=no", "amp=false"), ("fp32", "fp32")),
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


def parse_precision(text: Any) -> tuple[str | None, str | None]:
    """``(precision, precision_mode)`` from any accepted spelling; ``(None, None)`` for null.

    Raises
    ------
    ValueError
        When the text is not a precision this module knows.
    """
    s = _norm(text)
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
      "gptq-int8", "gptq-8bit", "w8a16", "int8-weight-only"), "int8"),
    (("fp8", "float8", "fp8-e4m3", "fbgemm-fp8", "w8a8-fp8"), "fp8"),
):
    for _n in _names:
        _QUANT[_n] = _value


def parse_quantization(text: Any) -> str | None:
    """Canonical quantisation of the frozen weights (None for null); ValueError when unknown."""
    s = _norm(text)
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
    (("zero2", "zero-2", "z2", "stage2", "zero-stage=2", "deepspeed-stage-2", "ds-z2", "deepspeed-zero2",
      "shard-grad-op", "fsdp-shard-grad-op", "fsdp-grad-op"), "zero2"),
    (("zero3", "zero-3", "z3", "stage3", "zero-stage=3", "deepspeed-stage-3", "ds-z3", "deepspeed-zero3",
      "deepspeed"), "zero3"),
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

    A bare ZeRO stage number (``0``-``3``, as in ``zero_stage=3``) is read as that stage.
    """
    s = _norm(text)
    if s is None:
        return None
    s = s.replace("stage-", "stage")
    if s in ("0", "1", "2", "3"):
        return "ddp" if s == "0" else f"zero{s}"
    if s in _STRATEGY:
        return _STRATEGY[s]
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
    s = _norm(text)
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
    s = _norm(text)
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
        s = _norm(text)
        if s is None:
            return None
        match = re.fullmatch(r"(?:[a-z-]*[=:]?)?(\d+(?:\.0*)?)", s)
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
    s = _norm(text)
    if s is None:
        return None
    match = re.fullmatch(r"(\d+)(?:-?x-?(\d+))?(?:-?px)?", s)
    if not match:
        raise ValueError(f"not an image size: {text!r}")
    return float(max(int(match.group(1)), int(match.group(2) or 0)))


#: Vocabulary of well-known model families (regex on the lower-cased model or job name, first match
#: wins; values from each family's ``config.json``). Multilingual T5/BLOOM variants have 250k.
MODEL_VOCAB: tuple[tuple[str, float], ...] = (
    (r"qwen", 151_936.0), (r"llama-?3|llama3", 128_256.0), (r"code-?llama", 32_016.0),
    (r"llama-?2|llama2|vicuna|tinyllama", 32_000.0), (r"mixtral|mistral-?7b|zephyr", 32_000.0),
    (r"mistral-?nemo|ministral|mistral-?small|devstral|magistral", 131_072.0), (r"gemma", 256_000.0),
    (r"phi-?3", 32_064.0), (r"phi-?4", 100_352.0), (r"chatglm|glm-?4", 65_024.0), (r"baichuan", 125_696.0),
    (r"\byi-|01-ai/yi", 64_000.0), (r"deepseek", 102_400.0), (r"bloom", 250_880.0), (r"\bmt0|\bmt5", 250_112.0),
    (r"\bt0|\bt5|flan-t5", 32_128.0), (r"gpt-?2", 50_257.0), (r"gpt-?j|gpt-?neox|pythia", 50_400.0),
    (r"opt-\d", 50_272.0), (r"falcon", 65_024.0), (r"olmo", 100_278.0), (r"bert|roberta", 30_522.0),
    (r"xlnet", 32_000.0),
)


def vocab_from_model_name(name: Any) -> float | None:
    """The vocabulary of a model family named in ``name`` (:data:`MODEL_VOCAB`), None when unknown."""
    if not isinstance(name, str):
        return None
    s = name.lower()
    return next((v for pattern, v in MODEL_VOCAB if re.search(pattern, s)), None)


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmbt])$")
_SIZE_FACTOR = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_model_params(text: Any) -> float | None:
    """A parameter count: a number (``7e9``) or a size token (``7b``, ``350m``, ``1.5B``)."""
    s = _norm(text)
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
    s = _norm(text)
    if s is None:
        return None
    if s in _METHOD:
        return _METHOD[s]
    raise ValueError(f"unknown finetune_method {text!r}")


# ---- tables ------------------------------------------------------------------------------------

_PARSERS: dict[str, Callable[[Any], Any]] = {
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
    ``precision_mode`` where it is null; a mode fills ``precision`` where that is null.

    Returns
    -------
    frame : DataFrame
        The same frame, columns rewritten.
    checks : list of (mask, reason)
        Rows whose value did not parse, per column (``unknown precision_mode 'x'`` style reasons are
        left to the caller: one reason per column, ``unparseable <column>``).
    """
    checks: list[tuple[np.ndarray, str]] = []
    mode_from_precision = None
    if "precision" in frame.columns:
        pairs, bad = _map_unique(frame["precision"], parse_precision)
        frame["precision"] = pd.Series([p[0] if p else None for p in pairs], index=frame.index, dtype=object)
        mode_from_precision = np.array([p[1] if p else None for p in pairs], dtype=object)
        keep = bad & frame["precision"].isna().to_numpy()
        checks.append((keep, "unparseable precision"))
    for col, parse in _PARSERS.items():
        if col not in frame.columns:
            continue
        values, bad = _map_unique(frame[col], parse)
        if col.endswith(("_size", "_params")) or col == "lora_rank":  # numeric columns
            frame[col] = np.array([np.nan if v is None else v for v in values], dtype="float64")
        else:
            frame[col] = pd.Series(values, index=frame.index, dtype=object)
        checks.append((bad, f"unparseable {col}"))
    if mode_from_precision is not None and mode_from_precision.any():
        current = frame["precision_mode"].to_numpy(dtype=object) if "precision_mode" in frame.columns else \
            np.full(len(frame), None, dtype=object)
        current = np.where(pd.isna(current), mode_from_precision, current)
        frame["precision_mode"] = pd.Series(current, index=frame.index, dtype=object)
    if "precision_mode" in frame.columns:
        mode = frame["precision_mode"].to_numpy(dtype=object)
        prec = frame["precision"].to_numpy(dtype=object) if "precision" in frame.columns else \
            np.full(len(frame), None, dtype=object)
        implied = np.array([m.split("-")[0] if isinstance(m, str) else None for m in mode], dtype=object)
        frame["precision"] = pd.Series(np.where(pd.isna(prec), implied, prec), index=frame.index, dtype=object)
    return frame, checks


# ---- key=value conventions (Kubernetes annotations, Slurm comments) ----------------------------

#: Accepted keys of ``key=value`` descriptors -> canonical column.
KEYS: Mapping[str, str] = {
    **{k: "precision_mode" for k in ("precision", "precision-mode", "precision_mode", "mixed-precision", "dtype",
                                     "prec")},
    **{k: "quantization" for k in ("quantization", "quantisation", "quant", "quantize", "weights")},
    **{k: "parallel_strategy" for k in ("parallel-strategy", "parallel_strategy", "strategy", "zero", "sharding",
                                        "distributed")},
    **{k: "tensor_parallel_size" for k in ("tensor-parallel", "tensor_parallel_size", "tensor-parallel-size", "tp")},
    **{k: "pipeline_parallel_size" for k in ("pipeline-parallel", "pipeline_parallel_size", "pipeline-parallel-size",
                                             "pp")},
    **{k: "context_parallel_size" for k in ("context-parallel", "context_parallel_size", "context-parallel-size", "cp",
                                            "sequence-parallel", "sequence_parallel_size", "sequence-parallel-size", "sp")},
    **{k: "image_size" for k in ("image-size", "image_size", "resolution", "img")},
    **{k: "vocab_size" for k in ("vocab-size", "vocab_size", "vocab")},
    **{k: "grad_checkpointing" for k in ("grad-checkpointing", "grad_checkpointing", "gradient-checkpointing",
                                         "activation-checkpointing", "ckpt", "gc", "ac")},
    **{k: "loss_implementation" for k in ("loss-implementation", "loss_implementation", "loss", "cross-entropy")},
    **{k: "lora_rank" for k in ("lora-rank", "lora_rank", "lora-r", "lora_r", "rank", "r")},
    **{k: "model_params" for k in ("model-params", "model_params", "params", "model-size")},
    **{k: "trainable_params" for k in ("trainable-params", "trainable_params", "trainable")},
    **{k: "finetune_method" for k in ("finetune-method", "finetune_method", "method", "finetune")},
    **{k: "optimizer" for k in ("optimizer", "optim")},
    **{k: "batch_size" for k in ("batch-size", "batch_size", "micro-batch", "micro_batch_size", "bs")},
    **{k: "seq_len" for k in ("seq-len", "seq_len", "sequence-length", "max-seq-len", "max_seq_length", "seq")},
}
_VALUE_PARSERS: dict[str, Callable[[Any], Any]] = {
    **_PARSERS, "model_params": parse_model_params, "finetune_method": parse_finetune_method,
    "optimizer": lambda v: _norm(v), "batch_size": parse_positive_int, "seq_len": parse_positive_int,
}
_PAIR = re.compile(r"([A-Za-z][\w.-]*)\s*[=:]\s*([^\s,;]+)")


def descriptors_from_pairs(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Canonical descriptor fields from ``(key, value)`` pairs; unknown keys and bad values are skipped.

    A ``precision`` value also sets ``precision`` (the 16-bit type) where the mode is not stated.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        col = KEYS.get(str(key).strip().lower())
        if col is None or col in out:
            continue
        if col == "precision_mode":
            try:
                prec, mode = parse_precision(value)
            except ValueError:
                continue
            if prec is not None:
                out.setdefault("precision", prec)
            if mode is not None:
                out[col] = mode
            continue
        try:
            parsed = _VALUE_PARSERS[col](value)
        except ValueError:
            continue
        if parsed is not None:
            out[col] = parsed
    return out


def descriptors_from_comment(text: Any) -> dict[str, Any]:
    """Descriptors written as ``key=value`` pairs (space, comma or semicolon separated) in free text."""
    if not isinstance(text, str) or "=" not in text and ":" not in text:
        return {}
    return descriptors_from_pairs(_PAIR.findall(text))


_NAME_TOKEN: list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, Any]]]] = [
    (re.compile(r"^(bf16|fp16)(true|mixed|pure|amp)$"),
     lambda m: ("precision_mode", f"{m.group(1)}-{'true' if m.group(2) in ('true', 'pure') else 'mixed'}")),
    (re.compile(r"^(bf16|fp16|fp32|fp8)$"), lambda m: ("precision", m.group(1))),
    (re.compile(r"^(nf4|int8|int4|4bit|8bit|gptq|awq)$"), lambda m: ("quantization", parse_quantization(m.group(1)))),
    (re.compile(r"^(ddp|fsdp|fsdp2|zero[123]|z[123])$"), lambda m: ("parallel_strategy", parse_parallel_strategy(m.group(1)))),
    (re.compile(r"^tp(\d+)$"), lambda m: ("tensor_parallel_size", float(m.group(1)))),
    (re.compile(r"^pp(\d+)$"), lambda m: ("pipeline_parallel_size", float(m.group(1)))),
    (re.compile(r"^(?:cp|sp)(\d+)$"), lambda m: ("context_parallel_size", float(m.group(1)))),
    (re.compile(r"^(gc|ckpt|gradckpt|actckpt)$"), lambda m: ("grad_checkpointing", "full")),
    (re.compile(r"^(nogc|nockpt)$"), lambda m: ("grad_checkpointing", "off")),
    (re.compile(r"^(?:r|rank|lorar)(\d+)$"), lambda m: ("lora_rank", float(m.group(1)))),
    (re.compile(r"^(liger|cce|chunkedce)$"), lambda m: ("loss_implementation", parse_loss_implementation(m.group(1)))),
    (re.compile(r"^(lora|qlora|dora)$"), lambda m: ("finetune_method", parse_finetune_method(m.group(1)))),
    (re.compile(r"^(\d+(?:\.\d+)?)(b|m)$"), lambda m: ("model_params", parse_model_params(m.group(0)))),
]


def descriptors_from_job_name(name: Any) -> dict[str, Any]:
    """Descriptors from a job name's tokens (split on ``-_./`` and spaces), e.g. ``llama-7b-qlora-r16-bf16-z3-gc``.

    Only whole tokens count (``bf16``, ``bf16true``, ``nf4``, ``zero3``/``z3``, ``fsdp``, ``tp8``,
    ``pp4``, ``cp2``, ``gc``/``ckpt``, ``nogc``, ``r16``, ``lora``/``qlora``, ``7b``/``350m``); a LoRA rank
    token counts only beside a ``lora``/``qlora`` token. The first match of each column wins. A model
    family in the name gives ``vocab_size`` (:func:`vocab_from_model_name`).
    """
    if not isinstance(name, str):
        return {}
    out: dict[str, Any] = {}
    for token in re.split(r"[-_./\s]+", name.lower()):
        for pattern, make in _NAME_TOKEN:
            match = pattern.match(token)
            if match:
                col, value = make(match)
                out.setdefault(col, value)
                break
    if out.get("finetune_method") not in ("lora", "qlora"):
        out.pop("lora_rank", None)
    vocab = vocab_from_model_name(name)
    if vocab is not None:
        out["vocab_size"] = vocab
    if "precision_mode" in out:
        out.setdefault("precision", out["precision_mode"].split("-")[0])
    return out


def descriptors_from_kubernetes(maps: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Descriptors from label/annotation maps (earlier maps win): ``predictor/<key>`` entries and a
    ``predictor/memory`` entry of ``key=value`` pairs."""
    out: dict[str, Any] = {}
    for mapping in maps:
        if not mapping:
            continue
        pairs = [(k[len(ANNOTATION_PREFIX):], v) for k, v in mapping.items()
                 if isinstance(k, str) and k.startswith(ANNOTATION_PREFIX) and k != ANNOTATION_PREFIX + "memory"]
        found = descriptors_from_pairs(pairs)
        found.update({k: v for k, v in descriptors_from_comment(mapping.get(ANNOTATION_PREFIX + "memory")).items()
                      if k not in found})
        for k, v in found.items():
            out.setdefault(k, v)
    return out
