"""Slurm field formats shared by the ``sacct`` and ``helios`` readers: time spans, TRES strings and
job states. All functions are vectorised over pyarrow string arrays.

Time spans (``Elapsed``, ``Timelimit``) follow Slurm's accepted forms: ``minutes``,
``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes`` and
``days-hours:minutes:seconds``, optionally with fractional seconds. ``UNLIMITED``, ``INFINITE``,
``Partition_Limit`` and ``NONE`` mean there is no limit of the job's own: null.

TRES strings look like ``billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1``. Memory
values carry Slurm's binary units (K, M, G, T, P = powers of 1024); a bare number is taken in the
unit the field uses by default (MiB for requests, bytes for usage).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "SLURM_STATES",
    "format_slurm_duration",
    "normalise_slurm_state",
    "parse_slurm_duration",
    "tres_count",
    "tres_gpu_type",
    "tres_memory_mib",
]

#: Slurm job states (long and short forms) -> canonical STATES. Unlisted values pass through
#: upper-cased, so ``validate`` reports them as ``unknown state``.
SLURM_STATES: dict[str, str] = {
    "PENDING": "PENDING", "PD": "PENDING", "REQUEUED": "PENDING", "RQ": "PENDING",
    "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "RH": "PENDING", "RF": "PENDING",
    "RUNNING": "RUNNING", "R": "RUNNING", "SUSPENDED": "RUNNING", "S": "RUNNING",
    "STOPPED": "RUNNING", "ST": "RUNNING", "RESIZING": "RUNNING", "RS": "RUNNING",
    "COMPLETING": "RUNNING", "CG": "RUNNING", "SIGNALING": "RUNNING", "SO": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "COMPLETED": "COMPLETED", "CD": "COMPLETED",
    "FAILED": "FAILED", "F": "FAILED", "SPECIAL_EXIT": "FAILED", "SE": "FAILED",
    "CANCELLED": "CANCELLED", "CA": "CANCELLED", "REVOKED": "CANCELLED", "RV": "CANCELLED",
    "TIMEOUT": "TIMEOUT", "TO": "TIMEOUT", "DEADLINE": "TIMEOUT", "DL": "TIMEOUT",
    "OUT_OF_MEMORY": "OUT_OF_MEMORY", "OOM": "OUT_OF_MEMORY",
    "NODE_FAIL": "NODE_FAIL", "NF": "NODE_FAIL", "BOOT_FAIL": "NODE_FAIL", "BF": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED", "PR": "PREEMPTED",
}

_NO_LIMIT = ["UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE", "INVALID", "UNKNOWN"]
_STR = pa.string()


def normalise_slurm_state(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Map Slurm states (``CANCELLED by 0``, ``CANCELLED+``, ``CD``) onto canonical states.

    The first word is the state; a trailing ``+`` (sacct's truncation mark) and ``by <uid>`` are
    dropped. Blank stays null; unknown words pass through upper-cased.
    """
    text = pc.utf8_upper(pc.utf8_trim_whitespace(arr))
    word = pc.replace_substring_regex(text, pattern=r"^([A-Z_]+).*$", replacement=r"\1")
    word = pc.if_else(pc.equal(word, ""), pa.scalar(None, _STR), word)
    keys = pa.array(list(SLURM_STATES), _STR)
    values = pa.array(list(SLURM_STATES.values()), _STR)
    idx = pc.index_in(word, value_set=keys)
    mapped = pc.take(values, idx)
    return pc.coalesce(mapped, word)


def parse_slurm_duration(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Slurm time spans to seconds (float64, NaN for none/unlimited).

    Returns
    -------
    seconds : ndarray of shape (n,)
    unparseable : ndarray of bool, shape (n,)
        Non-blank values that are neither a time span nor a no-limit word.
    """
    text = pc.utf8_trim_whitespace(arr)
    blank = pc.fill_null(pc.equal(text, ""), True)
    no_limit = pc.is_in(pc.utf8_upper(text), value_set=pa.array(_NO_LIMIT, _STR))
    n = len(text)
    total = np.full(n, np.nan)
    matched = np.zeros(n, dtype=bool)
    patterns = (
        # days-hours[:minutes[:seconds]]
        (r"^(?P<d>\d+)-(?P<h>\d+)(?::(?P<m>\d+)(?::(?P<s>\d+(?:\.\d+)?))?)?$", ("d", "h", "m", "s")),
        # [hours:]minutes:seconds
        (r"^(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)$", ("h", "m", "s")),
        # minutes
        (r"^(?P<m>\d+)$", ("m",)),
    )
    scale = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
    for pattern, groups in patterns:
        parts = pc.extract_regex(text, pattern=pattern)
        hit = pc.fill_null(pc.is_valid(parts), False).to_numpy(zero_copy_only=False) & ~matched
        if not hit.any():
            continue
        secs = np.zeros(n)
        for g in groups:
            field = pc.struct_field(parts, g)
            field = pc.if_else(pc.equal(field, ""), pa.scalar(None, _STR), field)
            vals = pc.cast(field, pa.float64()).to_numpy(zero_copy_only=False)
            secs += np.nan_to_num(vals.astype("float64"), nan=0.0) * scale[g]
        total[hit] = secs[hit]
        matched |= hit
    skip = pc.fill_null(pc.or_(blank, no_limit), True).to_numpy(zero_copy_only=False)
    unparseable = ~matched & ~skip
    return total, unparseable


def format_slurm_duration(seconds: float) -> str:
    """Format whole seconds the way sacct prints them: ``[D-]HH:MM:SS``."""
    secs = int(round(seconds))
    if secs < 0:
        raise ValueError(f"negative duration {seconds!r}")
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, sec = divmod(rest, 60)
    hms = f"{hours:02d}:{minutes:02d}:{sec:02d}"
    return f"{days}-{hms}" if days else hms


def _tres_field(arr: pa.Array | pa.ChunkedArray, key_regex: str) -> pa.Array:
    """The raw value of the first ``key=value`` pair whose key matches ``key_regex`` (else null)."""
    parts = pc.extract_regex(arr, pattern=rf"(?:^|,){key_regex}=(?P<v>[^,]*)")
    return pc.struct_field(parts, "v")


def tres_count(arr: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """Numeric value of TRES ``key`` (e.g. ``cpu``, ``node``, ``gres/gpu``); NaN when absent.

    For ``gres/gpu`` the untyped total is used; when only typed entries exist
    (``gres/gpu:a100=2,gres/gpu:v100=2``) their sum is returned.
    """
    parts = pc.extract_regex(arr, pattern=rf"(?:^|,){_escape(key)}=(?P<v>\d+(?:\.\d+)?)(?:,|$)")
    values = pc.cast(pc.struct_field(parts, "v"), pa.float64()).to_numpy(zero_copy_only=False).astype("float64")
    if key == "gres/gpu":
        typed = _typed_gpu_sum(arr)
        values = np.where(np.isnan(values), typed, values)
    return values


def _typed_gpu_sum(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Sum of ``gres/gpu:<type>=N`` entries (NaN when there are none)."""
    total = np.full(len(arr), np.nan)
    rest = arr
    for _ in range(4):  # a job rarely asks for more than a couple of GPU types
        parts = pc.extract_regex(rest, pattern=r"(?:^|,)gres/gpu:[^=,]+=(?P<v>\d+)(?P<tail>.*)$")
        v = pc.cast(pc.struct_field(parts, "v"), pa.float64()).to_numpy(zero_copy_only=False).astype("float64")
        hit = ~np.isnan(v)
        if not hit.any():
            break
        total = np.where(hit, np.nan_to_num(total) + v, total)
        rest = pc.struct_field(parts, "tail")
    return total


def tres_gpu_type(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """GPU model named in a TRES string (``gres/gpu:a100=4`` -> ``a100``); null when untyped."""
    parts = pc.extract_regex(arr, pattern=r"(?:^|,)gres/gpu:(?P<t>[^=,]+)=")
    return pc.struct_field(parts, "t")


_UNIT_MIB = {"": None, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def tres_memory_mib(arr: pa.Array | pa.ChunkedArray, key: str, *, bare_unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Memory TRES ``key`` (``mem``, ``gres/gpumem``) in MiB.

    ``bare_unit`` is the unit of a number without suffix: ``"M"`` for requests (Slurm's default),
    ``"B"`` (bytes) for usage. Returns ``(mib, unparseable)``.
    """
    raw = _tres_field(arr, _escape(key))
    parts = pc.extract_regex(raw, pattern=r"^(?P<n>\d+(?:\.\d+)?)(?P<u>[KMGTP]?)$")
    number = pc.cast(pc.struct_field(parts, "n"), pa.float64()).to_numpy(zero_copy_only=False).astype("float64")
    unit = pc.fill_null(pc.struct_field(parts, "u"), "").to_numpy(zero_copy_only=False)
    factor = np.ones(len(number))
    for suffix, mult in _UNIT_MIB.items():
        sel = unit == suffix
        if not sel.any():
            continue
        if suffix == "":
            mult = 1.0 if bare_unit == "M" else 1 / 1024**2
        factor[sel] = mult
    unparseable = pc.fill_null(pc.and_(pc.is_valid(raw), pc.invert(pc.is_valid(parts))), False)
    return number * factor, unparseable.to_numpy(zero_copy_only=False)


def _escape(key: str) -> str:
    return key.replace(".", r"\.")
