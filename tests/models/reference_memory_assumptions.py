"""Frozen copy (commit f6d19f4) of the vectorised analytic memory path, the reference the fast paths are
tested and benchmarked against (``tests/models/test_memory_fast_path.py``, ``benchmarks/bench_memory_analytic.py``).
Do not edit: it is what "identical results" means.

What the memory estimate assumes where a job's record leaves a descriptor unknown.

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
from itertools import product

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
    cache: dict[str, int] = {}
    out = np.full(len(values), _UNKNOWN, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, str):
            if v not in cache:
                cache[v] = table.get(v.lower(), _UNKNOWN)
            out[i] = cache[v]
    return out


def _floats(values: np.ndarray, table: Mapping[str, float]) -> np.ndarray:
    return np.fromiter((table.get(v.lower(), -1.0) if isinstance(v, str) else -1.0 for v in values), "float64",
                       len(values))


def _lower(values: np.ndarray) -> np.ndarray:
    return np.array([v.lower() if isinstance(v, str) else None for v in values], dtype=object)


def resolve_scenarios(
    jobs: pd.DataFrame | JobColumns,
    method: np.ndarray,
    gpus: np.ndarray,
    params: np.ndarray,
    cap_mib: np.ndarray,
    evaluate: Callable[..., Mapping[str, np.ndarray]],
) -> tuple[Scenario, Scenario, np.ndarray]:
    """The point and upper scenarios of every job, and what the point assumed (module docstring).

    ``evaluate(scenario, k)`` maps a scenario to the estimate's terms (its ``total`` in MiB is read);
    ``k`` > 1 means the scenario holds ``k`` variants of every job end to end (``Scenario.tile``).
    """
    mode = _codes(object_column(jobs, "precision_mode"), MODE)
    precision = _lower(object_column(jobs, "precision"))
    quant = _floats(object_column(jobs, "quantization"), {k: (-2.0 if np.isnan(v) else v)
                                                           for k, v in QUANT_BYTES.items()})
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
    legacy = (precision == "int8") | (precision == "int4")
    quant = np.where((quant == -1.0) & legacy, np.where(precision == "int8", 1.0, QUANT_BYTES["int4"]), quant)
    kind = np.where((precision == "bf16") | (precision == "fp16"), precision, np.where(legacy, "bf16", ""))
    mode = np.where((mode == _UNKNOWN) & ((precision == "fp32") | (precision == "tf32")), MODE["fp32"], mode)
    mode = np.where((mode == _UNKNOWN) & (precision == "fp8"), MODE["fp8"], mode)
    unknown = {"precision_mode": mode == _UNKNOWN, "quantization": (quant == -1.0) & (method != "full"), "grad_checkpointing": ckpt == _UNKNOWN,
               "parallel_strategy": (strategy == _UNKNOWN) & (gpus > 1),
               "lora_rank": ~(rank > 0) & ~(trainable > 0) & (method != "full"), "optimizer": optimizer < 0,
               "batch_size": ~(batch > 0), "seq_len": ~(seq > 0) & ~(image > 0) & large,
               "vocab_size": ~(vocab > 0) & ~(image > 0)}
    qlora = method == "qlora"
    # bitsandbytes bases (nf4 / fp4 / int8; an unknown qlora quantisation is nf4): what PEFT's
    # ``prepare_model_for_kbit_training`` upcasts (BNB_QUANTIZATIONS)
    bnb = np.isin(_lower(object_column(jobs, "quantization")), BNB_QUANTIZATIONS) | (
        (quant == 1.0) & (precision == "int8")) | (unknown["quantization"] & qlora)
    bnb &= method != "full"
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
    k = np.where(kind == "", np.where(large, "bf16", "fp32"), kind)
    full_sharded = (method == "full") & sharded
    likely = np.select([k == "fp32", k == "fp16", full_sharded], [MODE["fp32"], MODE["fp16-mixed"], MODE["bf16-mixed"]],
                       MODE["bf16-true"])
    point = replace(base, mode=np.where(unknown["precision_mode"], likely, mode),
                    ckpt=np.where(unknown["grad_checkpointing"] & large, CKPT["full"], base.ckpt))
    point = _fit_point(point, unknown, cap_mib, evaluate)
    upper = _upper(base, unknown, kind, qlora, cap_mib, point, evaluate)
    return point, upper, _assumed(point, unknown)


def _fit_point(sc: Scenario, unknown: Mapping[str, np.ndarray], cap: np.ndarray,
               evaluate: Callable[..., Mapping[str, np.ndarray]]) -> Scenario:
    """Step the unknown memory savers on, in order, until the estimate fits the GPU."""
    over = evaluate(sc)["total"] > cap
    for name, attr, value in (("parallel_strategy", "strategy", STRATEGY["zero2"]),
                              ("parallel_strategy", "strategy", STRATEGY["zero3"]),
                              ("grad_checkpointing", "ckpt", CKPT["full"])):
        step = over & unknown[name]
        if step.any():
            sc = replace(sc, **{attr: np.where(step, value, getattr(sc, attr))})
            over = evaluate(sc)["total"] > cap
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
    fp16 = kind == "fp16"
    mixed = np.where(fp16, MODE["fp16-mixed"], MODE["bf16-mixed"])
    modes = (np.where(kind == "", MODE["fp32"], mixed), mixed, np.where(fp16, MODE["fp16-true"], MODE["bf16-true"]))
    grid = list(product(range(len(modes)), _UPPER_STRATEGIES, _SAVERS))
    if not unknown["precision_mode"].any():
        grid = [g for g in grid if g[0] == 0]
    if not unknown["parallel_strategy"].any():
        grid = [g for g in grid if g[1] == _UPPER_STRATEGIES[0]]
    if not unknown["grad_checkpointing"].any():
        grid = [g for g in grid if g[2] == _SAVERS[0]]
    n, k = len(cap), len(grid)
    modes_k = np.concatenate([np.where(unknown["precision_mode"], modes[m], base.mode) for m, _, _ in grid])
    strategy_k = np.concatenate([np.where(unknown["parallel_strategy"], st, base.strategy) for _, st, _ in grid])
    ckpt_k = np.concatenate([np.where(unknown["grad_checkpointing"], c, base.ckpt) for _, _, c in grid])
    best_total = np.full(n, -np.inf)
    best = point
    for _attempt in range(2):
        # every combination at once: rows of combination j are j * n ... (j + 1) * n - 1
        tiled = replace(sizes.tile(k), mode=modes_k, strategy=strategy_k, ckpt=ckpt_k)
        totals = evaluate(tiled, k)["total"].reshape(k, n)
        fits = np.where(totals <= cap[None, :], totals, -np.inf)
        pick = np.where(np.isfinite(fits).any(axis=0), np.argmax(fits, axis=0), np.argmin(totals, axis=0))
        chosen = tiled.take(pick * n + np.arange(n))
        found = np.isfinite(fits).any(axis=0)
        update = found | (_attempt == 1) | ~np.isfinite(best_total)
        best = best.where(update, chosen)
        best_total = np.where(found, fits[pick, np.arange(n)], best_total)
        missing = ~np.isfinite(best_total)
        if not missing.any():
            break
        sizes = replace(sizes, batch=np.where(missing, point.batch, sizes.batch),
                        seq_len=np.where(missing, point.seq_len, sizes.seq_len))
    return best


def _assumed(point: Scenario, unknown: Mapping[str, np.ndarray]) -> np.ndarray:
    """``"key=value; ..."`` of the unknown descriptors' point values, per job ("" when none)."""
    quant = np.array(list(QUANT_BYTES), dtype=object)
    quant_bytes = np.array([-2.0 if np.isnan(v) else v for v in QUANT_BYTES.values()])
    values = {
        "precision_mode": np.array(PRECISION_MODES, dtype=object)[np.clip(point.mode, 0, None)],
        "quantization": lambda: quant[np.argmin(np.abs(np.nan_to_num(point.quant_bytes, nan=-2.0)[:, None]
                                                       - quant_bytes[None, :]), axis=1)],
        "parallel_strategy": np.array(PARALLEL_STRATEGIES, dtype=object)[np.clip(point.strategy, 0, None)],
        "grad_checkpointing": np.array(GRAD_CHECKPOINTING, dtype=object)[np.clip(point.ckpt, 0, None)],
        "lora_rank": point.lora_rank, "optimizer": lambda: np.full(len(point.mode), "adamw", dtype=object),
        "batch_size": point.batch, "seq_len": point.seq_len, "vocab_size": point.vocab,
    }
    out = np.full(len(point.mode), "", dtype=object)
    for key, value in values.items():
        mask = unknown[key]
        if not mask.any():
            continue
        labels = _labels(value() if callable(value) else value)
        text = np.where(mask, key + "=" + labels, "")
        out = np.where(out == "", text, np.where(text == "", out, out + "; " + text))
    return out


def _labels(values: np.ndarray) -> np.ndarray:
    """Values as text (integral floats without a decimal point), formatting each distinct value once."""
    if values.dtype == object:
        return values.astype(str).astype(object)
    uniq, inverse = np.unique(values, return_inverse=True)
    text = np.array([str(int(v)) if np.isfinite(v) and v == int(v) else str(v) for v in uniq], dtype=object)
    return text[inverse.reshape(-1)]
