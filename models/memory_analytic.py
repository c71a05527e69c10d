"""Analytic peak GPU memory per GPU of a training job, from its record alone.

``analytic_memory(jobs)`` gives, per job, a point estimate, an upper bound and the descriptor values
each assumed (``models.memory_assumptions`` resolves what the record leaves unknown). For one
resolved set of descriptors the estimate is (bytes per GPU, then MiB)::

    peak = allocator * (weights + gradients + optimizer + adapters + activations + logits)
           + logit_reserve * logits + overhead

1. **Model states** (ZeRO paper, Rajbhandari et al., SC'20, sec. 3; DeepSpeed's
   ``estimate_zero2/3_model_states_mem_needs``). Bytes per *trained* parameter, by precision mode:
   ``fp32`` 4 + 4 + optimizer; ``bf16-mixed``/``fp16-mixed``/``fp8`` 2 (16-bit weights) + 2
   (16-bit gradients) + 4 (fp32 master) + optimizer = the paper's 2 + 2 + 12 with AdamW (torch AMP
   keeps fp32 weights and gradients instead: the same 16); ``bf16-true``/``fp16-true`` 2 + 2 +
   optimizer in 16 bits (AdamW 4). Optimizer state per parameter in fp32: AdamW 8, 8-bit AdamW 2,
   4-bit 1, SGD+momentum / Lion 4, Adafactor ~0 (halved in a 16-bit-true mode, 8-/4-bit unchanged).
2. **Sharding** (one GPU of ``N``; ``d = N / (tp * pp)`` data-parallel ranks): ``ddp`` replicates;
   ``zero1`` divides optimizer and master by ``d``; ``zero2`` also gradients; ``zero3``/``fsdp``
   also weights, plus two gathered layers (``2 x 12 h^2`` 16-bit weights: the working unit and its
   prefetch); ``*-offload`` keeps optimizer, master and gradients (and for ZeRO-3/FSDP the weights)
   in CPU memory. Tensor and pipeline parallelism divide every state by ``tp * pp``.
3. **LoRA / QLoRA** (Hu et al., 2021; Dettmers et al., 2023): the frozen base is stored at 2 bytes
   (4 in fp32), or by ``quantization`` (nf4 with double quantisation 4.127 bits, fp4 4.5 bits, int4
   GPTQ/AWQ 4.25 bits, int8 / fp8 8 bits) except its embedding and output layers (``2 V h``
   parameters, kept in 16 bits; in fp32 on a bitsandbytes base, nf4 / fp4 / int8, which PEFT's
   ``prepare_model_for_kbit_training`` upcasts, and then the logits are fp32 too:
   ``models.memory_assumptions.BNB_QUANTIZATIONS``); it is sharded by ZeRO-3/FSDP and split by tp/pp. Adapters hold
   ``trainable_params`` where the record says, else ``19 r h L`` (every linear layer, "all-linear":
   ``19 h`` inputs plus outputs per layer of a Llama-shaped block), in fp32 (4 + 4 + optimizer
   bytes each; 16-bit in a 16-bit-true run, as the rest), sharded and offloaded like any trained
   parameter. A full
   fine-tune with fewer ``trainable_params`` than parameters keeps the rest frozen.
4. **Activations** of one micro-batch of ``t = b s`` tokens (Korthikanti et al., MLSys'23, Eq. 1;
   FlashAttention assumed, so no ``s^2`` term): ``c t h L`` bytes, ``c`` fitted on measured peaks
   (``activation_bytes``; Megatron's ideal is 34); with full checkpointing ``c_ckpt t h L`` (the
   layer inputs) plus one layer recomputed (``c t h``); selective recomputation takes
   ``SELECTIVE_SHARE`` of ``c``. fp32 doubles them, fp8 takes 3/4. Tensor, pipeline and context
   parallelism divide them (``batch_size`` is what one data-parallel rank processes per step: a
   pipeline stage holds its ``L / pp`` layers for the micro-batches in flight). Logits: ``t V``
   values at ``logit_bytes`` each (16-bit logits, their fp32 upcast and the fp32 gradient), 2 with a
   chunked loss, none with a fused one (``loss_implementation``). A job
   without a sequence length (a vision model) gets ``image_sample_mib`` per sample at 224 x 224
   pixels, scaled by ``(image_size / 224)^2``. The shape comes from the parameter count (``P ~= 12 L h^2``, ``h / L ~= 100``: Kaplan et
   al., 2020, and published shapes); the vocabulary is ``vocab_size`` (when unknown, what
   ``models.memory_assumptions`` assumes).
5. **Allocator and overhead**: the caching allocator's reserved-over-allocated ratio
   (``allocator``) and the fragments the logits' large transient blocks leave (``logit_reserve``
   times the logits), and the CUDA context, cuBLAS workspaces and NCCL buffers (``context_mib``,
   plus ``NCCL_BUFFERS_MIB`` on more than one GPU).

6. **Upper bound** (``upper_bound``), conditional on what the record says: where every descriptor
   is known, the point widened by the log margin of its segment, *states-dominated* (model states
   above ``cal.upper_states_share`` of states, activations and overhead: fixed by the descriptors)
   or not (activations and logits dominate, whose cost differs between implementations); where one
   is unknown, also the upper scenario (the largest plausible values, ``models.memory_assumptions``)
   widened by a third margin >= 0, so that the bound covers every plausible value's estimate. Each
   margin is a conformal quantile of held-out residuals (``models.memory_fitting``). A job whose
   point fits its GPU type is capped at that type's memory (``cap_upper``).

The constants marked *fitted* come from ``models.memory_calibration`` (fitted on measured peaks of
public projects, shipped in ``models/calibration/``). Jobs without ``model_params`` get NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache

import numpy as np
import pandas as pd

from features.job_keys import JobColumns, numeric_column, object_column
from models.memory_assumptions import CKPT, LOSS, MODE, STRATEGY, Scenario, resolve_scenarios
from models.memory_calibration import MemoryCalibration, shipped_calibration

__all__ = [
    "GPU_MEMORY_MIB",
    "NCCL_BUFFERS_MIB",
    "KBIT_LOGIT_EXTRA_BYTES",
    "SELECTIVE_SHARE",
    "MemoryParts",
    "transformer_shape",
    "memory_terms",
    "ResolvedJobs",
    "resolve_jobs",
    "parts_from",
    "as_measured",
    "states_share",
    "upper_bound",
    "cap_upper",
    "analytic_memory",
    "SCALAR_ROWS",
]

MIB = float(2**20)
#: Memory per device (MiB, as ``nvidia-smi`` reports it) of GPU types this layer knows; callers
#: pass their own inventory's table where it differs (models never import ``predictor``).
GPU_MEMORY_MIB: Mapping[str, float] = {
    "K80": 11_441, "P100": 16_384, "T4": 15_360, "V100": 16_384, "V100M32": 32_768, "G2": 24_576,
    "G3": 24_576, "A10": 24_576, "A40": 46_068, "L40S": 46_068, "A100-40GB": 40_960,
    "A100-80GB": 81_920, "H100-80GB": 81_559, "H100-94GB": 95_830, "H200": 143_771, "B200": 183_359,
    "RTX3090": 24_576, "RTX4090": 24_564, "A6000": 49_140,
}
NCCL_BUFFERS_MIB = 250.0
#: Selective recomputation keeps this share of the activations (Korthikanti et al.: the attention
#: core is recomputed, the linear layers' inputs kept).
SELECTIVE_SHARE = 0.6
#: Bytes per logit with a chunked loss: the 16-bit logits stay for backward, each chunk's fp32 upcast
#: is transient (a fused loss keeps none).
CHUNKED_LOGIT_BYTES = 2.0
#: Parameters of an all-linear LoRA adapter per rank, hidden unit and layer (q, k, v, o: 2h each;
#: gate, up, down: h + 2.7h each).
LORA_PARAMS_PER_RANK_HIDDEN_LAYER = 19.0
#: Bytes more per logit when the output layer is fp32 (``models.memory_assumptions.BNB_QUANTIZATIONS``):
#: the logits themselves are fp32 instead of 16-bit.
KBIT_LOGIT_EXTRA_BYTES = 2.0

#: Up to this many jobs ``analytic_memory`` computes row by row in Python floats
#: (``models.memory_scalar``, the same results); above, vectorised.
SCALAR_ROWS = 24

_LOW_BIT_OPTIMIZER = 2.5  # at or below this many bytes the optimizer state is quantised, not in the param dtype


def _table(codes: Mapping[str, int], members: tuple[str, ...], values: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Lookup array over a vocabulary's codes: ``values[1]`` for members, ``values[0]`` otherwise."""
    out = np.full(len(codes), values[0])
    out[[codes[m] for m in members]] = values[1]
    return out


_TRUE16 = _table(MODE, ("bf16-true", "fp16-true")).astype(bool)
_WEIGHT_B = _table(MODE, ("fp32",), (2.0, 4.0))  # bytes per weight (and per gradient) by precision mode
_MASTER_B = _table(MODE, ("fp32", "bf16-true", "fp16-true"), (4.0, 0.0))  # fp32 master copy of mixed modes
_ADAPTER_B = _table(MODE, ("bf16-true", "fp16-true"), (4.0, 2.0))
_ACT_SCALE = _table(MODE, ("fp32",), (1.0, 2.0)) * _table(MODE, ("fp8",), (1.0, 0.75))
_OFFLOAD = _table(STRATEGY, ("zero2-offload", "zero3-offload", "fsdp-offload")).astype(bool)
_SHARD_OPT = _table(STRATEGY, ("zero1", "zero2", "zero3", "fsdp", "zero2-offload", "zero3-offload",
                               "fsdp-offload")).astype(bool)
_SHARD_GRAD = _table(STRATEGY, ("zero2", "zero3", "fsdp", "zero2-offload", "zero3-offload", "fsdp-offload")).astype(bool)
_SHARD_WEIGHTS = _table(STRATEGY, ("zero3", "fsdp", "zero3-offload", "fsdp-offload")).astype(bool)
_STAGE = np.array([{"zero1": 1.0, "zero2": 2.0, "zero2-offload": 2.0, "zero3": 3.0, "fsdp": 3.0, "zero3-offload": 3.0,
                    "fsdp-offload": 3.0}.get(s, 0.0) for s in STRATEGY])


class MemoryParts(dict):
    """Components of the estimate per job (arrays of shape (n,), MiB unless named otherwise):
    ``states``, ``activations`` (logits included), ``logits``, ``overhead``, ``total`` (the point estimate), ``upper`` (the
    analytic upper bound, every plausible value of an unknown descriptor covered), ``zero_stage``
    (0-3 as assumed; offload counts as its stage), ``assumed`` (object array: the values the point
    estimate assumed for what the record leaves unknown, ``"key=value; ..."``, "" when nothing was)."""


def transformer_shape(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hidden size and layer count implied by a parameter count (``P = 12 L h^2``, ``h = 100 L``)."""
    hidden = np.cbrt(100.0 * np.asarray(params, dtype=float) / 12.0)
    return hidden, hidden / 100.0


def memory_terms(params: np.ndarray, method: np.ndarray, num_gpus: np.ndarray, sc: Scenario,
                 cal: MemoryCalibration) -> dict[str, np.ndarray]:
    """Each term for fully resolved descriptors (the module docstring's formulas).

    Returns ``states``, ``activations`` (logits included), ``logits``, ``overhead``, ``total`` (MiB;
    allocator factor and overhead applied) and ``zero_stage``, arrays of shape (n,); NaN without a size.
    """
    return _terms(_sized(params, method), num_gpus, sc, cal)


def _sized(params: np.ndarray, method: np.ndarray) -> tuple[np.ndarray, ...]:
    """What ``memory_terms`` derives from the size and method alone (no scenario changes it)."""
    p = np.where(params > 0, params, np.nan)
    hidden, layers = transformer_shape(np.nan_to_num(p, nan=1.0))
    return hidden, layers, method == "full", np.nan_to_num(p, nan=0.0), np.isnan(p)


@lru_cache(maxsize=16)
def _calibration_tables(activation_bytes: float, checkpoint_bytes: float,
                        logit_bytes: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lookup arrays of a calibration: stored activations per token and hidden unit ``a * layers + b``
    by checkpointing code (off, selective, full), and bytes per logit by loss code."""
    a, b = np.zeros(len(CKPT)), np.zeros(len(CKPT))
    a[CKPT["off"]], a[CKPT["selective"]] = activation_bytes, SELECTIVE_SHARE * activation_bytes
    a[CKPT["full"]], b[CKPT["full"]] = checkpoint_bytes, activation_bytes  # inputs kept, one layer redone
    logit_b = np.zeros(len(LOSS))
    logit_b[LOSS["standard"]], logit_b[LOSS["chunked"]] = logit_bytes, CHUNKED_LOGIT_BYTES
    for table in (a, b, logit_b):
        table.flags.writeable = False
    return a, b, logit_b


def _terms(sized: tuple[np.ndarray, ...], num_gpus: np.ndarray, sc: Scenario, cal: MemoryCalibration,
           only_total: bool = False) -> dict[str, np.ndarray]:
    hidden, layers, full, size, nan = sized
    true16 = _TRUE16[sc.mode]
    opt = np.where(true16 & (sc.optimizer_bytes > _LOW_BIT_OPTIMIZER), sc.optimizer_bytes / 2.0, sc.optimizer_bytes)
    weight_b, master_b, adapter_b = _WEIGHT_B[sc.mode], _MASTER_B[sc.mode], _ADAPTER_B[sc.mode]
    known = sc.trainable > 0
    emb = np.minimum(2.0 * sc.vocab * hidden, 0.5 * size)
    trained = np.where(full, np.where(known, np.minimum(sc.trainable, size), size), 0.0)
    adapters = np.where(full, 0.0, np.where(known, sc.trainable,
                                            LORA_PARAMS_PER_RANK_HIDDEN_LAYER * sc.lora_rank * hidden * layers))
    frozen_b = np.where(np.isnan(sc.quant_bytes), weight_b, sc.quant_bytes)
    # a bitsandbytes base's layers left unquantised are fp32 after prepare_model_for_kbit_training
    kbit = sc.kbit_fp32 & ~np.isnan(sc.quant_bytes) & ~full
    emb_b = np.where(kbit, 4.0, weight_b)
    frozen = np.where(full, (size - trained) * weight_b, (size - emb) * frozen_b + emb * emb_b)

    mp = np.maximum(sc.tensor_parallel * sc.pipeline_parallel, 1.0)
    dp = np.maximum(num_gpus / mp, 1.0)
    offload, shard_w = _OFFLOAD[sc.strategy], _SHARD_WEIGHTS[sc.strategy]
    # adapters train in fp32 (PEFT's default) except in a 16-bit-true run, which keeps all it trains in 16 bits
    opt_master = trained * (opt + master_b) + adapters * opt
    opt_master = np.where(offload, 0.0, opt_master / np.where(_SHARD_OPT[sc.strategy], dp, 1.0))
    grads = (trained * weight_b + adapters * adapter_b) / np.where(_SHARD_GRAD[sc.strategy], dp, 1.0)
    grads = np.where(offload | sc.grads_in_backward, 0.0, grads)
    weights = (trained * weight_b + adapters * adapter_b + frozen) / np.where(shard_w, dp, 1.0)
    weights = np.where(offload & shard_w, 0.0, weights)
    gathered = np.where(shard_w & (dp > 1), 2.0 * 12.0 * hidden**2 * 2.0, 0.0)
    states = (weights + grads + opt_master) / mp + gathered

    split = np.maximum(sc.tensor_parallel, 1.0) * np.maximum(sc.pipeline_parallel, 1.0) * np.maximum(
        sc.context_parallel, 1.0)
    act_scale = _ACT_SCALE[sc.mode] / split
    tokens = sc.batch * sc.seq_len
    a, b, logit_b = _calibration_tables(cal.activation_bytes, cal.checkpoint_bytes, cal.logit_bytes)
    stored = tokens * hidden * (a[sc.ckpt] * layers + b[sc.ckpt])
    text = sc.seq_len > 0
    vision = sc.batch * cal.image_sample_mib * MIB * (sc.image_size / 224.0) ** 2 * act_scale
    # an fp32 output layer (a bitsandbytes base, above) gives fp32 logits: 2 more bytes each where they are kept
    logit_b = logit_b[sc.loss] + np.where((sc.loss == LOSS["standard"]) & kbit & (weight_b < 4.0), KBIT_LOGIT_EXTRA_BYTES, 0.0)
    logits = np.where(text, tokens * sc.vocab * logit_b / split, 0.0)
    acts = np.where(text, stored * act_scale, vision) + logits
    overhead = cal.context_mib + np.where(num_gpus > 1, NCCL_BUFFERS_MIB, 0.0)
    total = (cal.allocator * (states + acts) + cal.logit_reserve * logits) / MIB + overhead
    if only_total:
        return {"total": np.where(nan, np.nan, total)}
    stage = _STAGE[sc.strategy]
    return {
        "states": np.where(nan, np.nan, states / MIB),
        "activations": np.where(nan, np.nan, acts / MIB),
        "logits": np.where(nan, np.nan, logits / MIB),
        "overhead": np.where(nan, np.nan, overhead),
        "total": np.where(nan, np.nan, total),
        "zero_stage": np.where(nan, np.nan, stage),
    }


@dataclass(frozen=True)
class ResolvedJobs:
    """Jobs with every descriptor resolved: size, method, GPUs and the point and upper scenarios."""

    params: np.ndarray
    method: np.ndarray
    num_gpus: np.ndarray
    point: Scenario
    upper: Scenario
    assumed: np.ndarray
    cap_mib: np.ndarray

    def terms(self, which: str, cal: MemoryCalibration) -> dict[str, np.ndarray]:
        """``memory_terms`` of the ``"point"`` or ``"upper"`` scenario."""
        return memory_terms(self.params, self.method, self.num_gpus, getattr(self, which), cal)


def resolve_jobs(jobs: pd.DataFrame | JobColumns, gpu_memory_mib: Mapping[str, float] | None = None, *,
                 calibration: MemoryCalibration | None = None) -> ResolvedJobs:
    """Read the columns ``analytic_memory`` uses and resolve the unknown descriptors (its parameters)."""
    table = GPU_MEMORY_MIB if gpu_memory_mib is None else gpu_memory_mib
    cal = shipped_calibration() if calibration is None else calibration
    n = len(jobs)
    params = numeric_column(jobs, "model_params")
    method = np.array([v.lower() if isinstance(v, str) else "full" for v in object_column(jobs, "finetune_method")],
                      dtype=object)
    gpus = np.maximum(np.nan_to_num(numeric_column(jobs, "num_gpus"), nan=1.0), 1.0)
    largest = max(table.values(), default=np.inf)
    cap = np.fromiter((table.get(t, np.nan) if isinstance(t, str) else np.nan for t in object_column(jobs, "gpu_type")),
                      "float64", n)
    known_cap = cap
    cap = np.where(np.isnan(cap), largest, cap)

    sized = _sized(params, method)

    def evaluate(sc: Scenario, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        if rows is None:
            return _terms(sized, gpus, sc, cal, only_total=True)
        return _terms(tuple(x[rows] for x in sized), gpus[rows], sc, cal, only_total=True)

    point, upper, assumed = resolve_scenarios(jobs, method, gpus, params, cap, evaluate)
    return ResolvedJobs(params=params, method=method, num_gpus=gpus, point=point, upper=upper,
                        assumed=np.where(params > 0, assumed, ""), cap_mib=known_cap)


def cap_upper(upper: np.ndarray, point: np.ndarray, cap_mib: np.ndarray) -> np.ndarray:
    """A job whose point estimate fits its GPU type cannot peak above that type's memory: the bound
    is capped there (one whose estimate does not fit keeps its bound, the warning that it will not)."""
    return np.where(np.isfinite(cap_mib) & (point <= cap_mib), np.minimum(upper, cap_mib), upper)


def as_measured(terms: Mapping[str, np.ndarray], cal: MemoryCalibration, with_reserve: np.ndarray | bool = True,
                with_context: np.ndarray | bool = True) -> np.ndarray:
    """A scenario's estimate as a peak metric sees it, MiB: the device's view (``total``, what a
    scheduler reserves) by default; ``with_reserve`` / ``with_context`` False leave out the
    allocator's reserve / the CUDA context (a peak measured by torch, not the device)."""
    dynamic = terms["states"] + terms["activations"]
    reserved = cal.allocator * dynamic + cal.logit_reserve * terms["logits"]
    return np.where(with_reserve, reserved, dynamic) + np.where(with_context, terms["overhead"], 0.0)


def states_share(terms: Mapping[str, np.ndarray]) -> np.ndarray:
    """Model states over states, activations (logits included) and overhead: the bound's segment."""
    return terms["states"] / (terms["states"] + terms["activations"] + terms["overhead"])


def upper_bound(point: Mapping[str, np.ndarray], upper: Mapping[str, np.ndarray], assumed_any: np.ndarray,
                cal: MemoryCalibration, margins: tuple[float, float, float] | None = None, *,
                with_reserve: np.ndarray | bool = True, with_context: np.ndarray | bool = True) -> np.ndarray:
    """The bound from the point and upper scenarios' terms, MiB (before ``cap_upper``).

    ``margins`` (default ``cal.upper_margins``) are three log margins: over the point estimate of a
    states-dominated job (``states_share`` above ``cal.upper_states_share``: weights, gradients and
    optimizer, fixed by the descriptors), over that of any other job (activations and logits
    dominate, whose cost varies between implementations), and, where the record
    leaves a descriptor unknown (``assumed_any``), over the upper scenario (the largest plausible
    values), which the bound then covers as well. ``with_reserve`` / ``with_context`` as in ``as_measured``.
    """
    m_states, m_other, m_unknown = cal.upper_margins if margins is None else margins
    segment = states_share(point) > cal.upper_states_share
    bound = as_measured(point, cal, with_reserve, with_context) * np.exp(np.where(segment, m_states, m_other))
    widest = as_measured(upper, cal, with_reserve, with_context) * np.exp(m_unknown)
    return np.where(assumed_any, np.maximum(bound, widest), bound)


def parts_from(resolved: ResolvedJobs, cal: MemoryCalibration) -> MemoryParts:
    """``MemoryParts`` of resolved jobs under a calibration."""
    # both scenarios in one evaluation: fields of shape (2, n), point then upper
    point, up = resolved.point, resolved.upper
    both = Scenario(**{f.name: np.stack([getattr(point, f.name), getattr(up, f.name)]) for f in fields(Scenario)})
    pair = _terms(_sized(resolved.params, resolved.method), resolved.num_gpus, both, cal)
    terms, high = ({k: v if v.ndim == 1 else v[i] for k, v in pair.items()} for i in (0, 1))  # overhead: (n,)
    upper = cap_upper(upper_bound(terms, high, resolved.assumed != "", cal), terms["total"], resolved.cap_mib)
    return MemoryParts(states=terms["states"], activations=terms["activations"], logits=terms["logits"],
                       overhead=terms["overhead"], total=terms["total"], upper=upper, zero_stage=terms["zero_stage"],
                       assumed=resolved.assumed)


#: The row-by-row path (``models.memory_scalar.scalar_memory``, the same results), registered by that
#: module when it is imported (it reads this module's constants, so this module cannot import it):
#: ``models.memory`` imports it, so every caller of a fitted model has it.
_ROW_PATH: list = []


def analytic_memory(jobs: pd.DataFrame | JobColumns, gpu_memory_mib: Mapping[str, float] | None = None, *,
                    calibration: MemoryCalibration | None = None) -> MemoryParts:
    """Point estimate and upper bound of peak memory per GPU for each job.

    Parameters
    ----------
    jobs : DataFrame of shape (n_jobs, n_columns) or JobColumns
        Canonical rows; reads ``model_params``, ``finetune_method``, ``num_gpus``, ``gpu_type``, the
        workload sizes (``batch_size``, ``seq_len``), ``precision``, ``optimizer`` and the memory
        descriptors (``precision_mode``, ``quantization``, ``parallel_strategy``,
        ``tensor_parallel_size``, ``pipeline_parallel_size``, ``grad_checkpointing``, ``lora_rank``).
        A missing method is full fine-tuning.
    gpu_memory_mib : mapping, optional
        GPU type -> memory per device (MiB), which bounds the plausible values of unknown
        descriptors (a run must fit its GPU); default ``GPU_MEMORY_MIB``.
    calibration : MemoryCalibration, optional
        Fitted constants; default the shipped ones (``models.memory_calibration.shipped_calibration``).

    Returns
    -------
    MemoryParts
        NaN (and ``assumed`` "") where ``model_params`` is unknown.
    """
    cal = shipped_calibration() if calibration is None else calibration
    if 0 < len(jobs) <= SCALAR_ROWS and _ROW_PATH:
        return _ROW_PATH[0](jobs, gpu_memory_mib, cal)
    return parts_from(resolve_jobs(jobs, gpu_memory_mib, calibration=cal), cal)
