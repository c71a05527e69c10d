"""The canonical job record: one row per job attempt, the table every reader produces.

Units are in the column names (``_s`` seconds, ``_ts`` epoch seconds UTC, ``_mib`` mebibytes,
``gpu_milli`` thousandths of one GPU). Unknown is null (NaN for numbers, ``<NA>`` for strings),
never a magic number such as ``-1`` or ``0``.

A job still running (or pending) when the log ends is *right-censored*: its row is kept with
``censored=True``, ``end_ts`` null, and ``duration_s`` holding the run time observed so far (a lower
bound on the true duration), or null when it never started. No end is ever invented.

``validate`` is the one gate every reader goes through: it coerces types, derives what can be
derived (``duration_s`` from start/end, ``censored`` from the state), and splits the table into the
valid rows and a rejects table with one human-readable reason per rejected row. It also names GPU
types one way (``features.gpu_types``: ``a100-80gb`` and ``NVIDIA-A100-SXM4-80GB`` become ``A100-80GB``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.constraints import normalise_constraints
from features.gpu_types import DEFAULT_VOCABULARY
from features.job_conventions import CHECKPOINT_KINDS
from features.memory_descriptors import (
    GRAD_CHECKPOINTING,
    LOSS_IMPLEMENTATIONS,
    PARALLEL_STRATEGIES,
    PRECISION_MODES,
    QUANTIZATIONS,
)

__all__ = [
    "COLUMNS",
    "STRING_COLUMNS",
    "FLOAT_COLUMNS",
    "BOOL_COLUMNS",
    "STATES",
    "TERMINAL_STATES",
    "PLACEMENT_CLASSES",
    "CHECKPOINT_KINDS",
    "FINETUNE_METHODS",
    "PRECISIONS",
    "PRECISION_MODES",
    "QUANTIZATIONS",
    "PARALLEL_STRATEGIES",
    "GRAD_CHECKPOINTING",
    "LOSS_IMPLEMENTATIONS",
    "ValidationResult",
    "empty_jobs",
    "conform",
    "validate",
]

#: Placement classes, best first. A gang's placement class is the worst link its GPUs cross.
PLACEMENT_CLASSES: tuple[str, ...] = (
    "nvlink",  # all GPUs in one NVLink/NVSwitch island
    "pcie_same_numa",  # one node, PCIe switch / host bridge on one NUMA node
    "cross_numa",  # one node, across the CPU interconnect (SYS in `nvidia-smi topo -m`)
    "cross_node_same_rack",  # several nodes under one ToR switch
    "cross_rack",  # several nodes across racks / aggregation switches
)

#: Normalised job states. Readers map their native states onto these.
STATES: tuple[str, ...] = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
)
#: States in which a job has ended (its duration is known if it started).
TERMINAL_STATES: frozenset[str] = frozenset(STATES) - {"PENDING", "RUNNING"}

FINETUNE_METHODS: tuple[str, ...] = ("full", "lora", "qlora")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4")

# column -> (kind, description). kind is one of "str", "float", "bool".
_SPEC: dict[str, tuple[str, str]] = {
    # ids
    "job_id": ("str", "unique id of the job attempt within its source"),
    "user": ("str", "submitting user"),
    "team": ("str", "team / account / virtual cluster charged for the job"),
    "queue": ("str", "partition, queue or LocalQueue the job was submitted to"),
    "tier": ("str", "priority tier / QoS name, e.g. production, debug, sla, research, best_effort"),
    # request
    "num_gpus": ("float", "GPUs requested (whole devices; 0 for CPU-only jobs)"),
    "gpu_milli": ("float", "share of each GPU requested, 1..1000 (1000 = a whole GPU)"),
    "gpu_type": ("str", "requested or allocated GPU model, e.g. A100-80GB"),
    "num_nodes": ("float", "nodes requested"),
    "cpus": ("float", "CPU cores requested"),
    "mem_mib": ("float", "host memory requested, MiB"),
    "time_limit_s": ("float", "requested wall-clock limit, seconds"),
    "deadline_ts": ("float", "SLA deadline for completion, epoch seconds"),
    "checkpoint_interval_s": ("float", "how often the job checkpoints, seconds"),
    "checkpoint_kind": ("str", "how the job checkpoints, one of CHECKPOINT_KINDS (application, system, none)"),
    "checkpoint_size_gb": ("float", "size of one checkpoint (application state or system snapshot), GB"),
    "constraints": ("str", "where the job may run, canonical constraint text (features.constraints), "
                           "e.g. label=sensitive;region=eu-west"),
    "data_class": ("str", "class of the data the job touches (e.g. sensitive); the policy's residency rules"),
    # workload descriptors
    "job_name": ("str", "job name as submitted"),
    "model_params": ("float", "model parameter count"),
    "precision": ("str", "training precision, one of PRECISIONS"),
    "optimizer": ("str", "optimizer, e.g. adamw, sgd, adafactor"),
    "finetune_method": ("str", "full, lora or qlora"),
    "batch_size": ("float", "per-GPU micro-batch size"),
    "seq_len": ("float", "sequence length in tokens"),
    # memory descriptors (spellings parsed by features.memory_descriptors)
    "precision_mode": ("str", "training precision mode, one of PRECISION_MODES (bf16-mixed keeps fp32 master weights)"),
    "quantization": ("str", "storage of the frozen base weights, one of QUANTIZATIONS (none, nf4, int8, ...)"),
    "parallel_strategy": ("str", "how model states are replicated or sharded, one of PARALLEL_STRATEGIES"),
    "tensor_parallel_size": ("float", "tensor-parallel degree (GPUs one layer is split across)"),
    "pipeline_parallel_size": ("float", "pipeline-parallel degree (stages the layers are split into)"),
    "context_parallel_size": ("float", "context/sequence-parallel degree (GPUs one sequence is split across)"),
    "grad_checkpointing": ("str", "activation recomputation, one of GRAD_CHECKPOINTING (off, selective, full)"),
    "lora_rank": ("float", "LoRA rank r of the adapters"),
    "loss_implementation": ("str", "how the loss handles the logits, one of LOSS_IMPLEMENTATIONS (standard, chunked, fused)"),
    "trainable_params": ("float", "parameters the optimizer updates (adapters; all of them in a full fine-tune)"),
    "image_size": ("float", "input image side length in pixels (vision models, which have no seq_len)"),
    "vocab_size": ("float", "tokenizer vocabulary size (the width of the logits)"),
    # times
    "submit_ts": ("float", "submission time, epoch seconds UTC"),
    "start_ts": ("float", "start time, epoch seconds UTC"),
    "end_ts": ("float", "end time, epoch seconds UTC"),
    # outcome
    "state": ("str", "normalised state, one of STATES"),
    "duration_s": ("float", "run time (end - start); for censored rows the observed lower bound"),
    "censored": ("bool", "true when the job had not ended when the log ended"),
    # labels
    "peak_vram_mib": ("float", "measured peak GPU memory per GPU, MiB"),
    "placement_class": ("str", "placement the job ran on, one of PLACEMENT_CLASSES"),
    "nodes": ("str", "nodes the job runs or ran on, comma-separated (a Slurm host list expanded)"),
    "throughput": ("float", "measured progress rate (e.g. samples/s or steps/s)"),
    # provenance
    "source": ("str", "reader that produced the row"),
}

COLUMNS: tuple[str, ...] = tuple(_SPEC)
STRING_COLUMNS: tuple[str, ...] = tuple(c for c, (k, _) in _SPEC.items() if k == "str")
FLOAT_COLUMNS: tuple[str, ...] = tuple(c for c, (k, _) in _SPEC.items() if k == "float")
BOOL_COLUMNS: tuple[str, ...] = tuple(c for c, (k, _) in _SPEC.items() if k == "bool")
DESCRIPTIONS: dict[str, str] = {c: d for c, (_, d) in _SPEC.items()}

_STATE_SET = frozenset(STATES)
_PLACEMENT_SET = frozenset(PLACEMENT_CLASSES)
_FINETUNE_SET = frozenset(FINETUNE_METHODS)
_PRECISION_SET = frozenset(PRECISIONS)
_VOCABULARIES = {"precision_mode": frozenset(PRECISION_MODES), "quantization": frozenset(QUANTIZATIONS),
                 "parallel_strategy": frozenset(PARALLEL_STRATEGIES), "grad_checkpointing": frozenset(GRAD_CHECKPOINTING),
                 "loss_implementation": frozenset(LOSS_IMPLEMENTATIONS), "checkpoint_kind": frozenset(CHECKPOINT_KINDS)}


@dataclass(frozen=True)
class ValidationResult:
    """Valid rows (canonical columns first, extra columns kept) and rejected rows with a reason."""

    jobs: pd.DataFrame
    rejects: pd.DataFrame

    def reasons(self) -> pd.Series:
        """Count of rejected rows per reason, most frequent first."""
        if self.rejects.empty:
            return pd.Series(dtype="int64", name="count")
        return self.rejects["reject_reason"].value_counts()


def empty_jobs() -> pd.DataFrame:
    """An empty canonical table with the right dtypes."""
    return conform(pd.DataFrame(index=pd.RangeIndex(0)))


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with every canonical column present and typed; extra columns kept after them.

    Missing canonical columns are added as null. Strings become pandas ``string`` dtype (blank and
    whitespace-only values become null), numbers ``float64`` (unparseable values become NaN, which
    ``validate`` then reports), booleans ``bool``.
    """
    out = {}
    n = len(df)
    for col in STRING_COLUMNS:
        if col in df.columns:
            s = df[col].astype("string").str.strip()
            out[col] = s.mask(s == "")
        else:
            out[col] = pd.Series(pd.NA, index=df.index, dtype="string")
    for col in FLOAT_COLUMNS:
        if col in df.columns:
            s = df[col]
            if not pd.api.types.is_float_dtype(s) or isinstance(s.dtype, pd.api.extensions.ExtensionDtype):
                s = pd.to_numeric(s, errors="coerce")
            out[col] = s.astype("float64")
        else:
            out[col] = pd.Series(np.nan, index=df.index, dtype="float64")
    for col in BOOL_COLUMNS:
        if col in df.columns:
            out[col] = df[col].fillna(False).astype(bool)
        else:
            out[col] = pd.Series(np.zeros(n, dtype=bool), index=df.index)
    frame = pd.DataFrame({c: out[c] for c in COLUMNS}, index=df.index)
    extras = [c for c in df.columns if c not in _SPEC and c != "reject_reason"]
    if extras:
        frame = pd.concat([frame, df[extras]], axis=1)
    return frame


def _check(df: pd.DataFrame) -> pd.Series:
    """One reason string per row (null where the row is valid). First failing check wins."""
    reason = pd.Series(pd.NA, index=df.index, dtype="string")

    def flag(mask: pd.Series | np.ndarray, text: str) -> None:
        mask = pd.Series(mask, index=df.index).fillna(False).astype(bool) & reason.isna()
        if mask.any():
            reason[mask] = text

    flag(df["job_id"].isna(), "missing job_id")
    flag(df["submit_ts"].isna(), "missing or unparseable submit time")
    flag(~df["state"].isna() & ~df["state"].isin(_STATE_SET), "unknown state")
    flag(df["state"].isna(), "missing state")
    for col in ("num_gpus", "num_nodes", "cpus", "mem_mib", "batch_size", "seq_len", "model_params"):
        flag(df[col] < 0, f"negative {col}")
    flag((df["time_limit_s"] <= 0), "non-positive time_limit_s")
    flag((df["gpu_milli"] <= 0) | (df["gpu_milli"] > 1000), "gpu_milli outside 1..1000")
    flag(df["start_ts"] < df["submit_ts"], "start before submit")
    flag(df["end_ts"] < df["start_ts"], "end before start")
    flag(df["end_ts"].notna() & df["start_ts"].isna() & df["state"].isin(["COMPLETED", "TIMEOUT"]),
         "completed without a start time")
    flag(df["duration_s"] < 0, "negative duration_s")
    flag(df["peak_vram_mib"] < 0, "negative peak_vram_mib")
    flag(df["checkpoint_size_gb"] < 0, "negative checkpoint_size_gb")
    if df["constraints"].notna().any():  # rule *constraint form* (features.constraints)
        for idx, text in df["constraints"].dropna().items():
            try:
                normalise_constraints(text)
            except ValueError as exc:
                flag(df.index == idx, f"malformed constraints: {exc}")
    flag(~df["placement_class"].isna() & ~df["placement_class"].isin(_PLACEMENT_SET), "unknown placement_class")
    flag(~df["finetune_method"].isna() & ~df["finetune_method"].isin(_FINETUNE_SET), "unknown finetune_method")
    flag(~df["precision"].isna() & ~df["precision"].isin(_PRECISION_SET), "unknown precision")
    for col, allowed in _VOCABULARIES.items():
        flag(~df[col].isna() & ~df[col].isin(allowed), f"unknown {col}")
    for col in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size", "lora_rank", "image_size",
                "vocab_size", "trainable_params"):
        flag(df[col] < 1, f"{col} below 1")
    flag(df["job_id"].notna() & df.duplicated(subset=["job_id"], keep="first"), "duplicate job_id")
    return reason


def validate(df: pd.DataFrame, *, log_end_ts: float | None = None) -> ValidationResult:
    """Split a reader's output into canonical valid rows and rejected rows with reasons.

    Parameters
    ----------
    df : DataFrame of shape (n_rows, n_columns)
        Canonical column names (missing ones are added as null); extra columns are kept.
    log_end_ts : float, optional
        When the log ends (epoch seconds). Used to give censored rows that started an observed
        duration lower bound ``log_end_ts - start_ts``. Defaults to the latest time in the table.

    Returns
    -------
    ValidationResult
        ``jobs``: valid rows, canonical columns first; ``rejects``: the rejected input rows
        (canonical columns plus extras) with a ``reject_reason`` column.
    """
    frame = conform(df)
    reason = _check(frame)
    bad = reason.notna()
    rejects = frame.loc[bad].copy()
    rejects["reject_reason"] = reason[bad]
    jobs = frame.loc[~bad].copy()
    if jobs["constraints"].notna().any():  # one canonical text per constraint (features.constraints)
        jobs["constraints"] = pd.array([normalise_constraints(v) if isinstance(v, str) else None
                                        for v in jobs["constraints"].tolist()], dtype="string")
    if jobs["gpu_type"].notna().any():  # one spelling per GPU model (features.gpu_types); unknown names kept
        jobs["gpu_type"] = pd.array(DEFAULT_VOCABULARY.canonicalise(jobs["gpu_type"].tolist()), dtype="string")

    # Outcome: censored when the job has not ended by the end of the log.
    not_ended = jobs["state"].isin(["PENDING", "RUNNING"]) | (jobs["end_ts"].isna() & ~jobs["state"].isin(TERMINAL_STATES))
    jobs["censored"] = jobs["censored"] | not_ended
    jobs.loc[jobs["censored"], "end_ts"] = np.nan
    known = jobs["duration_s"].isna() & jobs["start_ts"].notna() & jobs["end_ts"].notna()
    jobs.loc[known, "duration_s"] = jobs.loc[known, "end_ts"] - jobs.loc[known, "start_ts"]
    if log_end_ts is None:
        times = jobs[["submit_ts", "start_ts", "end_ts"]].to_numpy(dtype="float64")
        log_end_ts = float(np.nanmax(times)) if times.size and not np.isnan(times).all() else None
    if log_end_ts is not None:
        open_run = jobs["censored"] & jobs["duration_s"].isna() & jobs["start_ts"].notna()
        jobs.loc[open_run, "duration_s"] = np.maximum(log_end_ts - jobs.loc[open_run, "start_ts"], 0.0)
    return ValidationResult(jobs=jobs.reset_index(drop=True), rejects=rejects.reset_index(drop=True))
