"""Deployment settings, from environment variables, built once by :func:`get_settings`.

The scheduling policy (tiers, weights, shares) is not here: it is the policy file, validated by
``predictor.policy``. These settings say where things are and how the service runs.

=============================  ==============================================  ==========================
variable                        meaning                                         default
=============================  ==============================================  ==========================
``PREDICTOR_DATABASE_URL``      state store (``sqlite:///...`` or               ``sqlite:///./predictor.db``
                                ``postgresql://user@host:5432/db``)
``MLFLOW_TRACKING_URI``         MLflow tracking store holding the model         ``sqlite:///./mlflow.db``
``PREDICTOR_MODEL_URI``         model to serve                                  ``models:/job-predictor@champion``
``PREDICTOR_MODEL_POLL_S``      how often to check whether the alias moved      ``30``
``PREDICTOR_BIND``              ``host:port`` for ``predictor serve``            ``127.0.0.1:8000``
``PREDICTOR_WORKERS``           uvicorn worker processes                        ``1``
``PREDICTOR_TOKENS_FILE``       YAML/JSON file of API tokens (format below)     none
``PREDICTOR_TOKENS``            the same list, inline as JSON                   none
``PREDICTOR_POLICY_FILE``       policy YAML used until one is PUT               the packaged default
``PREDICTOR_INVENTORY_FILE``    cluster inventory YAML                          64 x A100-80GB (8 per node)
``PREDICTOR_MAX_BODY_BYTES``    largest request body accepted (413 above)       ``2097152``
``PREDICTOR_MAX_BATCH``         most jobs in one ``POST /v1/score``             ``1000``
``PREDICTOR_STREAM_BUFFER``     events buffered per WebSocket client            ``1000``
``PREDICTOR_STREAM_POLL_S``     how often each worker polls the event log       ``0.25``
``PREDICTOR_OUTBOX_TARGETS``    JSON list of adapters to queue decisions for    ``[]``
``PREDICTOR_MIGRATE_ON_START``  apply database migrations at start-up           ``true``
=============================  ==============================================  ==========================

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
import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from features.errors import InputError

__all__ = ["Role", "ROLES", "TokenSpec", "Settings", "get_settings", "load_tokens", "token_digest"]

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


def _default_sqlite(name: str) -> str:
    return f"sqlite:///{Path.cwd().resolve() / name}"


class Settings(BaseSettings):
    """Where the service's state, model and tokens are, and how it runs. See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="PREDICTOR_", extra="ignore", frozen=True)

    database_url: str = Field(default_factory=lambda: _default_sqlite("predictor.db"))
    mlflow_tracking_uri: str = Field(
        default_factory=lambda: _default_sqlite("mlflow.db"),
        validation_alias=AliasChoices("MLFLOW_TRACKING_URI", "PREDICTOR_MLFLOW_TRACKING_URI"),
    )
    model_uri: str = "models:/job-predictor@champion"
    model_poll_s: float = Field(default=30.0, gt=0)
    bind: str = Field(default="127.0.0.1:8000", pattern=r"^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:]+\]:\d{1,5}$")
    workers: int = Field(default=1, ge=1, le=64)
    tokens_file: Path | None = None
    tokens: list[TokenSpec] = Field(default_factory=list)
    policy_file: Path | None = None
    inventory_file: Path | None = None
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_batch: int = Field(default=1000, ge=1)
    stream_buffer: int = Field(default=1000, ge=1)
    stream_poll_s: float = Field(default=0.25, gt=0)
    outbox_targets: list[str] = Field(default_factory=list)
    migrate_on_start: bool = True

    @property
    def host(self) -> str:
        return self.bind.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rsplit(":", 1)[1])


def load_tokens(settings: Settings) -> list[TokenSpec]:
    """All tokens: the file's (``PREDICTOR_TOKENS_FILE``) followed by the inline ones.

    Raises
    ------
    InputError
        The file is missing or malformed, or two entries share a token or a name.
    """
    specs: list[TokenSpec] = []
    if settings.tokens_file is not None:
        path = settings.tokens_file
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"PREDICTOR_TOKENS_FILE: {path} does not exist") from None
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: not valid YAML/JSON ({exc})") from None
        try:
            specs.extend(_TokenFile.model_validate(raw).tokens)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(f"{path}: {where}: {first['msg']}") from None
    specs.extend(settings.tokens)
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once.

    Raises
    ------
    InputError
        An environment variable has a bad value; the message names it.
    """
    try:
        return Settings()
    except SettingsError as exc:  # a complex value (JSON list) that does not parse
        field = str(exc).split('"')[1] if '"' in str(exc) else "?"
        name = "MLFLOW_TRACKING_URI" if field == "mlflow_tracking_uri" else f"PREDICTOR_{field.upper()}"
        raise InputError(f"{name}: not valid JSON ({exc.__cause__ or exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        name = "MLFLOW_TRACKING_URI" if field == "mlflow_tracking_uri" else f"PREDICTOR_{field.upper()}"
        raise InputError(f"{name}: {first['msg']} (got {json.dumps(first.get('input'), default=str)[:200]})") from None
