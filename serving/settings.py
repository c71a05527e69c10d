"""The service's settings: the engine's (``predictor.engine.wiring.EngineSettings``) plus how it runs.

=============================  ==============================================  ==========================
variable                        meaning                                         default
=============================  ==============================================  ==========================
``PREDICTOR_BIND``              ``host:port`` for ``predictor serve``            ``127.0.0.1:8000``
``PREDICTOR_WORKERS``           uvicorn worker processes                        ``1``
``PREDICTOR_TOKENS_FILE``       YAML/JSON file of API tokens (format below)     none
``PREDICTOR_TOKENS``            the same list, inline as JSON                   none
``PREDICTOR_MAX_BODY_BYTES``    largest request body accepted (413 above)       ``2097152``
``PREDICTOR_MAX_BATCH``         most jobs in one ``POST /v1/score``             ``1000``
``PREDICTOR_STREAM_BUFFER``     events buffered per WebSocket client            ``1000``
``PREDICTOR_STREAM_POLL_S``     how often each worker polls the event log       ``0.25``
``PREDICTOR_OUTBOX_TARGETS``    JSON list of adapters to queue decisions for    ``[]``
``PREDICTOR_MIGRATE_ON_START``  apply database migrations at start-up           ``true``
``PREDICTOR_MAX_CONCURRENCY``   API requests one worker works on at once        ``2``
``PREDICTOR_MAX_QUEUE``         more requests that may wait for one of those    ``16``
``PREDICTOR_QUEUE_WAIT_MS``     longest (or expected) wait for a slot (503)      ``40``
``PREDICTOR_RETRY_AFTER_S``     ``Retry-After`` of a shed request (seconds)      ``1``
``PREDICTOR_DEADLINE_MS``       deadline of a score request that sets none      none
``PREDICTOR_INLINE_SCORE_MS``   score on the event loop while alone, up to this ``10``
=============================  ==============================================  ==========================

Load shedding and deadlines (``serving.load_shedding``, docs/serving.md): past ``MAX_CONCURRENCY``
requests in progress and ``MAX_QUEUE`` waiting, or after ``QUEUE_WAIT_MS`` waiting, or when it would
wait longer than that (the mean time a request holds a slot times those ahead of it), a request is
answered 503 with ``Retry-After`` at once; a ``POST /v1/score`` whose deadline (header
``X-Deadline-Ms``: milliseconds the caller still waits, counted from when the worker reads the
request) would pass before the model answers is scored by the analytic fallback, and the response
says ``"degraded": "deadline"``. A score request that is the only request in its worker and is
expected to take at most ``INLINE_SCORE_MS`` is scored on the event loop (nothing else is there to
read or shed meanwhile); every other one in a worker thread (``0``: always in a thread).

plus the engine's: ``PREDICTOR_DATABASE_URL``, ``MLFLOW_TRACKING_URI``, ``PREDICTOR_MODEL_URI``,
``PREDICTOR_MODEL_POLL_S``, ``PREDICTOR_POLICY_FILE``, ``PREDICTOR_INVENTORY_FILE``.

Token file format (YAML or JSON)::

    tokens:
      - name: slurm-webhook          # who, as written in the audit log
        role: scheduler              # scheduler | member | admin
        token: "kJ8f...32+ chars"    # the bearer token itself, or instead:
      - name: alice
        role: member
        team: nlp                    # required for members: the one team they see and change
        sha256: "9f86d08...64 hex"   # sha256 hex digest of the token (keeps it out of the file)
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from features.errors import InputError
from features.yaml_files import read_yaml_mapping
from predictor.engine.wiring import EngineSettings, settings_from_env

__all__ = ["Role", "ROLES", "TokenSpec", "Settings", "get_settings", "load_tokens", "load_tokens_file", "check_unique",
           "token_digest"]

Role = Literal["scheduler", "member", "admin"]
ROLES: tuple[str, ...] = ("scheduler", "member", "admin")
MIN_TOKEN_CHARS = 16


def token_digest(token: str) -> str:
    """The sha256 hex digest a token is stored and compared as."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenSpec(BaseModel):
    """One API token: who holds it, its role, and (for members) its team."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=255)
    role: Role
    team: str | None = Field(default=None, min_length=1, max_length=255)
    token: str | None = Field(default=None, min_length=MIN_TOKEN_CHARS, repr=False)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", repr=False)

    @model_validator(mode="after")
    def _check(self) -> TokenSpec:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("give exactly one of 'token' and 'sha256'")
        if self.role == "member" and self.team is None:
            raise ValueError("a member token needs a 'team'")
        return self

    @property
    def digest(self) -> str:
        return self.sha256 if self.sha256 is not None else token_digest(self.token or "")


class _TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[TokenSpec]


class Settings(EngineSettings):
    """Where the service's state, model and tokens are, and how it runs. See the module docstring."""

    bind: str = Field(default="127.0.0.1:8000", pattern=r"^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$")
    workers: int = Field(default=1, ge=1, le=64)
    tokens_file: Path | None = None
    tokens: list[TokenSpec] = Field(default_factory=list)
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_batch: int = Field(default=1000, ge=1)
    stream_buffer: int = Field(default=1000, ge=1)
    stream_poll_s: float = Field(default=0.25, gt=0)
    outbox_targets: list[str] = Field(default_factory=list)
    migrate_on_start: bool = True
    max_concurrency: int = Field(default=2, ge=1, le=10_000)
    max_queue: int = Field(default=16, ge=0, le=100_000)
    queue_wait_ms: float = Field(default=40.0, gt=0)
    retry_after_s: int = Field(default=1, ge=0, le=3600)
    deadline_ms: float | None = Field(default=None, gt=0)
    inline_score_ms: float = Field(default=10.0, ge=0, le=1000)

    @field_validator("bind")
    @classmethod
    def _port_in_range(cls, bind: str) -> str:
        port = int(bind.rsplit(":", 1)[1])
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is not a TCP port (1-65535)")
        return bind

    @property
    def host(self) -> str:
        return self.bind.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rsplit(":", 1)[1])


def load_tokens_file(path: Path) -> list[TokenSpec]:
    """The entries of a tokens file (format in the module docstring).

    Raises
    ------
    InputError
        The file is missing or malformed; the message names the file and the entry.
    """
    raw = read_yaml_mapping(path, "tokens file")
    try:
        return list(_TokenFile.model_validate(raw).tokens)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}") from None


def check_unique(specs: list[TokenSpec]) -> list[TokenSpec]:
    """``specs``, checked: no token and no name given twice.

    Raises
    ------
    InputError
        Two entries share a token or a name.
    """
    seen_digest: set[str] = set()
    seen_name: set[str] = set()
    for spec in specs:
        if spec.digest in seen_digest:
            raise InputError(f"token of {spec.name!r} is given twice")
        if spec.name in seen_name:
            raise InputError(f"token name {spec.name!r} is used twice; names identify actors in the audit log")
        seen_digest.add(spec.digest)
        seen_name.add(spec.name)
    return specs


def load_tokens(settings: Settings) -> list[TokenSpec]:
    """All tokens: the file's (``PREDICTOR_TOKENS_FILE``) followed by the inline ones.

    Raises
    ------
    InputError
        The file is missing or malformed, or two entries share a token or a name.
    """
    specs: list[TokenSpec] = []
    if settings.tokens_file is not None:
        if not settings.tokens_file.exists():
            raise InputError(f"PREDICTOR_TOKENS_FILE: {settings.tokens_file} does not exist")
        specs.extend(load_tokens_file(settings.tokens_file))
    specs.extend(settings.tokens)
    return check_unique(specs)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once.

    Raises
    ------
    InputError
        An environment variable has a bad value; the message names it.
    """
    return settings_from_env(Settings)
