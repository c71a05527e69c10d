"""Where memory descriptors live in job records: key=value pairs, Kubernetes labels and annotations,
Slurm comments, job names, and model families' vocabularies. Values are parsed by
``features.memory_descriptors``.

Conventions (documented in ``docs/notes/memory.md``)
----------------------------------------------------
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

from features.memory_descriptors import (
    PARSERS,
    norm_token,
    parse_finetune_method,
    parse_loss_implementation,
    parse_model_params,
    parse_parallel_strategy,
    parse_positive_int,
    parse_precision,
    parse_quantization,
)

__all__ = ["ANNOTATION_PREFIX", "KEYS", "MODEL_VOCAB", "vocab_from_model_name", "descriptors_from_pairs",
           "descriptors_from_comment", "descriptors_from_job_name", "descriptors_from_kubernetes",
           "descriptors_from_slurm"]

ANNOTATION_PREFIX = "predictor/"

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
_VALUEPARSERS: dict[str, Callable[[Any], Any]] = {
    **PARSERS, "model_params": parse_model_params, "finetune_method": parse_finetune_method,
    "optimizer": lambda v: norm_token(v), "batch_size": parse_positive_int, "seq_len": parse_positive_int,
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
            parsed = _VALUEPARSERS[col](value)
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


def descriptors_from_slurm(comments: Iterable[Any], names: Iterable[Any]) -> list[dict[str, Any]]:
    """Per job: descriptors of its ``--comment`` (``key=value`` pairs), job-name tokens filling the
    rest. Each distinct (comment, name) pair is parsed once."""
    cache: dict[tuple[Any, Any], dict[str, Any]] = {}
    out = []
    for comment, name in zip(comments, names, strict=True):
        key = (comment if isinstance(comment, str) else None, name if isinstance(name, str) else None)
        if key not in cache:
            found = descriptors_from_comment(key[0])
            for col, value in descriptors_from_job_name(key[1]).items():
                found.setdefault(col, value)
            cache[key] = found
        out.append(cache[key])
    return out
