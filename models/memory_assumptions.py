"""What the memory estimate assumes where a job's record leaves a descriptor unknown.

Two scenarios are resolved per job (``resolve_scenarios``):

* **point**: the likely value of each unknown descriptor (:data:`POINT_RULES`); then, if that does
  not fit the job's GPU (its type's memory; the largest known type when the type is unknown), the
  memory savers an engineer reaches for, in this order, among the unknown ones: a higher ZeRO stage
  (``ddp`` -> ``zero2`` -> ``zero3``), full gradient checkpointing, a 16-bit-true precision. The
  values used are named in ``assumed``.
* **upper**: the maximum over every plausible combination of the unknown precision mode, parallel
  strategy and checkpointing, with quantisation, LoRA rank, batch and sequence length at their
  largest plausible value (:data:`UPPER_VALUES`). A combination is plausible when its estimate fits
  the GPU (a run that does not fit does not run); when none fits, batch and sequence length fall
  back to their point values, and failing that the most frugal combination is the bound.

Candidates of an unknown precision mode: ``X-mixed`` and ``X-true`` when ``precision`` names the
16-bit type ``X``; ``fp32``, ``bf16-mixed`` and ``bf16-true`` when nothing is known (fp8 and fp16
take no more memory than these). An unknown strategy on one GPU is ``ddp``; tensor and pipeline
sizes default to 1 (no model parallelism, the larger case); an unknown optimizer is AdamW (the
largest common one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

import numpy as np
import pandas as pd

from features.job_keys import JobColumns, numeric_column, object_column
from features.memory_descriptors import (
    GRAD_CHECKPOINTING,
    LOSS_IMPLEMENTATIONS,
    PARALLEL_STRATEGIES,
    PRECISION_MODES,
)

__all__ = ["Scenario", "BNB_QUANTIZATIONS", "POINT_RULES", "UPPER_VALUES", "MODE", "STRATEGY", "CKPT", "LOSS", "QUANT_BYTES", "OPTIMIZER_BYTES",
           "optimizer_state", "resolve_scenarios"]

MODE = {m: i for i, m in enumerate(PRECISION_MODES)}
STRATEGY = {s: i for i, s in enumerate(PARALLEL_STRATEGIES)}
CKPT = {c: i for i, c in enumerate(GRAD_CHECKPOINTING)}
LOSS = {c: i for i, c in enumerate(LOSS_IMPLEMENTATIONS)}
#: Bytes per frozen parameter by quantisation (NaN: stored in the training precision).
QUANT_BYTES: Mapping[str, float] = {"none": np.nan, "nf4": 4.127 / 8.0, "fp4": 4.5 / 8.0, "int4": 4.25 / 8.0,
                                    "int8": 1.0, "fp8": 1.0}
#: Quantisations of bitsandbytes (``load_in_4bit`` nf4 / fp4, ``load_in_8bit``). PEFT's
#: ``prepare_model_for_kbit_training`` (called by the QLoRA paper's ``qlora.py``, TRL and most
#: Hugging Face QLoRA recipes) casts every parameter left in 16 bits -- embedding, output layer,
#: norms -- to fp32 on such a base; GPTQ / AWQ (``int4``) and fp8 bases are left alone. The logits
#: of an fp32 output layer are fp32 too. Nothing in a record says whether a run called it, so the
#: point and the upper scenario both take it (the larger case; torchtune and fsdp_qlora do not).
BNB_QUANTIZATIONS = ("nf4", "fp4", "int8")
#: Optimizer state per trained parameter in fp32 (bytes), by the first word found in the optimizer's
#: name (Hugging Face ``optim`` values, torch and bitsandbytes class names): GaLore keeps two moments
#: projected to rank ~128 of ~4096 (2 x 4 / 16); LOMO fuses the update into backward and keeps none.
OPTIMIZER_BYTES: tuple[tuple[str, float], ...] = (
    ("galore", 0.5), ("lomo", 0.0), ("4bit", 1.0), ("8bit", 2.0), ("adafactor", 0.0), ("ademamix", 12.0),
    ("adam", 8.0), ("lion", 4.0), ("sgd", 4.0), ("rmsprop", 4.0), ("adagrad", 4.0), ("lamb", 8.0), ("shampoo", 8.0),
    ("muon", 4.0),
)
#: Words that mark an optimizer stepping each parameter during backward (no full gradient buffer).
IN_BACKWARD = ("in_bwd", "in-bwd", "in_backward", "in-backward", "lomo")
#: A paged optimizer (bitsandbytes ``paged_*``) keeps its state in CUDA unified memory, which the
#: driver evicts to host memory when the GPU runs short: it never makes a job run out of memory and
#: torch's allocator does not count it, so it is not resident state of the estimate.
PAGED = "paged"


def optimizer_state(name: object) -> tuple[float, bool]:
    """(resident state bytes per trained parameter, steps in backward) of an optimizer name;
    (-1, False) unknown. A paged optimizer's state is not resident (:data:`PAGED`)."""
    if not isinstance(name, str):
        return -1.0, False
    s = name.lower()
    in_bwd = any(k in s for k in IN_BACKWARD)
    state = next((b for word, b in OPTIMIZER_BYTES if word in s), -1.0)
    return (0.0 if state >= 0 and PAGED in s else state), in_bwd
#: Likely values of unknown descriptors (the point estimate's assumptions).
POINT_RULES: Mapping[str, str] = {
    "precision_mode": "bf16-true, or bf16-mixed/fp16-mixed for a full fine-tune under ZeRO/FSDP (whose "
                      "optimizers keep fp32 master weights); fp16-mixed for fp16; fp32 below 1e9 parameters",
    "quantization": "nf4 for qlora, none otherwise",
    "parallel_strategy": "ddp (stepped up to zero2, zero3 until it fits)",
    "grad_checkpointing": "full for models of 1e9 parameters or more (the default of most LLM fine-tuning "
                          "frameworks), off below (full if that does not fit)",
    "loss_implementation": "standard (the largest)",
    "lora_rank": "16", "optimizer": "adamw", "batch_size": "1", "vocab_size": "64,000",
    "seq_len": "512 for models of 1e9 parameters or more (smaller ones without one: vision models)",
}
UPPER_VALUES: Mapping[str, float] = {"lora_rank": 64.0, "batch_size": 8.0, "seq_len": 2048.0,
                                     "qlora_bytes": QUANT_BYTES["fp4"]}
POINT_LORA_RANK, POINT_BATCH, POINT_SEQ, POINT_IMAGE = 16.0, 1.0, 512.0, 224.0
#: Vocabulary assumed when unknown: the point takes a mid value of 2023-25 open models (32k Llama-2 /
#: Mistral, 64k Yi / ChatGLM, 128k Llama-3, 152k Qwen); the upper bound Qwen's 152k (Gemma's 256k is
#: the one family above it).
POINT_VOCAB, UPPER_VOCAB = 64_000.0, 151_936.0
_UPPER_STRATEGIES = tuple(STRATEGY[s] for s in ("ddp", "zero2", "zero3"))
_SAVERS = tuple(CKPT[c] for c in ("off", "selective", "full"))
_UNKNOWN = -1
#: The ``precision`` values the scenarios read, as codes (0: any other, or none).
_PRECISION = {p: i for i, p in enumerate(("", "bf16", "fp16", "fp32", "tf32", "fp8", "int8", "int4"))}
_BF16, _FP16, _FP32 = _PRECISION["bf16"], _PRECISION["fp16"], _PRECISION["fp32"]
_QUANT_CODES = {k: (-2.0 if np.isnan(v) else v) for k, v in QUANT_BYTES.items()}
#: What ``_assumed`` names, in this order.
_ASSUMED_KEYS = ("precision_mode", "quantization", "parallel_strategy", "grad_checkpointing", "lora_rank", "optimizer",
                 "batch_size", "seq_len", "vocab_size")
_QUANT_NAMES = tuple(QUANT_BYTES)
_QUANT_LABEL_BYTES = np.array([-2.0 if np.isnan(v) else v for v in QUANT_BYTES.values()])


@dataclass(frozen=True)
class Scenario:
    """Fully resolved descriptors, arrays of shape (n,): codes into ``PRECISION_MODES``,
    ``PARALLEL_STRATEGIES`` and ``GRAD_CHECKPOINTING`` for the categorical ones, bytes per
    parameter for quantisation (NaN: none) and optimizer."""

    mode: np.ndarray
    quant_bytes: np.ndarray
    strategy: np.ndarray
    tensor_parallel: np.ndarray
    pipeline_parallel: np.ndarray
    context_parallel: np.ndarray
    ckpt: np.ndarray
    loss: np.ndarray
    lora_rank: np.ndarray
    trainable: np.ndarray
    optimizer_bytes: np.ndarray
    grads_in_backward: np.ndarray
    batch: np.ndarray
    seq_len: np.ndarray
    image_size: np.ndarray
    vocab: np.ndarray
    kbit_fp32: np.ndarray

    def where(self, mask: np.ndarray, other: Scenario) -> Scenario:
        """This scenario with ``other``'s values where ``mask`` is true."""
        return Scenario(**{f.name: np.where(mask, getattr(other, f.name), getattr(self, f.name)) for f in fields(self)})

    def tile(self, k: int) -> Scenario:
        """``k`` copies end to end (for evaluating ``k`` variants of every job at once)."""
        return Scenario(**{f.name: np.tile(getattr(self, f.name), k) for f in fields(self)})

    def take(self, index: np.ndarray) -> Scenario:
        """The rows at ``index``."""
        return Scenario(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


def _codes(values: np.ndarray, table: Mapping[str, int]) -> np.ndarray:
    return np.array([table.get(v.lower(), _UNKNOWN) if isinstance(v, str) else _UNKNOWN for v in values.tolist()],
                    dtype=np.int64).reshape(len(values))


def _lower(values: np.ndarray) -> list[str | None]:
    return [v.lower() if isinstance(v, str) else None for v in values.tolist()]


def resolve_scenarios(
    jobs: pd.DataFrame | JobColumns,
    method: np.ndarray,
    gpus: np.ndarray,
    params: np.ndarray,
    cap_mib: np.ndarray,
    evaluate: Callable[..., Mapping[str, np.ndarray]],
) -> tuple[Scenario, Scenario, np.ndarray]:
    """The point and upper scenarios of every job, and what the point assumed (module docstring).

    ``evaluate(scenario, rows=None)`` maps a scenario to the estimate's terms (its ``total`` in MiB
    is read) of the jobs at ``rows`` (all by default); several candidates of every job come as one
    scenario whose fields broadcast (mode, strategy and checkpointing of shape (..., n), the others
    (n,)), and so do its terms.
    """
    mode = _codes(object_column(jobs, "precision_mode"), MODE)
    precision = np.array([_PRECISION.get(v, 0) for v in _lower(object_column(jobs, "precision"))], dtype=np.int64)
    quant_names = _lower(object_column(jobs, "quantization"))
    quant = np.array([_QUANT_CODES.get(v, -1.0) for v in quant_names], dtype=np.float64).reshape(len(quant_names))
    strategy = _codes(object_column(jobs, "parallel_strategy"), STRATEGY)
    ckpt = _codes(object_column(jobs, "grad_checkpointing"), CKPT)
    loss = _codes(object_column(jobs, "loss_implementation"), LOSS)
    names = object_column(jobs, "optimizer")
    uniq = {v: optimizer_state(v) for v in set(v for v in names if isinstance(v, str))}
    optimizer = np.fromiter((uniq[v][0] if isinstance(v, str) else -1.0 for v in names), "float64", len(names))
    in_bwd = np.fromiter((uniq[v][1] if isinstance(v, str) else False for v in names), bool, len(names))
    vocab = numeric_column(jobs, "vocab_size")
    tp, pp = numeric_column(jobs, "tensor_parallel_size"), numeric_column(jobs, "pipeline_parallel_size")
    cp, image = numeric_column(jobs, "context_parallel_size"), numeric_column(jobs, "image_size")
    rank, batch, seq = (numeric_column(jobs, c) for c in ("lora_rank", "batch_size", "seq_len"))
    trainable = numeric_column(jobs, "trainable_params")
    large = params >= 1e9
    # a legacy precision of int8/int4 names the frozen weights' storage, training in bf16
    int8 = precision == _PRECISION["int8"]
    legacy = int8 | (precision == _PRECISION["int4"])
    quant = np.where((quant == -1.0) & legacy, np.where(int8, 1.0, QUANT_BYTES["int4"]), quant)
    # the 16-bit type a precision names (a code of _PRECISION; 0: none)
    kind = np.where((precision == _BF16) | (precision == _FP16), precision, np.where(legacy, _BF16, 0))
    mode = np.where((mode == _UNKNOWN) & ((precision == _FP32) | (precision == _PRECISION["tf32"])), MODE["fp32"], mode)
    mode = np.where((mode == _UNKNOWN) & (precision == _PRECISION["fp8"]), MODE["fp8"], mode)
    lora = method != "full"
    unknown = {"precision_mode": mode == _UNKNOWN, "quantization": (quant == -1.0) & lora, "grad_checkpointing": ckpt == _UNKNOWN,
               "parallel_strategy": (strategy == _UNKNOWN) & (gpus > 1),
               "lora_rank": ~(rank > 0) & ~(trainable > 0) & lora, "optimizer": optimizer < 0,
               "batch_size": ~(batch > 0), "seq_len": ~(seq > 0) & ~(image > 0) & large,
               "vocab_size": ~(vocab > 0) & ~(image > 0)}
    qlora = method == "qlora"
    # bitsandbytes bases (nf4 / fp4 / int8; an unknown qlora quantisation is nf4): what PEFT's
    # ``prepare_model_for_kbit_training`` upcasts (BNB_QUANTIZATIONS)
    bnb = np.array([v in BNB_QUANTIZATIONS for v in quant_names], dtype=bool).reshape(len(quant_names)) | (
        (quant == 1.0) & int8) | (unknown["quantization"] & qlora)
    bnb &= lora
    base = Scenario(
        mode=mode,
        quant_bytes=np.where(quant >= 0, quant, np.where(unknown["quantization"] & qlora, QUANT_BYTES["nf4"], np.nan)),
        strategy=np.where(strategy == _UNKNOWN, STRATEGY["ddp"], strategy),
        tensor_parallel=np.where(tp > 0, tp, 1.0), pipeline_parallel=np.where(pp > 0, pp, 1.0),
        context_parallel=np.where(cp > 0, cp, 1.0),
        ckpt=np.where(ckpt == _UNKNOWN, CKPT["off"], ckpt),
        loss=np.where(loss == _UNKNOWN, LOSS["standard"], loss), lora_rank=np.where(rank > 0, rank, POINT_LORA_RANK),
        trainable=np.where(trainable > 0, trainable, np.nan),
        optimizer_bytes=np.where(optimizer >= 0, optimizer, 8.0), grads_in_backward=in_bwd,
        batch=np.where(batch > 0, batch, POINT_BATCH), seq_len=np.where(seq > 0, seq, np.where(large, POINT_SEQ, np.nan)),
        image_size=np.where(image > 0, image, POINT_IMAGE), vocab=np.where(vocab > 0, vocab, POINT_VOCAB),
        kbit_fp32=bnb,
    )
    sharded = base.strategy != STRATEGY["ddp"]
    k = np.where(kind == 0, np.where(large, _BF16, _FP32), kind)
    full_sharded = ~lora & sharded
    likely = np.select([k == _FP32, k == _FP16, full_sharded], [MODE["fp32"], MODE["fp16-mixed"], MODE["bf16-mixed"]],
                       MODE["bf16-true"])
    point = replace(base, mode=np.where(unknown["precision_mode"], likely, mode),
                    ckpt=np.where(unknown["grad_checkpointing"] & large, CKPT["full"], base.ckpt))
    point = _fit_point(point, unknown, cap_mib, evaluate)
    upper = _upper(base, unknown, kind, qlora, cap_mib, point, evaluate)
    return point, upper, _assumed(point, unknown)


def _fit_point(sc: Scenario, unknown: Mapping[str, np.ndarray], cap: np.ndarray,
               evaluate: Callable[..., Mapping[str, np.ndarray]]) -> Scenario:
    """Step the unknown memory savers on, in order, until the estimate fits the GPU: ``zero2``, then
    ``zero3`` (an unknown strategy), then full checkpointing (an unknown one), then a 16-bit-true mode.

    The six strategy x checkpointing variants a job can step through are evaluated at once (shape
    (6, n), variant ``3 * checkpointing + strategy``); each job then follows its own steps."""
    u_strategy, u_ckpt = unknown["parallel_strategy"], unknown["grad_checkpointing"]
    strategies = np.stack([sc.strategy, np.where(u_strategy, STRATEGY["zero2"], sc.strategy),
                           np.where(u_strategy, STRATEGY["zero3"], sc.strategy)])
    ckpts = np.stack([sc.ckpt, np.where(u_ckpt, CKPT["full"], sc.ckpt)])
    totals = np.broadcast_to(evaluate(replace(sc, strategy=strategies[None], ckpt=ckpts[:, None]))["total"],
                             (2, 3, len(cap))).reshape(6, len(cap))
    above = totals > cap
    over, at_strategy, columns = above[0], np.zeros(len(cap), dtype=np.int64), np.arange(len(cap))
    for value in (1, 2):  # zero2, zero3
        step = over & u_strategy
        at_strategy = np.where(step, value, at_strategy)
        over = np.where(step, above[value], over)
    step = over & u_ckpt
    over = np.where(step, above[3 + at_strategy, columns], over)
    sc = replace(sc, strategy=strategies[at_strategy, columns], ckpt=np.where(step, ckpts[1], ckpts[0]))
    step = over & unknown["precision_mode"]
    if not step.any():
        return sc
    true16 = np.select([sc.mode == MODE["bf16-mixed"], sc.mode == MODE["fp16-mixed"]],
                       [MODE["bf16-true"], MODE["fp16-true"]], sc.mode)
    return replace(sc, mode=np.where(step, true16, sc.mode))


def _upper(base: Scenario, unknown: Mapping[str, np.ndarray], kind: np.ndarray, qlora: np.ndarray, cap: np.ndarray,
           point: Scenario, evaluate: Callable[..., Mapping[str, np.ndarray]]) -> Scenario:
    """The largest plausible scenario (module docstring)."""
    sizes = replace(
        base,
        quant_bytes=np.where(unknown["quantization"] & qlora, UPPER_VALUES["qlora_bytes"], base.quant_bytes),
        lora_rank=np.where(unknown["lora_rank"], UPPER_VALUES["lora_rank"], base.lora_rank),
        batch=np.where(unknown["batch_size"], UPPER_VALUES["batch_size"], base.batch),
        seq_len=np.where(unknown["seq_len"], UPPER_VALUES["seq_len"], base.seq_len),
        vocab=np.where(unknown["vocab_size"], UPPER_VOCAB, base.vocab),
    )
    fp16 = kind == _FP16
    mixed = np.where(fp16, MODE["fp16-mixed"], MODE["bf16-mixed"])
    modes = (np.where(kind == 0, MODE["fp32"], mixed), mixed, np.where(fp16, MODE["fp16-true"], MODE["bf16-true"]))
    # the candidates: every combination of the unknown mode, strategy and checkpointing (the first
    # value only of one no job leaves unknown), evaluated at once by broadcasting: the terms of
    # shape (modes, strategies, checkpointing, n) are candidates in ``product`` order
    m_dim = range(len(modes)) if unknown["precision_mode"].any() else range(1)
    s_dim = _UPPER_STRATEGIES if unknown["parallel_strategy"].any() else _UPPER_STRATEGIES[:1]
    c_dim = _SAVERS if unknown["grad_checkpointing"].any() else _SAVERS[:1]
    modes_c = np.where(unknown["precision_mode"], np.stack(modes)[list(m_dim)], base.mode)
    strategies_c = np.where(unknown["parallel_strategy"], np.array(s_dim, dtype=np.int64)[:, None], base.strategy)
    ckpts_c = np.where(unknown["grad_checkpointing"], np.array(c_dim, dtype=np.int64)[:, None], base.ckpt)
    first, first_total = _largest_fitting(sizes, modes_c, strategies_c, ckpts_c, cap, evaluate, None)
    # jobs none of whose candidates fits (nor gives a finite total): again at the point's batch and
    # sequence length, only those jobs (the others would pick the same candidate again)
    again = np.flatnonzero(~np.isfinite(first_total))
    if len(again):
        retry = replace(sizes.take(again), batch=point.batch[again], seq_len=point.seq_len[again])
        second = _largest_fitting(retry, modes_c[:, again], strategies_c[:, again], ckpts_c[:, again], cap[again],
                                  evaluate, again)[0]
        fields_ = {}
        for f in fields(Scenario):
            column = getattr(first, f.name).copy()
            column[again] = getattr(second, f.name)
            fields_[f.name] = column
        return Scenario(**fields_)
    return first


def _largest_fitting(sizes: Scenario, modes_c: np.ndarray, strategies_c: np.ndarray, ckpts_c: np.ndarray,
                     cap: np.ndarray, evaluate: Callable[..., Mapping[str, np.ndarray]],
                     rows: np.ndarray | None) -> tuple[Scenario, np.ndarray]:
    """Per job, the candidate with the largest total that fits its GPU (the first of equal ones, in
    ``product`` order of the rows of ``modes_c``, ``strategies_c``, ``ckpts_c``), else the smallest;
    and that fitting total (-inf where none fits)."""
    shape = (len(modes_c), len(strategies_c), len(ckpts_c), len(cap))
    sc = replace(sizes, mode=modes_c[:, None, None, :], strategy=strategies_c[None, :, None, :],
                 ckpt=ckpts_c[None, None, :, :])
    totals = np.broadcast_to(evaluate(sc, rows)["total"], shape).reshape(shape[0] * shape[1] * shape[2], len(cap))
    fits = np.where(totals <= cap[None, :], totals, -np.inf)
    found = np.isfinite(fits).any(axis=0)
    pick = np.where(found, np.argmax(fits, axis=0), np.argmin(totals, axis=0))
    columns = np.arange(len(cap))
    m, s, c = np.unravel_index(pick, shape[:3])
    chosen = replace(sizes, mode=modes_c[m, columns], strategy=strategies_c[s, columns], ckpt=ckpts_c[c, columns])
    return chosen, np.where(found, fits[pick, columns], -np.inf)


def _assumed(point: Scenario, unknown: Mapping[str, np.ndarray]) -> np.ndarray:
    """``"key=value; ..."`` of the unknown descriptors' point values, per job ("" when none)."""
    names = {"precision_mode": (PRECISION_MODES, point.mode), "parallel_strategy": (PARALLEL_STRATEGIES, point.strategy),
             "grad_checkpointing": (GRAD_CHECKPOINTING, point.ckpt)}
    numbers = {"lora_rank": point.lora_rank, "batch_size": point.batch, "seq_len": point.seq_len,
               "vocab_size": point.vocab}
    parts: list[list[str]] = [[] for _ in range(len(point.mode))]
    for key in _ASSUMED_KEYS:
        rows = np.flatnonzero(unknown[key])
        if not len(rows):
            continue
        if key in names:
            vocabulary, codes = names[key]
            labels = [vocabulary[c] for c in np.clip(codes[rows], 0, None).tolist()]
        elif key == "quantization":
            near = np.abs(np.nan_to_num(point.quant_bytes[rows], nan=-2.0)[:, None] - _QUANT_LABEL_BYTES[None, :])
            labels = [_QUANT_NAMES[j] for j in np.argmin(near, axis=1).tolist()]
        elif key == "optimizer":
            labels = ["adamw"] * len(rows)
        else:
            labels = _labels(numbers[key][rows])
        prefix = key + "="
        for i, label in zip(rows.tolist(), labels, strict=True):
            parts[i].append(prefix + label)
    out = np.empty(len(parts), dtype=object)
    out[:] = ["; ".join(p) for p in parts]
    return out


def _labels(values: np.ndarray) -> list[str]:
    """Numbers as text (integral floats without a decimal point), formatting each distinct value once."""
    cache: dict[float, str] = {}
    out = []
    for v in values.tolist():
        text = cache.get(v)
        if text is None:
            x = np.float64(v)
            text = cache[v] = str(int(x)) if np.isfinite(x) and x == int(x) else str(x)
        out.append(text)
    return out
