"""Loading policies: the policy file, the shipped default, and named presets.

A *preset* (``preset_files/<name>.yaml``) is an overlay: it sets the scheduling behaviour (ordering,
queueing, reservation, preemption...) and leaves the organisation (tiers, teams, shares, SLA
classes) of the base policy alone, so ``load_policy("site.yaml", preset="fifo")`` is FIFO on the
site's teams. Overlays merge mappings key by key; anything else is replaced.

Errors are ``InputError`` naming the file and the field (or the YAML line).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from features.errors import InputError
from features.yaml_files import read_yaml_mapping
from predictor.policy.config import PolicyConfig

__all__ = ["load_policy", "policy_from_mapping", "preset_names", "read_yaml", "default_policy_path",
           "format_validation_error"]

_PRESET_DIR = "preset_files"


def default_policy_path() -> Path:
    """Path of the shipped ``default_policy.yaml`` (every field, with comments)."""
    return Path(str(resources.files("predictor.policy").joinpath("default_policy.yaml")))


def preset_names() -> tuple[str, ...]:
    """Names of the shipped presets (``fifo``, ``sjf-oracle``, ``qssf``, ``las``, ``kueue``, ``ours``)."""
    folder = resources.files("predictor.policy").joinpath(_PRESET_DIR)
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")))


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A policy file's mapping (``features.yaml_files.read_yaml_mapping`` with policy-file messages)."""
    return read_yaml_mapping(path, "policy file")


def format_validation_error(exc: ValidationError, origin: str) -> str:
    """One line per problem: ``origin: field.path: message (got value)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f" (got {got!r})"
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see default_policy.yaml)"
        lines.append(f"{loc}: {msg}{shown}")
    return f"{origin}: " + "; ".join(lines)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def policy_from_mapping(data: Mapping[str, Any], origin: str = "policy") -> PolicyConfig:
    """Validate a mapping into a :class:`PolicyConfig`; InputError naming each bad field."""
    try:
        return PolicyConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, origin)) from None


def _preset_overlay(name: str) -> dict[str, Any]:
    if name not in preset_names():
        raise InputError(f"unknown policy preset {name!r}; choose one of {', '.join(preset_names())}")
    path = resources.files("predictor.policy").joinpath(_PRESET_DIR, f"{name}.yaml")
    return yaml.safe_load(path.read_text()) or {}


def load_policy(path: str | Path | None = None, *, preset: str | None = None) -> PolicyConfig:
    """The effective policy: ``path`` (or the shipped default when None) with ``preset`` overlaid.

    Parameters
    ----------
    path : str or Path, optional
        A policy YAML file; fields it omits take their defaults.
    preset : str, optional
        One of :func:`preset_names`, overlaid on the file's settings.

    Raises
    ------
    InputError
        Unreadable file, bad YAML (with its line), an invalid or unknown field, an unknown preset.
    """
    if path is None:
        base = read_yaml(default_policy_path())
        origin = "default policy"
    else:
        base = read_yaml(path)
        origin = f"policy file {path}"
    if preset is not None:
        base = _merge(base, _preset_overlay(preset))
        origin += f" with preset {preset}"
    return policy_from_mapping(base, origin)
