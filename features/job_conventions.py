"""Where a job record says how it checkpoints and where it may run: ``key=value`` pairs in Kubernetes
annotations/labels (``predictor/<key>``) and in a Slurm ``--comment``, the same keys as the memory
descriptors (``features.memory_conventions``).

Keys (with aliases) -> canonical column:

* ``checkpoint-kind`` (``ckpt-kind``): :data:`CHECKPOINT_KINDS` -> ``checkpoint_kind``.
  ``application`` (also ``app``, ``framework``, ``pytorch``, ``tensorflow``): the job saves its own
  state at intervals and loses the work since the last save; ``system`` (``criu``,
  ``cuda-checkpoint``, ``snapshot``, ``transparent``): a process snapshot taken at eviction, little
  work lost but the snapshot is written and restored; ``none`` (``off``, ``never``): loses all.
* ``checkpoint-interval`` (``checkpoint-interval-s``, ``ckpt-interval``): seconds, or a duration
  ``30m``, ``2h``, ``90s`` -> ``checkpoint_interval_s``.
* ``checkpoint-size-gb`` (``checkpoint-size``, ``ckpt-size-gb``): GB (``40``, ``40G``, ``1.5T``)
  -> ``checkpoint_size_gb``.
* ``constraints`` (``constraint``, ``residency``): a constraint text (``features.constraints``) ->
  ``constraints``.
* ``data-class`` (``data_class``, ``dataclass``): a name such as ``sensitive`` -> ``data_class``.

A value that does not parse is skipped (the record keeps its other fields), like a memory descriptor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from features.constraints import normalise_constraints

__all__ = ["CHECKPOINT_KINDS", "JOB_KEYS", "parse_checkpoint_kind", "parse_duration_s", "parse_size_gb",
           "job_fields_from_pairs", "job_fields_from_comment", "job_fields_from_kubernetes"]

#: Checkpoint kinds a job may declare (column ``checkpoint_kind``).
CHECKPOINT_KINDS: tuple[str, ...] = ("application", "system", "none")

_KIND_ALIASES: Mapping[str, str] = {
    **dict.fromkeys(("application", "app", "application-level", "framework", "pytorch", "tensorflow", "torch"),
                    "application"),
    **dict.fromkeys(("system", "system-level", "criu", "cuda-checkpoint", "snapshot", "transparent"), "system"),
    **dict.fromkeys(("none", "off", "no", "never", "false"), "none"),
}

JOB_KEYS: Mapping[str, str] = {
    **dict.fromkeys(("checkpoint-kind", "checkpoint_kind", "ckpt-kind", "ckpt_kind"), "checkpoint_kind"),
    **dict.fromkeys(("checkpoint-interval", "checkpoint-interval-s", "checkpoint_interval_s", "checkpoint_interval",
                     "ckpt-interval", "ckpt_interval"), "checkpoint_interval_s"),
    **dict.fromkeys(("checkpoint-size-gb", "checkpoint_size_gb", "checkpoint-size", "checkpoint_size",
                     "ckpt-size-gb", "ckpt-size"), "checkpoint_size_gb"),
    **dict.fromkeys(("constraints", "constraint", "residency"), "constraints"),
    **dict.fromkeys(("data-class", "data_class", "dataclass"), "data_class"),
}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d)?$", re.IGNORECASE)
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(g|gb|gib|t|tb|tib|m|mb|mib)?$", re.IGNORECASE)
_UNIT_S = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0}
_UNIT_GB = {None: 1.0, "g": 1.0, "gb": 1.0, "gib": 1.0, "t": 1000.0, "tb": 1000.0, "tib": 1024.0,
            "m": 1e-3, "mb": 1e-3, "mib": 1.0 / 1024}
# ``key=value`` pairs; a constraint value keeps its ``;`` ``|`` ``=`` only when quoted
_PAIR = re.compile(r"""([A-Za-z][\w.-]*)\s*=\s*("[^"]*"|'[^']*'|[^\s,]+)""")


def parse_checkpoint_kind(value: Any) -> str | None:
    """Canonical checkpoint kind (None for null); ValueError naming the kinds when unknown."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    kind = _KIND_ALIASES.get(str(value).strip().lower())
    if kind is None:
        raise ValueError(f"unknown checkpoint kind {value!r}; use one of {', '.join(CHECKPOINT_KINDS)}")
    return kind


def parse_duration_s(value: Any) -> float:
    """Seconds from ``3600``, ``90s``, ``30m``, ``2h``, ``1d`` (ValueError otherwise)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).strip())
        if not match:
            raise ValueError(f"not a duration: {value!r}")
        seconds = float(match.group(1)) * _UNIT_S[(match.group(2) or "").lower() or None]
    if not seconds > 0:
        raise ValueError(f"duration must be positive: {value!r}")
    return seconds


def parse_size_gb(value: Any) -> float:
    """GB from ``40``, ``40G``, ``1.5T``, ``512MiB`` (ValueError otherwise)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        size = float(value)
    else:
        match = _SIZE.match(str(value).strip())
        if not match:
            raise ValueError(f"not a size in GB: {value!r}")
        size = float(match.group(1)) * _UNIT_GB[(match.group(2) or "").lower() or None]
    if not size >= 0:
        raise ValueError(f"size must be non-negative: {value!r}")
    return size


_PARSERS = {"checkpoint_kind": parse_checkpoint_kind, "checkpoint_interval_s": parse_duration_s,
            "checkpoint_size_gb": parse_size_gb, "constraints": normalise_constraints,
            "data_class": lambda v: str(v).strip() or None}


def job_fields_from_pairs(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Canonical fields from ``(key, value)`` pairs; unknown keys and bad values are skipped (first wins)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        col = JOB_KEYS.get(str(key).strip().lower())
        if col is None or col in out or value is None:
            continue
        text = value.strip().strip("\"'") if isinstance(value, str) else value
        try:
            parsed = _PARSERS[col](text)
        except ValueError:
            continue
        if parsed is not None:
            out[col] = parsed
    return out


def job_fields_from_comment(text: Any) -> dict[str, Any]:
    """Fields written as ``key=value`` pairs in free text (a Slurm ``--comment``)."""
    if not isinstance(text, str) or "=" not in text:
        return {}
    return job_fields_from_pairs(_PAIR.findall(text))


def job_fields_from_kubernetes(maps: Iterable[Mapping[str, Any] | None], prefix: str = "predictor/") -> dict[str, Any]:
    """Fields from label/annotation maps (earlier maps win): ``predictor/<key>`` entries."""
    out: dict[str, Any] = {}
    for mapping in maps:
        if not mapping:
            continue
        pairs = [(k[len(prefix):], v) for k, v in mapping.items() if isinstance(k, str) and k.startswith(prefix)]
        for k, v in job_fields_from_pairs(pairs).items():
            out.setdefault(k, v)
    return out
