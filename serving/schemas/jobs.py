"""Job shapes: what a caller submits (``JobCreate``), changes (``JobUpdate``), reports
(``JobEventCreate``), and what it gets back (``JobPublic``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from features.constraints import normalise_constraints
from features.schema import CHECKPOINT_KINDS, FINETUNE_METHODS, PLACEMENT_CLASSES, PRECISIONS
from serving.schemas.results import DecisionPublic, PredictionPublic

__all__ = ["JobSpec", "JobCreate", "JobUpdate", "JobEventCreate", "JobPublic", "JobList", "GpusAllocated", "EVENT_KINDS",
           "JOB_ID_PATTERN"]

#: A scheduler's job id: Slurm's ``123``, ``123_4`` (array), ``123+0`` (heterogeneous), Kueue's
#: ``namespace/name``. Segments between slashes start with a letter or digit, so no id holds an empty,
#: ``.`` or ``..`` segment that URL normalisation would rewrite: every id round-trips through the path.
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*(/[A-Za-z0-9][A-Za-z0-9._:@+=-]*)*$"
EVENT_KINDS = ("started", "checkpointed", "finished", "failed", "preempted")

Name = Annotated[str, Field(min_length=1, max_length=255)]
#: Bounds keep every quantity physically meaningful (ten years of run time, a petabyte of memory...).
TEN_YEARS_S = 10 * 365.25 * 86400
NonNeg = Annotated[float, Field(ge=0, le=1e15)]
Seconds = Annotated[float, Field(gt=0, le=TEN_YEARS_S, description="seconds")]
Timestamp = Annotated[float, Field(ge=0, le=1e11, description="epoch seconds UTC")]
Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
Finetune = Literal[FINETUNE_METHODS]  # type: ignore[valid-type]
PlacementClass = Literal[PLACEMENT_CLASSES]  # type: ignore[valid-type]
CheckpointKind = Literal[CHECKPOINT_KINDS]  # type: ignore[valid-type]
Constraint = Annotated[str, Field(min_length=1, max_length=2048, description=(
    "where the job may run, e.g. region=eu-west;label=sensitive (docs/residency.md)"))]

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, str_strip_whitespace=True)


class JobRequestFields(BaseModel):
    """What a job asks for and what is known about its workload (the canonical record's request part)."""

    model_config = _STRICT

    user: Name | None = None
    team: Name | None = None
    queue: Name | None = None
    tier: Name | None = Field(default=None, description="priority tier / QoS; the policy's default when absent")
    num_gpus: Annotated[int, Field(ge=1, le=100_000, description="GPUs (a gang: all at once)")] = 1
    gpu_milli: Annotated[float, Field(ge=1, le=1000)] | None = None
    gpu_type: Name | None = None
    num_nodes: Annotated[float, Field(ge=1, le=100_000)] | None = None
    cpus: NonNeg | None = None
    mem_mib: NonNeg | None = None
    time_limit_s: Seconds | None = None
    deadline_ts: Timestamp | None = None
    checkpoint_interval_s: Seconds | None = None
    job_name: Annotated[str, Field(max_length=1024)] | None = None
    model_params: NonNeg | None = None
    precision: Precision | None = None
    optimizer: Name | None = None
    finetune_method: Finetune | None = None
    batch_size: NonNeg | None = None
    seq_len: NonNeg | None = None
    # residency and checkpoints (docs/residency.md, docs/rules-layer.md *Checkpoint kinds*)
    constraints: Constraint | None = None
    data_class: Name | None = None
    checkpoint_kind: CheckpointKind | None = None
    checkpoint_size_gb: NonNeg | None = None

    @field_validator("constraints")
    @classmethod
    def _constraint_form(cls, value: str | None) -> str | None:
        return normalise_constraints(value)  # ValueError naming the term -> 422 on this field


class JobSpec(JobRequestFields):
    """A job to score or submit. ``submit_ts`` defaults to the time the request arrives."""

    job_id: Annotated[str, Field(min_length=1, max_length=255, pattern=JOB_ID_PATTERN)]
    submit_ts: Timestamp | None = None


class JobCreate(JobSpec):
    """A job to add to the tracked queue (idempotent by ``job_id``)."""


class JobUpdate(BaseModel):
    """Fields of a pending job that may change; absent fields stay as they are."""

    model_config = _STRICT

    queue: Name | None = None
    tier: Name | None = None
    num_gpus: Annotated[int, Field(ge=1, le=100_000)] | None = None
    gpu_milli: Annotated[float, Field(ge=1, le=1000)] | None = None
    gpu_type: Name | None = None
    num_nodes: Annotated[float, Field(ge=1, le=100_000)] | None = None
    cpus: NonNeg | None = None
    mem_mib: NonNeg | None = None
    time_limit_s: Seconds | None = None
    deadline_ts: Timestamp | None = None
    checkpoint_interval_s: Seconds | None = None
    batch_size: NonNeg | None = None
    seq_len: NonNeg | None = None


class GpusAllocated(BaseModel):
    """GPUs a job holds on one node (local GPU indices, as ``nvidia-smi`` numbers them)."""

    model_config = _STRICT

    node: Name
    gpu_indices: list[Annotated[int, Field(ge=0, le=1023)]] = Field(min_length=1, max_length=1024,
                                                                    json_schema_extra={"uniqueItems": True})

    @field_validator("gpu_indices")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        twice = sorted({g for g in value if value.count(g) > 1})
        if twice:
            raise ValueError(f"GPU {', '.join(map(str, twice))} named twice")
        return value


class JobEventCreate(BaseModel):
    """Something that happened to a tracked job.

    ``started`` (pending -> running), ``checkpointed`` (running), ``finished`` (running -> ended,
    state COMPLETED unless given), ``failed`` (pending/running -> ended, state FAILED unless given),
    ``preempted`` (running -> pending again; the run so far is charged to the team).
    """

    model_config = _STRICT

    kind: Literal[EVENT_KINDS]  # type: ignore[valid-type]
    ts: Timestamp | None = Field(default=None, description="when it happened; defaults to now")
    state: Literal["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"] | None = None
    peak_vram_mib: NonNeg | None = None
    placement_class: PlacementClass | None = None
    gpu_type: Name | None = None
    nodes: list[GpusAllocated] | None = Field(default=None, min_length=1, description=(
        "started: the GPUs the job got, one entry per node, as many GPUs as the job asks for (none "
        "that a running job holds); default: its decision's placement if free, else the best free gang"))

    @field_validator("nodes")
    @classmethod
    def _one_entry_per_node(cls, value: list[GpusAllocated] | None) -> list[GpusAllocated] | None:
        names = [part.node for part in value or ()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"node {', '.join(twice)} listed twice; give each node's GPUs in one entry")
        return value


class JobPublic(BaseModel):
    """A tracked job as the API shows it."""

    job_id: str
    team: str | None
    user: str | None
    queue: str | None
    tier: str | None
    status: Literal["pending", "running", "ended", "cancelled"]
    state: str
    submit_ts: float
    start_ts: float | None
    end_ts: float | None
    last_checkpoint_ts: float | None
    allocation: list[GpusAllocated] | None = Field(description="the GPUs a running job holds (null otherwise)")
    request: dict[str, Any] = Field(description="the submitted fields")
    prediction: PredictionPublic | None
    decision: DecisionPublic | None
    created_by: str
    created_at: float
    updated_at: float
    revision: int


class JobList(BaseModel):
    jobs: list[JobPublic]
