"""Wiring: deployment settings -> the engine (model slot following the registry, policy, inventory).

Settings come from environment variables, read once by :func:`get_engine_settings`. The scheduling
policy (tiers, weights, shares) is not here: it is the policy file, validated by ``predictor.policy``.
The service adds its own settings on top of these (``serving.settings``: bind address, workers,
tokens, request limits).

=============================  ==============================================  ==========================
variable                        meaning                                         default
=============================  ==============================================  ==========================
``PREDICTOR_DATABASE_URL``      state store (``sqlite:///...`` or               ``sqlite:///./predictor.db``
                                ``postgresql://user@host:5432/db``)
``MLFLOW_TRACKING_URI``         MLflow tracking store holding the model         ``sqlite:///./mlflow.db``
``PREDICTOR_MODEL_URI``         model to serve                                  ``models:/job-predictor@champion``
``PREDICTOR_MODEL_POLL_S``      how often to check whether the alias moved      ``30``
``PREDICTOR_POLICY_FILE``       policy YAML used until one is PUT               the packaged default
``PREDICTOR_INVENTORY_FILE``    cluster inventory YAML                          64 x A100-80GB (8 per node)
``PREDICTOR_COMPILE_BOOSTERS``  compile a loaded model's boosters (lleaves)     ``true``
``PREDICTOR_COMPILE_CACHE``     where compiled boosters are cached              ``~/.cache/gpu-job-predictor/lleaves``
=============================  ==============================================  ==========================
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from features.errors import InputError
from predictor.capacity.inventory import homogeneous_inventory
from predictor.engine.engine import Engine
from predictor.engine.model_slot import FramePredictor, ModelSlot
from predictor.policy.config import PolicyConfig
from predictor.policy.presets import load_policy

__all__ = ["EngineSettings", "get_engine_settings", "settings_from_env", "build_engine", "registry_model_slot",
           "parse_model_uri", "promote_model", "DEFAULT_INVENTORY_GPUS"]

log = logging.getLogger(__name__)

#: Inventory used when PREDICTOR_INVENTORY_FILE is not set: 64 x A100-80GB, 8 per node.
DEFAULT_INVENTORY_GPUS = 64


def _default_sqlite(name: str) -> str:
    return f"sqlite:///{Path.cwd().resolve() / name}"


class EngineSettings(BaseSettings):
    """Where the state, the model, the policy and the inventory are. See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="PREDICTOR_", extra="ignore", frozen=True)

    database_url: str = Field(default_factory=lambda: _default_sqlite("predictor.db"))
    mlflow_tracking_uri: str = Field(
        default_factory=lambda: _default_sqlite("mlflow.db"),
        validation_alias=AliasChoices("MLFLOW_TRACKING_URI", "PREDICTOR_MLFLOW_TRACKING_URI"),
    )
    model_uri: str = "models:/job-predictor@champion"
    model_poll_s: float = Field(default=30.0, gt=0)
    policy_file: Path | None = None
    inventory_file: Path | None = None


S = TypeVar("S", bound=BaseSettings)


def _variable(field: str) -> str:
    return "MLFLOW_TRACKING_URI" if field == "mlflow_tracking_uri" else f"PREDICTOR_{field.upper()}"


def settings_from_env(cls: type[S]) -> S:
    """``cls()`` read from the environment, a bad value raised as one line naming its variable.

    Raises
    ------
    InputError
        An environment variable has a bad value; the message names it.
    """
    try:
        return cls()
    except SettingsError as exc:  # a complex value (JSON list) that does not parse
        field = str(exc).split('"')[1] if '"' in str(exc) else "?"
        raise InputError(f"{_variable(field)}: not valid JSON ({exc.__cause__ or exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "?"
        raise InputError(f"{_variable(field)}: {first['msg']} "
                         f"(got {json.dumps(first.get('input'), default=str)[:200]})") from None


@lru_cache(maxsize=1)
def get_engine_settings() -> EngineSettings:
    """The process's engine settings, read from the environment once (see :func:`settings_from_env`)."""
    return settings_from_env(EngineSettings)


def parse_model_uri(uri: str) -> tuple[str, str | None, str | None]:
    """``models:/name@alias`` -> (name, alias, None); ``models:/name/3`` -> (name, None, "3").

    Raises
    ------
    InputError
        Not a ``models:/`` URI of either form.
    """
    if not uri.startswith("models:/") or len(uri) <= len("models:/"):
        raise InputError(f"PREDICTOR_MODEL_URI: expected models:/<name>@<alias> or models:/<name>/<version>, got {uri!r}")
    rest = uri[len("models:/"):]
    if "@" in rest:
        name, alias = rest.split("@", 1)
        if name and alias:
            return name, alias, None
    elif "/" in rest:
        name, version = rest.rsplit("/", 1)
        if name and version.isdigit():
            return name, None, version
    raise InputError(f"PREDICTOR_MODEL_URI: expected models:/<name>@<alias> or models:/<name>/<version>, got {uri!r}")


def registry_model_slot(settings: EngineSettings) -> ModelSlot:
    """A model slot following ``settings.model_uri`` in the MLflow registry, with the analytic fallback."""
    from models import fallback as fallback_models
    from models import registry

    name, alias, version = parse_model_uri(settings.model_uri)
    tracking = settings.mlflow_tracking_uri

    def resolve() -> str | None:
        if version is not None:
            return f"{name}/{version}"
        found = registry.alias_version(name, alias, tracking_uri=tracking)
        return None if found is None else f"{name}/{found}"

    def load(model_version: str) -> FramePredictor:
        return registry.load_predictor(f"models:/{model_version}", tracking_uri=tracking)

    def warm(model_version: str, predictor: FramePredictor, report) -> None:  # noqa: ANN001 - slot's WarmFn
        from models.compiled import compile_boosters

        # once per version, in the reload thread after the swap (the version answers with LightGBM
        # meanwhile): the boosters as native code, LightGBM where that is off or fails (models.compiled)
        counts = compile_boosters(predictor, progress=report)
        if counts["boosters"]:
            log.info("model %s: %d of %d boosters compiled (%d failed, %d left to LightGBM)", model_version,
                     counts["compiled"], counts["boosters"], counts["failed"], counts["skipped"])

    return ModelSlot(uri=settings.model_uri, resolve=resolve, load=load, warm=warm,
                     fallback=fallback_models.FallbackPredictor(), poll_s=settings.model_poll_s)


def build_engine(settings: EngineSettings, *, model: ModelSlot | None = None) -> tuple[Engine, PolicyConfig]:
    """The engine the settings describe, and the policy it starts with (the file's, or the default).

    The model slot is not started (``engine.model.start()`` starts hot reload).
    """
    policy = load_policy(settings.policy_file)
    if settings.inventory_file is not None:
        from predictor.capacity.inventory_sources import load_inventory

        inventory = load_inventory(settings.inventory_file)
    else:
        inventory = homogeneous_inventory(DEFAULT_INVENTORY_GPUS)
    engine = Engine(model=model or registry_model_slot(settings), policy=policy, inventory=inventory)
    return engine, policy


def promote_model(settings: EngineSettings, *, source: str = "challenger", target: str = "champion",
                  force: bool = False, reason: str | None = None) -> dict:
    """Move the registry alias ``target`` to the version ``source`` names, through the promotion gate
    of ``models.registry.promote`` (``force`` with a ``reason`` skips the gate). Returns its report."""
    from models import registry

    name, _, _ = parse_model_uri(settings.model_uri)
    registry.tracking_uri(settings.mlflow_tracking_uri)
    return registry.promote(name=name, source=source, target=target, force=force, reason=reason)
