"""Topology fit: predicted slowdown of a job on each placement class, relative to the best one.

Model (an Amdahl-style split of a data-parallel step into compute and exposed communication)
    A step costs ``t_compute + t_comm``; ``t_comm`` scales with the inverse bandwidth of the worst
    link the placement crosses. Writing ``kappa = t_comm / t_compute`` on the reference link
    (``cross_rack``) and ``w_p`` for class ``p``'s inverse bandwidth relative to it (``w = 1`` for
    ``cross_rack``), the slowdown against the best class is

        slowdown_p = (1 + kappa * w_p) / (1 + kappa * w_nvlink)

    ``kappa`` is per job (what it trains, on how many GPUs); ``w`` is per cluster.

Prior (no placement labels, or a job unlike any seen)
    ``w`` from published all-reduce bus bandwidths (``PRIOR_BANDWIDTH_GBPS``: nccl-tests on NVSwitch
    A100 nodes ~240 GB/s; PCIe 4.0 x16 peer-to-peer ~24 GB/s; across the CPU interconnect ~16 GB/s;
    one 100 Gb/s InfiniBand NIC per node ~12 GB/s; behind a 2:1 oversubscribed aggregation layer
    ~6 GB/s). ``kappa`` from a step-time estimate: a ring all-reduce moves
    ``2 (n - 1) / n * T * g`` bytes per GPU (``T`` trainable parameters, ``g`` gradient bytes;
    x1.5 for ZeRO-3 / FSDP), compute is ``6 P b s`` FLOPs per GPU per step (``4`` for LoRA/QLoRA) at
    ``PRIOR_EFFECTIVE_TFLOPS``, and ``PRIOR_EXPOSED_SHARE`` of the communication is not hidden behind
    the backward pass. Single-GPU jobs cross no link: slowdown 1 everywhere. Multi-GPU jobs without
    a model size get ``PRIOR_UNKNOWN_KAPPA``.

Learning (logs that record ``placement_class`` and ``throughput``, else ``duration_s``)
    The log progress rate of a job is ``a_f - log(1 + kappa_f w_p) + noise``, ``a_f`` a family
    constant. For each family seen on two or more placement classes, ``(a_f, kappa_f)`` are fitted
    by least squares (grid over ``log kappa``, closed form for ``a_f``); then each ``w_p`` by a 1-D
    grid search given the ``kappa_f`` (isotonic across classes), alternating ``ROUNDS`` times. A
    LightGBM regressor maps job features (model size, GPUs, method, precision, batch, sequence,
    GPU type, the prior's ``log kappa``) to ``log kappa_f`` so unseen families get a learned value;
    a family seen before is shrunk towards its own estimate by ``n / (n + SHRINKAGE)``.

Monotone
    ``w`` is made non-decreasing along ``PLACEMENT_CLASSES`` (isotonic regression), so for any
    ``kappa >= 0`` a worse placement is never predicted faster; a final cumulative maximum across
    classes guards the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

from features.history import family_keys, numeric_column, object_column
from features.schema import PLACEMENT_CLASSES
from models.lgbm import BoosterParams, predict_booster, train_booster

__all__ = [
    "PRIOR_BANDWIDTH_GBPS",
    "PRIOR_EFFECTIVE_TFLOPS",
    "PRIOR_EXPOSED_SHARE",
    "TopologyEstimator",
    "prior_kappa",
    "slowdowns",
    "topology_design",
]

PRIOR_BANDWIDTH_GBPS: dict[str, float] = dict(zip(PLACEMENT_CLASSES, (240.0, 24.0, 16.0, 12.0, 6.0), strict=True))
PRIOR_EFFECTIVE_TFLOPS = 100.0  # ~300 dense 16-bit TFLOP/s at ~35 % model-FLOPs utilisation
PRIOR_EXPOSED_SHARE = 0.5
PRIOR_UNKNOWN_KAPPA = 0.3
PRIOR_TOKENS_PER_SAMPLE = 512.0  # when the record has no sequence length
ROUNDS = 3
SHRINKAGE = 1.0
_KAPPA_GRID = np.r_[0.0, np.logspace(-3, 3, 73)]
_W_GRID = np.logspace(-3, 0.5, 141)
_CLASS_INDEX = {c: i for i, c in enumerate(PLACEMENT_CLASSES)}
_LORA = ("lora", "qlora")
_WIDE = ("fp32", "tf32")
_PRIOR_W = np.array([PRIOR_BANDWIDTH_GBPS[PLACEMENT_CLASSES[-1]] / PRIOR_BANDWIDTH_GBPS[c] for c in PLACEMENT_CLASSES])
TOPOLOGY_FEATURES: tuple[str, ...] = (
    "log_params", "log_gpus", "lora", "grad_bytes", "log_batch", "log_seq", "prior_log_kappa",
)


def slowdowns(kappa: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Slowdown per placement class, shape (n, n_classes), non-decreasing along each row."""
    k = np.maximum(np.asarray(kappa, dtype=float), 0.0)[:, None]
    out = (1.0 + k * w[None, :]) / (1.0 + k * w[None, :1])
    return np.maximum.accumulate(out, axis=1)


def prior_kappa(jobs: pd.DataFrame) -> np.ndarray:
    """Physics prior of ``kappa`` per job (see the module docstring); 0 for single-GPU jobs."""
    return _inputs(jobs)[0]


def topology_design(jobs: pd.DataFrame) -> np.ndarray:
    """Inputs of the ``kappa`` regressor, shape (n, len(TOPOLOGY_FEATURES))."""
    return _inputs(jobs)[1]


def _nan_to(x: np.ndarray, value: float) -> np.ndarray:
    """``np.nan_to_num(x, nan=value)`` (NaN -> value, infinities -> the largest finite floats), cheaper
    on the few rows of a request where nothing is infinite."""
    out = np.where(np.isnan(x), value, x)
    return np.nan_to_num(x, nan=value) if np.isinf(out).any() else out


def _inputs(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(prior_kappa, topology_design, GPUs with NaN as 1)`` of ``jobs``, reading each column once."""
    gpus = numeric_column(jobs, "num_gpus")
    n = _nan_to(gpus, 1.0)
    p = numeric_column(jobs, "model_params")
    batch = numeric_column(jobs, "batch_size")
    seq = numeric_column(jobs, "seq_len")
    method = object_column(jobs, "finetune_method")
    precision = object_column(jobs, "precision")
    rows = len(gpus)
    lora = np.fromiter(map(_LORA.__contains__, method), bool, rows)  # ``m in _LORA`` per job
    wide = np.fromiter(map(_WIDE.__contains__, precision), bool, rows)
    named = np.fromiter(map(isinstance, precision, repeat(str)), bool, rows)
    g = np.where(wide | ~named, 4.0, 2.0)
    trainable = np.where(lora, 0.005 * p, p)
    grad_bytes = np.where(lora, 4.0, g)
    tokens = np.where(batch > 0, batch, 1.0) * np.where(seq > 0, seq, PRIOR_TOKENS_PER_SAMPLE)
    flops = np.where(lora, 4.0, 6.0) * p * tokens
    t_compute = flops / (PRIOR_EFFECTIVE_TFLOPS * 1e12)
    volume = 2.0 * (n - 1.0) / np.maximum(n, 1.0) * trainable * grad_bytes
    t_comm = PRIOR_EXPOSED_SHARE * volume / (PRIOR_BANDWIDTH_GBPS[PLACEMENT_CLASSES[-1]] * 1e9)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(p > 0, t_comm / t_compute, PRIOR_UNKNOWN_KAPPA)
    kappa = np.where(n > 1, kappa, 0.0)
    design = np.empty((rows, len(TOPOLOGY_FEATURES)))
    raw = np.array([p, gpus, batch, seq])
    with np.errstate(divide="ignore", invalid="ignore"):
        design[:, [0, 1, 4, 5]] = np.where(raw > 0, np.log(raw), np.nan).T
    method_named = np.fromiter(map(isinstance, method, repeat(str)), bool, rows)
    design[:, 2] = np.where(method_named, lora.astype(float), np.nan)
    design[:, 3] = np.where(named, np.where(wide, 4.0, 2.0), np.nan)
    design[:, 6] = np.log(np.maximum(kappa, 1e-4))
    return kappa, design, n


def _fit_kappa(m: np.ndarray, cnt: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per family: best kappa on the grid for class means ``m`` (F, C) with counts ``cnt`` (F, C)."""
    pen = -np.log1p(_KAPPA_GRID[:, None] * w[None, :])  # (G, C)
    tot = cnt.sum(axis=1)
    sse = np.empty((len(m), len(_KAPPA_GRID)))
    for gi in range(len(_KAPPA_GRID)):
        resid = m - pen[gi][None, :]
        a = (cnt * resid).sum(axis=1) / tot
        sse[:, gi] = (cnt * (resid - a[:, None]) ** 2).sum(axis=1)
    best = sse.argmin(axis=1)
    return _KAPPA_GRID[best], sse[np.arange(len(m)), best]


def _fit_w(m: np.ndarray, cnt: np.ndarray, kappa: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Class weights given family kappas (reference class keeps w = 1), made isotonic."""
    new = w.copy()
    for c in range(len(w) - 1):
        sses = []
        for wc in _W_GRID:
            trial = new.copy()
            trial[c] = wc
            resid = m + np.log1p(kappa[:, None] * trial[None, :])
            a = (cnt * resid).sum(axis=1) / cnt.sum(axis=1)
            sses.append(float((cnt * (resid - a[:, None]) ** 2).sum()))
        if cnt[:, c].sum() > 0:
            new[c] = _W_GRID[int(np.argmin(sses))]
    weight = cnt.sum(axis=0) + 1.0
    return IsotonicRegression(increasing=True).fit_transform(np.arange(len(w)), new, sample_weight=weight)


@dataclass
class TopologyEstimator:
    """Learns ``w`` (per class) and ``kappa`` (per job) from placement-labelled history."""

    params: BoosterParams = field(default_factory=lambda: BoosterParams(n_estimators=80, learning_rate=0.1,
                                                                        num_leaves=15, min_child_samples=10))
    min_families: int = 20

    def fit(self, jobs: pd.DataFrame) -> TopologyEstimator:
        """Learn from rows with ``placement_class``, more than one GPU, and a throughput or duration."""
        self.w_ = _PRIOR_W.copy()
        self.family_log_kappa_: dict[str, tuple[float, float]] = {}
        self.booster_: lgb.Booster | None = None
        self.log_kappa_offset_ = 0.0
        self.n_families_ = 0
        placement = object_column(jobs, "placement_class")
        cls = np.array([_CLASS_INDEX.get(p, -1) if isinstance(p, str) else -1 for p in placement])
        thr = numeric_column(jobs, "throughput")
        dur = numeric_column(jobs, "duration_s")
        completed = object_column(jobs, "state") == "COMPLETED"
        use_thr = np.isfinite(thr) & (thr > 0)
        rate = np.where(use_thr, np.log(np.where(use_thr, thr, 1.0)),
                        np.where(completed & (dur > 0), -np.log(np.where(dur > 0, dur, 1.0)), np.nan))
        gpus = numeric_column(jobs, "num_gpus")
        ok = (cls >= 0) & np.isfinite(rate) & (gpus > 1)
        fam = family_keys(jobs)
        ok &= np.array([isinstance(f, str) for f in fam], dtype=bool)
        if ok.sum() == 0:
            return self
        frame = pd.DataFrame({"family": fam[ok], "cls": cls[ok], "rate": rate[ok], "row": np.flatnonzero(ok)})
        # one source of rates per family: throughput where the family has it, else 1/duration
        frame["thr"] = use_thr[ok]
        frame = frame[frame["thr"] == frame.groupby("family")["thr"].transform("max")]
        means = frame.pivot_table(index="family", columns="cls", values="rate", aggfunc="mean")
        counts = frame.pivot_table(index="family", columns="cls", values="rate", aggfunc="count")
        means = means.reindex(columns=range(len(PLACEMENT_CLASSES)))
        counts = counts.reindex(columns=range(len(PLACEMENT_CLASSES))).fillna(0.0)
        multi = (counts > 0).sum(axis=1) >= 2
        m = means[multi].fillna(0.0).to_numpy()
        cnt = counts[multi].to_numpy()
        self.n_families_ = int(multi.sum())
        if self.n_families_ == 0:
            return self
        kappa = np.zeros(len(m))
        for _ in range(ROUNDS):
            kappa, _ = _fit_kappa(m, cnt, self.w_)
            if self.n_families_ >= self.min_families:
                self.w_ = _fit_w(m, cnt, kappa, self.w_)
        kappa, _ = _fit_kappa(m, cnt, self.w_)
        log_kappa = np.log(np.maximum(kappa, 1e-3))
        families = means.index[multi]
        n_info = cnt.sum(axis=1)
        self.family_log_kappa_ = {f: (float(k), float(c)) for f, k, c in zip(families, log_kappa, n_info, strict=True)}
        # regressor on the families' jobs: each labelled job carries its family's estimate
        rows = frame[frame["family"].isin(families)]
        target = rows["family"].map(dict(zip(families, log_kappa, strict=True))).to_numpy()
        design = topology_design(jobs.iloc[rows["row"].to_numpy()])
        prior = design[:, -1]
        self.log_kappa_offset_ = float(np.median(target - prior))
        if self.n_families_ >= self.min_families:
            self.booster_ = train_booster(design, target, self.params, "huber", feature_names=list(TOPOLOGY_FEATURES))
        return self

    def predict(self, jobs: pd.DataFrame) -> np.ndarray:
        """Slowdown per placement class, shape (n_jobs, len(PLACEMENT_CLASSES))."""
        _, design, gpus = _inputs(jobs)
        if self.booster_ is not None:
            log_kappa = predict_booster(self.booster_, design)
        else:
            log_kappa = design[:, -1] + self.log_kappa_offset_
        if self.family_log_kappa_:
            table = self.family_log_kappa_
            fam = family_keys(jobs)
            known = table.keys() & {f for f in fam if isinstance(f, str)}  # usually none: no loop over jobs
            for i, f in enumerate(fam) if known else ():
                hit = table.get(f) if isinstance(f, str) else None
                if hit is not None:
                    k, n = hit
                    log_kappa[i] = (n * k + SHRINKAGE * log_kappa[i]) / (n + SHRINKAGE)
        kappa = np.where(gpus > 1, np.exp(log_kappa), 0.0)
        kappa = np.where(np.isfinite(kappa), kappa, PRIOR_UNKNOWN_KAPPA)
        return slowdowns(kappa, self.w_)
