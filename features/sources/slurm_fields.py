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

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from features.constraints import combine_constraints, constraint_from_slurm_features
from features.job_conventions import job_fields_from_comment

__all__ = [
    "SLURM_STATES",
    "expand_hostlist",
    "format_slurm_duration",
    "gpu_type_from_gres",
    "normalise_slurm_state",
    "slurm_state",
    "parse_slurm_duration",
    "parse_tres",
    "slurm_job_fields",
    "tres_count",
    "tres_gpu_type",
    "tres_memory_mib",
]

#: Slurm job states (long and short forms) -> canonical STATES. Unlisted values pass through
#: upper-cased, so ``validate`` reports them as ``unknown state``.
SLURM_STATES: dict[str, str] = {
    "PENDING": "PENDING", "PD": "PENDING", "REQUEUED": "PENDING", "RQ": "PENDING",
    "REQUEUE_HOLD": "PENDING", "REQUEUE_FED": "PENDING", "RH": "PENDING", "RF": "PENDING",
    "RESV_DEL_HOLD": "PENDING", "RD": "PENDING",
    "RUNNING": "RUNNING", "R": "RUNNING", "SUSPENDED": "RUNNING", "S": "RUNNING",
    "CONFIGURING": "RUNNING", "CF": "RUNNING",
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
    keys = pa.array(list(SLURM_STATES), _STR)
    values = pa.array(list(SLURM_STATES.values()), _STR)
    mapped = pc.take(values, pc.index_in(text, value_set=keys))
    missing = pc.fill_null(pc.and_(pc.is_null(mapped), pc.not_equal(text, "")), False)
    if pc.any(missing).as_py():  # only the rare "CANCELLED by 0" / "CANCELLED+" forms need the regex
        word = pc.replace_substring_regex(text, pattern=r"^([A-Z_]+).*$", replacement=r"\1")
        word = pc.if_else(pc.equal(word, ""), pa.scalar(None, _STR), word)
        mapped = pc.coalesce(mapped, pc.take(values, pc.index_in(word, value_set=keys)), word)
    return pc.if_else(pc.fill_null(pc.equal(text, ""), True), pa.scalar(None, _STR), mapped)


def slurm_state(text: str | None) -> str | None:
    """One Slurm state (``squeue``'s or ``sacct``'s) as a canonical state, by the rule of
    :func:`normalise_slurm_state`: the first word counts, a trailing ``+`` or ``by <uid>`` is dropped,
    blank is None and an unknown word passes through upper-cased."""
    word = re.match(r"\s*([A-Za-z_]*)", str(text or "")).group(1).upper()  # type: ignore[union-attr]
    if not word:
        return None
    return SLURM_STATES.get(word, word)


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """Expand a Slurm host list: ``gpu[01-03,07],login1`` -> ``("gpu01", "gpu02", "gpu03", "gpu07", "login1")``.

    Handles one bracket group per name (what Slurm prints for flat node names); zero padding is kept;
    ``None`` / ``(null)`` / blank give no node.
    """
    text = str(text or "").strip()
    if text in ("", "(null)", "None", "None assigned"):
        return ()
    names: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", text):
        prefix, ranges, suffix = match.groups()
        if not ranges:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, sep, hi = part.partition("-")
            if not sep:
                names.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            names.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return tuple(names)


def gpu_type_from_gres(text: str | None) -> str | None:
    """The GPU model of a gres request (``gres:gpu:a100:8``, ``gpu:a100:2``, ``gres/gpu:a100=4``);
    None when untyped (``gres:gpu:2``)."""
    for part in str(text or "").split(","):
        fields = part.strip().replace("gres/", "gres:").replace("=", ":").split(":")
        if fields and fields[0] == "gres":
            fields = fields[1:]
        if len(fields) >= 3 and fields[0] == "gpu" and not fields[1].isdigit():
            return fields[1]
        if len(fields) == 2 and fields[0] == "gpu" and not fields[1].isdigit():
            return fields[1]
    return None


_DURATION_PATTERNS = (
    # [days-]hours:minutes:seconds, what sacct prints: tried first on every row
    (r"^(?:(?P<d>\d+)-)?(?P<h>\d+):(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)$", ("d", "h", "m", "s")),
    # days-hours[:minutes]
    (r"^(?P<d>\d+)-(?P<h>\d+)(?::(?P<m>\d+))?$", ("d", "h", "m")),
    # minutes:seconds
    (r"^(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)$", ("m", "s")),
    # minutes
    (r"^(?P<m>\d+)$", ("m",)),
)
_SCALE = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def _distinct(arr: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The distinct values of ``arr`` and, per row, the index of its value (nulls included).

    Limits, states and TRES strings repeat a lot; parsing each distinct value once is much cheaper.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    encoded = pc.dictionary_encode(arr, null_encoding="encode")
    return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False)


def parse_slurm_duration(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Slurm time spans to seconds (float64, NaN for none/unlimited).

    Returns
    -------
    seconds : ndarray of shape (n,)
    unparseable : ndarray of bool, shape (n,)
        Non-blank values that are neither a time span nor a no-limit word.
    """
    values, index = _distinct(arr)
    seconds, unparseable = _parse_durations(values)
    return seconds[index], unparseable[index]


def _parse_durations(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    text = pc.utf8_trim_whitespace(arr)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    n = len(text)
    total = np.full(n, np.nan)
    todo = np.arange(n)
    for pattern, groups in _DURATION_PATTERNS:
        if not todo.size:
            break
        subset = text if todo.size == n else text.take(todo)
        parts = pc.extract_regex(subset, pattern=pattern)
        hit = pc.fill_null(pc.is_valid(parts), False).to_numpy(zero_copy_only=False)
        if not hit.any():
            continue
        secs = np.zeros(len(subset))
        for g in groups:
            field = pc.struct_field(parts, g)
            field = pc.if_else(pc.equal(field, ""), pa.scalar(None, _STR), field)
            secs += np.nan_to_num(pc.cast(field, pa.float64()).to_numpy(zero_copy_only=False).astype("float64")) * _SCALE[g]
        total[todo[hit]] = secs[hit]
        todo = todo[~hit]
    blank = pc.fill_null(pc.equal(text, ""), True)
    skip = pc.or_(blank, pc.is_in(pc.utf8_upper(text), value_set=pa.array(_NO_LIMIT, _STR)))
    unparseable = np.zeros(n, dtype=bool)
    unparseable[todo] = ~pc.fill_null(skip, True).to_numpy(zero_copy_only=False)[todo]
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


@dataclass(frozen=True)
class Tres:
    """The TRES fields the readers use, one value per input row (NaN / None when absent).

    ``gpus`` is the untyped ``gres/gpu`` count, or the sum of the typed ``gres/gpu:<type>``
    entries when only those are listed; ``gpu_type`` is the first typed entry's model.
    """

    cpu: np.ndarray
    node: np.ndarray
    gpus: np.ndarray
    gpu_type: np.ndarray
    mem_mib: np.ndarray
    gpumem_mib: np.ndarray
    bad_memory: np.ndarray


def parse_tres(arr: pa.Array | pa.ChunkedArray, *, bare_unit: str) -> Tres:
    """Split TRES strings into ``key=value`` pairs (vectorised, each distinct string once) and pick
    the keys we use.

    ``bare_unit`` is the unit of a memory value without suffix: ``"M"`` (requests) or ``"B"`` (usage).
    """
    values, index = _distinct(arr)
    parsed = _parse_tres(values, bare_unit)
    return Tres(**{name: getattr(parsed, name)[index] for name in Tres.__dataclass_fields__})


def _parse_tres(arr: pa.Array, bare_unit: str) -> Tres:
    n = len(arr)
    pairs = pc.split_pattern(pc.fill_null(arr, ""), ",")
    parent = pc.list_parent_indices(pairs).to_numpy()
    kv = pc.split_pattern(pc.list_flatten(pairs), "=", max_splits=1)
    ok = pc.equal(pc.list_value_length(kv), 2)
    kv, parent = pc.filter(kv, ok), parent[ok.to_numpy(zero_copy_only=False)]
    keys, values = pc.list_element(kv, 0), pc.list_element(kv, 1)

    def pick(key: str) -> tuple[np.ndarray, pa.Array]:
        sel = pc.equal(keys, key)
        return parent[sel.to_numpy(zero_copy_only=False)], pc.filter(values, sel)

    def count(key: str) -> np.ndarray:
        rows, vals = pick(key)
        out = np.full(n, np.nan)
        numbers, _ = _numbers(vals)
        first = _first_per_row(rows)
        out[rows[first]] = numbers[first]
        return out

    typed = pc.starts_with(keys, "gres/gpu:").to_numpy(zero_copy_only=False)
    typed_rows = parent[typed]
    typed_counts, _ = _numbers(pc.filter(values, typed))
    typed_sum = np.full(n, np.nan)
    if typed_rows.size:
        sums = np.bincount(typed_rows, weights=np.nan_to_num(typed_counts), minlength=n)
        typed_sum[np.unique(typed_rows)] = sums[np.unique(typed_rows)]
    gpu_type = np.full(n, None, dtype=object)
    if typed_rows.size:
        names = pc.utf8_slice_codeunits(pc.filter(keys, typed), 9).to_numpy(zero_copy_only=False)
        first = _first_per_row(typed_rows)
        gpu_type[typed_rows[first]] = names[first]
    gpus = count("gres/gpu")
    gpus = np.where(np.isnan(gpus), typed_sum, gpus)
    mem, bad_mem = _memory(*pick("mem"), n, bare_unit)
    gpumem, bad_gpumem = _memory(*pick("gres/gpumem"), n, bare_unit)
    return Tres(cpu=count("cpu"), node=count("node"), gpus=gpus, gpu_type=gpu_type, mem_mib=mem,
                gpumem_mib=gpumem, bad_memory=bad_mem | bad_gpumem)


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Positions of the first entry of each row in ``rows`` (entries are in row order)."""
    if not rows.size:
        return np.zeros(0, dtype=int)
    return np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])


def _numbers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    ok = pc.match_substring_regex(values, r"^\d+(\.\d+)?$")
    clean = pc.if_else(ok, values, pa.scalar(None, pa.string()))
    return pc.cast(clean, pa.float64()).to_numpy(zero_copy_only=False).astype("float64"), ok


_UNIT_MIB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def _memory(rows: np.ndarray, values: pa.Array, n: int, bare_unit: str) -> tuple[np.ndarray, np.ndarray]:
    out, bad = np.full(n, np.nan), np.zeros(n, dtype=bool)
    if not rows.size:
        return out, bad
    parts = pc.extract_regex(values, pattern=r"^(?P<n>\d+(?:\.\d+)?)(?P<u>[KMGTP]?)$")
    number = pc.cast(pc.struct_field(parts, "n"), pa.float64()).to_numpy(zero_copy_only=False).astype("float64")
    unit = pc.fill_null(pc.struct_field(parts, "u"), "").to_numpy(zero_copy_only=False)
    factor = np.full(len(number), 1.0 if bare_unit == "M" else 1 / 1024**2)
    for suffix, mult in _UNIT_MIB.items():
        factor[unit == suffix] = mult
    first = _first_per_row(rows)
    out[rows[first]] = (number * factor)[first]
    bad[rows[first]] = np.isnan(number[first])
    return out, bad


def tres_count(arr: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """Numeric value of TRES ``key`` (``cpu``, ``node`` or ``gres/gpu``); NaN when absent."""
    tres = parse_tres(arr, bare_unit="M")
    return {"cpu": tres.cpu, "node": tres.node, "gres/gpu": tres.gpus}[key]


def tres_gpu_type(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """GPU model named in a TRES string (``gres/gpu:a100=4`` -> ``a100``); null when untyped."""
    return pa.array(parse_tres(arr, bare_unit="M").gpu_type, pa.string())


def tres_memory_mib(arr: pa.Array | pa.ChunkedArray, key: str, *, bare_unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Memory TRES ``key`` (``mem`` or ``gres/gpumem``) in MiB, with a flag for unparseable values."""
    tres = parse_tres(arr, bare_unit=bare_unit)
    return (tres.mem_mib if key == "mem" else tres.gpumem_mib), tres.bad_memory


def slurm_job_fields(constraints: list[Any], comments: list[Any]) -> tuple[list[dict[str, Any]], list[str | None]]:
    """Per job: residency and checkpoint fields (``features.job_conventions``) of its ``--constraint``
    feature expression (``sacct`` ``Constraints``, ``squeue`` ``features``) and its ``--comment``
    ``key=value`` pairs, the constraints of both combined; and a reject reason per job (None when
    fine) for a feature expression that does not parse. Each distinct pair is parsed once."""
    cache: dict[tuple[Any, Any], tuple[dict[str, Any], str | None]] = {}
    fields, reasons = [], []
    for expr, comment in zip(constraints, comments, strict=True):
        key = (expr if isinstance(expr, str) else None, comment if isinstance(comment, str) else None)
        hit = cache.get(key)
        if hit is None:
            found = job_fields_from_comment(key[1])
            reason = None
            try:
                features = constraint_from_slurm_features(key[0])
            except ValueError as exc:
                features, reason = None, f"unparseable Constraints: {exc}"
            text = combine_constraints(features, found.get("constraints"))
            if text is not None:
                found["constraints"] = text
            hit = cache[key] = (found, reason)
        fields.append(hit[0])
        reasons.append(hit[1])
    return fields, reasons
