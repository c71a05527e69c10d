"""``analytic_memory`` for a few rows, one row at a time in Python floats (the serving path).

The vectorised path (``models.memory_analytic``, ``models.memory_assumptions``) pays one numpy call
per operation, on arrays of one element for a single-job request, and evaluates ``memory_terms``
four times or more per call. This module computes the same formulas (module docstrings there) per
row with Python floats and returns the same ``MemoryParts``: same values to the last bit, same
dtypes, NaN where ``model_params`` is unknown. Each operation is the vectorised one in the same
order (IEEE arithmetic on floats is the same in Python and numpy); ``np.cbrt`` and ``np.exp`` are
still numpy's (its SIMD kernels differ from ``math``'s in the last bit), and the ``nan_to_num`` /
``np.maximum`` / ``np.minimum`` semantics (infinities clipped, NaN propagated) are kept by the helpers
below. ``tests/models/test_memory_fast_path.py`` checks it against a frozen copy of the vectorised path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import product

import numpy as np
import pandas as pd

from features.job_keys import JobColumns, numeric_column, object_column
from features.memory_descriptors import GRAD_CHECKPOINTING, PARALLEL_STRATEGIES, PRECISION_MODES
from models import memory_analytic as ma
from models import memory_assumptions as mas
from models.memory_calibration import MemoryCalibration

__all__ = ["scalar_memory"]

_NAN, _INF, _BIG = math.nan, math.inf, float(np.finfo(np.float64).max)
_MODE, _STRATEGY, _CKPT, _LOSS = mas.MODE, mas.STRATEGY, mas.CKPT, mas.LOSS
# the vectorised path's lookup tables as Python lists (indexed by code)
_TRUE16, _WEIGHT_B, _MASTER_B = ma._TRUE16.tolist(), ma._WEIGHT_B.tolist(), ma._MASTER_B.tolist()
_ADAPTER_B, _ACT_SCALE, _STAGE = ma._ADAPTER_B.tolist(), ma._ACT_SCALE.tolist(), ma._STAGE.tolist()
_OFFLOAD, _SHARD_OPT = ma._OFFLOAD.tolist(), ma._SHARD_OPT.tolist()
_SHARD_GRAD, _SHARD_WEIGHTS = ma._SHARD_GRAD.tolist(), ma._SHARD_WEIGHTS.tolist()
_QUANT_CODES = {k: (-2.0 if np.isnan(v) else v) for k, v in mas.QUANT_BYTES.items()}
_QUANT_NAMES = list(mas.QUANT_BYTES)
_QUANT_LABEL_BYTES = list(_QUANT_CODES.values())
_NF4, _INT4 = mas.QUANT_BYTES["nf4"], mas.QUANT_BYTES["int4"]
_DDP, _FULL_CKPT, _OFF, _STANDARD = _STRATEGY["ddp"], _CKPT["full"], _CKPT["off"], _LOSS["standard"]
_TRUE_OF = {_MODE["bf16-mixed"]: _MODE["bf16-true"], _MODE["fp16-mixed"]: _MODE["fp16-true"]}
_FIT_STEPS = ((0, "strategy", _STRATEGY["zero2"]), (0, "strategy", _STRATEGY["zero3"]), (1, "ckpt", _FULL_CKPT))
_OBJECT = ("finetune_method", "gpu_type", "precision_mode", "precision", "quantization", "parallel_strategy",
           "grad_checkpointing", "loss_implementation", "optimizer")
_NUMERIC = ("model_params", "num_gpus", "vocab_size", "tensor_parallel_size", "pipeline_parallel_size",
            "context_parallel_size", "image_size", "lora_rank", "batch_size", "seq_len", "trainable_params")
_NAN_ROW = (_NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, "")


def _fin(x: float, nan: float) -> float:
    """``np.nan_to_num(x, nan=nan)`` of one float."""
    if x != x:
        return nan
    if x == _INF:
        return _BIG
    return -_BIG if x == -_INF else x


def _max(a: float, b: float) -> float:
    """``np.maximum`` of two floats (NaN propagates)."""
    return a if (a >= b or a != a) else b


def _min(a: float, b: float) -> float:
    """``np.minimum`` of two floats (NaN propagates)."""
    return a if (a <= b or a != a) else b


def _label(v: object) -> str:
    """``models.memory_assumptions._labels`` of one value."""
    if isinstance(v, str):
        return v
    return str(int(v)) if math.isfinite(v) and v == int(v) else str(v)


class _Row:
    """One job's resolved constants and the calibration's (the parts of ``memory_terms`` that no
    scenario changes)."""

    __slots__ = ("hidden", "layers", "size", "full", "gpus", "tp", "pp", "cp", "loss", "trainable", "opt_bytes",
                 "in_bwd", "image", "kbit_fp32", "act_a", "act_b", "logit_b", "cal")

    def terms(self, mode: int, quant: float, strategy: int, ckpt: int, rank: float, batch: float, seq: float,
              vocab: float) -> tuple[float, float, float, float, float, float]:
        """``memory_terms`` of one scenario: states, activations, logits, overhead, total, zero stage."""
        hidden, layers, size, full, cal = self.hidden, self.layers, self.size, self.full, self.cal
        ob = self.opt_bytes
        opt = ob / 2.0 if (_TRUE16[mode] and ob > ma._LOW_BIT_OPTIMIZER) else ob
        weight_b, master_b, adapter_b = _WEIGHT_B[mode], _MASTER_B[mode], _ADAPTER_B[mode]
        trainable = self.trainable
        known = trainable > 0
        emb = _min(2.0 * vocab * hidden, 0.5 * size)
        if full:
            trained, adapters = (_min(trainable, size) if known else size), 0.0
        else:
            trained = 0.0
            adapters = trainable if known else ma.LORA_PARAMS_PER_RANK_HIDDEN_LAYER * rank * hidden * layers
        quantised = quant == quant
        frozen_b = quant if quantised else weight_b
        kbit = self.kbit_fp32 and quantised and not full
        emb_b = 4.0 if kbit else weight_b
        frozen = (size - trained) * weight_b if full else (size - emb) * frozen_b + emb * emb_b
        tp, pp = self.tp, self.pp
        mp = _max(tp * pp, 1.0)
        dp = _max(self.gpus / mp, 1.0)
        offload, shard_w = _OFFLOAD[strategy], _SHARD_WEIGHTS[strategy]
        opt_master = trained * (opt + master_b) + adapters * opt
        opt_master = 0.0 if offload else opt_master / (dp if _SHARD_OPT[strategy] else 1.0)
        grads = (trained * weight_b + adapters * adapter_b) / (dp if _SHARD_GRAD[strategy] else 1.0)
        if offload or self.in_bwd:
            grads = 0.0
        weights = (trained * weight_b + adapters * adapter_b + frozen) / (dp if shard_w else 1.0)
        if offload and shard_w:
            weights = 0.0
        gathered = 2.0 * 12.0 * (hidden * hidden) * 2.0 if (shard_w and dp > 1) else 0.0
        states = (weights + grads + opt_master) / mp + gathered

        split = _max(tp, 1.0) * _max(pp, 1.0) * _max(self.cp, 1.0)
        act_scale = _ACT_SCALE[mode] / split
        tokens = batch * seq
        loss = self.loss
        logit_b = self.logit_b[loss] + (ma.KBIT_LOGIT_EXTRA_BYTES if (loss == _STANDARD and kbit and weight_b < 4.0)
                                        else 0.0)
        if seq > 0:
            acts = tokens * hidden * (self.act_a[ckpt] * layers + self.act_b[ckpt]) * act_scale
            logits = tokens * vocab * logit_b / split
        else:
            ratio = self.image / 224.0
            acts, logits = batch * cal.image_sample_mib * ma.MIB * (ratio * ratio) * act_scale, 0.0
        acts = acts + logits
        overhead = cal.context_mib + (ma.NCCL_BUFFERS_MIB if self.gpus > 1 else 0.0)
        total = (cal.allocator * (states + acts) + cal.logit_reserve * logits) / ma.MIB + overhead
        return states / ma.MIB, acts / ma.MIB, logits / ma.MIB, overhead, total, _STAGE[strategy]


def _codes(v: object, table: Mapping[str, int]) -> int:
    return table.get(v.lower(), -1) if isinstance(v, str) else -1


def _one(row: _Row, params: float, method: str, gpus: float, cap: float, known_cap: float, pmode: object,
         precision: object, quantization: object, pstrategy: object, pckpt: object, ploss: object, optimizer: object,
         vocab: float, tp: float, pp: float, cp: float, image: float, rank: float, batch: float, seq: float,
         trainable: float, exp_margins: tuple[float, float, float]) -> tuple:
    """The ``MemoryParts`` values of one job with a known size (``resolve_scenarios``, ``parts_from``)."""
    mode, strategy = _codes(pmode, _MODE), _codes(pstrategy, _STRATEGY)
    ckpt, loss = _codes(pckpt, _CKPT), _codes(ploss, _LOSS)
    precision = precision.lower() if isinstance(precision, str) else None
    quant_name = quantization.lower() if isinstance(quantization, str) else None
    quant = _QUANT_CODES.get(quant_name, -1.0) if quant_name is not None else -1.0
    opt_bytes, in_bwd = mas.optimizer_state(optimizer)
    large = params >= 1e9
    legacy = precision == "int8" or precision == "int4"
    if quant == -1.0 and legacy:
        quant = 1.0 if precision == "int8" else _INT4
    kind = precision if precision in ("bf16", "fp16") else ("bf16" if legacy else "")
    if mode == -1 and precision in ("fp32", "tf32"):
        mode = _MODE["fp32"]
    if mode == -1 and precision == "fp8":
        mode = _MODE["fp8"]
    lora = method != "full"
    u_mode, u_quant, u_ckpt = mode == -1, quant == -1.0 and lora, ckpt == -1
    u_strategy = strategy == -1 and gpus > 1
    u_rank = not rank > 0 and not trainable > 0 and lora
    u_batch, u_vocab = not batch > 0, not vocab > 0 and not image > 0
    u_seq = not seq > 0 and not image > 0 and large
    qlora = method == "qlora"
    bnb = (quant_name in mas.BNB_QUANTIZATIONS or (quant == 1.0 and precision == "int8") or (u_quant and qlora)) and lora

    row.gpus, row.full = gpus, not lora
    row.tp, row.pp, row.cp = (tp if tp > 0 else 1.0), (pp if pp > 0 else 1.0), (cp if cp > 0 else 1.0)
    row.loss = _STANDARD if loss == -1 else loss
    row.trainable = trainable if trainable > 0 else _NAN
    row.opt_bytes, row.in_bwd = (opt_bytes if opt_bytes >= 0 else 8.0), in_bwd
    row.image, row.kbit_fp32 = (image if image > 0 else 224.0), bnb
    b_quant = quant if quant >= 0 else (_NF4 if u_quant and qlora else _NAN)
    b_strategy, b_ckpt = (_DDP if strategy == -1 else strategy), (_OFF if ckpt == -1 else ckpt)
    b_rank, b_batch = (rank if rank > 0 else mas.POINT_LORA_RANK), (batch if batch > 0 else mas.POINT_BATCH)
    b_seq = seq if seq > 0 else (mas.POINT_SEQ if large else _NAN)
    b_vocab = vocab if vocab > 0 else mas.POINT_VOCAB

    # point: the likely values, then the unknown memory savers stepped on until it fits
    k = kind if kind != "" else ("bf16" if large else "fp32")
    likely = (_MODE["fp32"] if k == "fp32" else _MODE["fp16-mixed"] if k == "fp16"
              else _MODE["bf16-mixed"] if (not lora and b_strategy != _DDP) else _MODE["bf16-true"])
    point = {"strategy": b_strategy, "ckpt": _FULL_CKPT if (u_ckpt and large) else b_ckpt}
    p_mode = likely if u_mode else mode
    over = row.terms(p_mode, b_quant, point["strategy"], point["ckpt"], b_rank, b_batch, b_seq, b_vocab)[4] > cap
    for which, attr, value in _FIT_STEPS:
        if over and (u_strategy, u_ckpt)[which]:
            point[attr] = value
            over = row.terms(p_mode, b_quant, point["strategy"], point["ckpt"], b_rank, b_batch, b_seq, b_vocab)[4] > cap
    if over and u_mode:
        p_mode = _TRUE_OF.get(p_mode, p_mode)
    p_strategy, p_ckpt = point["strategy"], point["ckpt"]

    # upper: the largest plausible combination of the unknown mode, strategy and checkpointing
    s_quant = mas.UPPER_VALUES["qlora_bytes"] if (u_quant and qlora) else b_quant
    s_rank = mas.UPPER_VALUES["lora_rank"] if u_rank else b_rank
    s_batch = mas.UPPER_VALUES["batch_size"] if u_batch else b_batch
    s_seq = mas.UPPER_VALUES["seq_len"] if u_seq else b_seq
    s_vocab = mas.UPPER_VOCAB if u_vocab else b_vocab
    fp16 = kind == "fp16"
    mixed = _MODE["fp16-mixed"] if fp16 else _MODE["bf16-mixed"]
    modes = ((_MODE["fp32"] if kind == "" else mixed, mixed, _MODE["fp16-true"] if fp16 else _MODE["bf16-true"])
             if u_mode else (mode,))
    grid = list(product(modes, mas._UPPER_STRATEGIES if u_strategy else (b_strategy,),
                        mas._SAVERS if u_ckpt else (b_ckpt,)))
    best, best_total = None, -_INF
    for attempt in range(2):  # _upper's two attempts, per row
        totals = [row.terms(m, s_quant, s, c, s_rank, s_batch, s_seq, s_vocab)[4] for m, s, c in grid]
        fits = [t if t <= cap else -_INF for t in totals]
        found = any(math.isfinite(f) for f in fits)
        if found:  # np.argmax: the first largest
            pick = fits.index(max(fits))
        else:  # np.argmin: the first NaN, else the first smallest
            pick = next((j for j, t in enumerate(totals) if t != t), None)
            if pick is None:
                pick = min(range(len(totals)), key=totals.__getitem__)
        if found or attempt == 1 or not math.isfinite(best_total):
            best = (grid[pick], s_batch, s_seq)
        if found:
            best_total = fits[pick]
        if math.isfinite(best_total):
            break
        s_batch, s_seq = b_batch, b_seq
    (u_m, u_s, u_c), u_batch_v, u_seq_v = best

    assumed = []
    if u_mode:
        assumed.append("precision_mode=" + PRECISION_MODES[max(p_mode, 0)])
    if u_quant:
        x = _fin(b_quant, -2.0)
        diffs = [abs(x - q) for q in _QUANT_LABEL_BYTES]
        assumed.append("quantization=" + _QUANT_NAMES[diffs.index(min(diffs))])
    if u_strategy:
        assumed.append("parallel_strategy=" + PARALLEL_STRATEGIES[max(p_strategy, 0)])
    if u_ckpt:
        assumed.append("grad_checkpointing=" + GRAD_CHECKPOINTING[max(p_ckpt, 0)])
    for flag, key, value in ((u_rank, "lora_rank", b_rank), (opt_bytes < 0, "optimizer", "adamw"),
                             (u_batch, "batch_size", b_batch), (u_seq, "seq_len", b_seq),
                             (u_vocab, "vocab_size", b_vocab)):
        if flag:
            assumed.append(key + "=" + _label(value))
    assumed_text = "; ".join(assumed)

    states, acts, logits, overhead, total, stage = row.terms(p_mode, b_quant, p_strategy, p_ckpt, b_rank, b_batch,
                                                             b_seq, b_vocab)
    h_states, h_acts, h_logits, h_overhead = row.terms(u_m, s_quant, u_s, u_c, s_rank, u_batch_v, u_seq_v,
                                                       s_vocab)[:4]
    cal = row.cal
    e_states, e_other, e_unknown = exp_margins
    whole = states + acts + overhead
    share = states / whole if whole != 0 else (_NAN if states == 0 or states != states else math.copysign(_INF, states)
                                                * math.copysign(1.0, whole))
    segment = share > cal.upper_states_share
    bound = (cal.allocator * (states + acts) + cal.logit_reserve * logits + overhead) * (e_states if segment else e_other)
    if assumed_text:
        widest = (cal.allocator * (h_states + h_acts) + cal.logit_reserve * h_logits + h_overhead) * e_unknown
        bound = _max(bound, widest)
    if math.isfinite(known_cap) and total <= known_cap:
        bound = _min(bound, known_cap)
    return states, acts, logits, overhead, total, bound, stage, assumed_text


def scalar_memory(jobs: pd.DataFrame | JobColumns, gpu_memory_mib: Mapping[str, float] | None,
                  calibration: MemoryCalibration) -> ma.MemoryParts:
    """``analytic_memory(jobs, gpu_memory_mib, calibration=calibration)``, row by row (module docstring)."""
    cal = calibration
    table = ma.GPU_MEMORY_MIB if gpu_memory_mib is None else gpu_memory_mib
    largest = float(max(table.values(), default=np.inf))
    consts = tuple(t.tolist() for t in ma._calibration_tables(cal.activation_bytes, cal.checkpoint_bytes,
                                                               cal.logit_bytes))
    exp_margins = tuple(np.exp(np.array(cal.upper_margins, dtype=np.float64)).tolist())
    obj = [object_column(jobs, c).tolist() for c in _OBJECT]
    params, gpus, *num = [numeric_column(jobs, c).tolist() for c in _NUMERIC]
    method = [v.lower() if isinstance(v, str) else "full" for v in obj[0]]
    gpus = [_max(_fin(g, 1.0), 1.0) for g in gpus]
    known_cap = [float(table.get(t, _NAN)) if isinstance(t, str) else _NAN for t in obj[1]]
    sized = [i for i, p in enumerate(params) if p > 0]
    hidden = np.cbrt(np.array([100.0 * _fin(params[i], 1.0) / 12.0 for i in sized], dtype=np.float64)).tolist()
    rows = [_NAN_ROW] * len(params)
    for i, h in zip(sized, hidden, strict=True):
        row = _Row()
        row.hidden, row.layers, row.size, row.cal = h, h / 100.0, _fin(params[i], 0.0), cal
        row.act_a, row.act_b, row.logit_b = consts
        c = known_cap[i]
        rows[i] = _one(row, params[i], method[i], gpus[i], largest if c != c else c, c, *(col[i] for col in obj[2:]),
                       *(col[i] for col in num), exp_margins)
    states, acts, logits, overhead, total, upper, stage, assumed = list(zip(*rows, strict=True)) or [()] * 8
    f8 = np.float64
    return ma.MemoryParts(states=np.array(states, f8), activations=np.array(acts, f8), logits=np.array(logits, f8),
                          overhead=np.array(overhead, f8), total=np.array(total, f8), upper=np.array(upper, f8),
                          zero_stage=np.array(stage, f8), assumed=np.array(assumed, dtype=object).reshape(len(rows)))


ma._ROW_PATH[:] = [scalar_memory]  # analytic_memory answers a few rows through it
