"""Keys that group a job with its past: user, team, job family, request signature; column helpers.

Job family (a recurring job): the same user and the same job name once digit runs are removed
(dates are digit runs and separators; an ISO ``20240501T1200`` counts as one run), lower-cased
(ASCII), separators collapsed to ``-`` and trimmed (``train-llama-2024-05-01-run3`` ->
``train-llama-run``). A name with no letter left (SWF executable ids such as ``1234``) is kept whole,
since stripping it would merge unrelated programs. The generator's ground-truth ``family`` column is
deliberately *not* used: requests scored by the service never carry it, and a key that exists at
training time but not at serving time would make the features differ between the two.

Request signature: the same user asking for the same time limit, GPUs and CPUs; how a resubmitted
script shows up in logs without job names.

Large tables go through vectorised Arrow string kernels; small batches (serving) through a cached
Python function. Both use ASCII-only character classes so they agree on every input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["JobColumns", "object_column", "numeric_column", "strip_name", "family_keys", "request_keys", "SMALL_BATCH"]

#: Up to this many rows, keys are built with plain Python (lower per-call overhead).
SMALL_BATCH = 256

# Digit runs (an ISO ``20240501T1200`` counts as one); what is left of a date is separators.
_DIGITS = r"[0-9]+([tT][0-9]+)?"
_SEPARATORS = r"[-_./: ]+"
_LETTER = r"[A-Za-z]"
_RE = [re.compile(p) for p in (_DIGITS, _SEPARATORS, _LETTER)]
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class JobColumns:
    """A read-only view of a job table that converts each column to numpy once.

    Scoring reads the same columns in several places (features, memory, topology); wrapping the
    request's DataFrame in a ``JobColumns`` makes ``object_column`` / ``numeric_column`` cached
    lookups instead of repeated pandas conversions.
    """

    __slots__ = ("frame", "columns", "_obj", "_num", "_derived")

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self.columns = frame.columns
        self._obj: dict[str, np.ndarray] = {}
        self._num: dict[str, np.ndarray] = {}
        self._derived: dict[str, np.ndarray] = {}

    def derived(self, name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """A derived per-job array (e.g. family keys), computed once."""
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    def __len__(self) -> int:
        return len(self.frame)

    def obj(self, col: str) -> np.ndarray:
        if col not in self._obj:
            self._obj[col] = object_column(self.frame, col)
        return self._obj[col]

    def num(self, col: str) -> np.ndarray:
        if col not in self._num:
            self._num[col] = numeric_column(self.frame, col)
        return self._num[col]


def object_column(jobs: pd.DataFrame | JobColumns, col: str) -> np.ndarray:
    """A column as an object array with ``None`` for null (all None when the table lacks it)."""
    if isinstance(jobs, JobColumns):
        return jobs.obj(col)
    if col not in jobs.columns:
        return np.full(len(jobs), None, dtype=object)
    values = jobs[col].to_numpy(dtype=object, na_value=None)
    if values.dtype != object:
        values = values.astype(object)
    return values


def numeric_column(jobs: pd.DataFrame | JobColumns, col: str) -> np.ndarray:
    """A numeric column as float64 (NaN where absent, null or unparseable)."""
    if isinstance(jobs, JobColumns):
        return jobs.num(col)
    if col not in jobs.columns:
        return np.full(len(jobs), np.nan)
    s = jobs[col]
    if s.dtype == np.float64:
        return s.to_numpy()
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


@lru_cache(maxsize=65536)
def strip_name(name: str) -> str:
    """A job name without dates and digit runs (see the module docstring)."""
    digits, seps, letter = _RE
    s = seps.sub("-", digits.sub("", name.translate(_ASCII_LOWER))).strip("-")
    return s if letter.search(s) else name


def _strip_names_arrow(names: pa.Array) -> pa.Array:
    s = pc.replace_substring_regex(pc.ascii_lower(names), _DIGITS, "")
    s = pc.utf8_trim(pc.replace_substring_regex(s, _SEPARATORS, "-"), "-")
    return pc.if_else(pc.match_substring_regex(s, _LETTER), s, names)


def family_keys(jobs: pd.DataFrame | JobColumns, users: np.ndarray | None = None) -> np.ndarray:
    """``user/stripped-name`` per job (None without a job name), object array of shape (n_jobs,).

    ``users`` may pass ``object_column(jobs, "user")`` when the caller already has it.
    """
    if isinstance(jobs, JobColumns):  # once per view, its columns read through it (not from the frame)
        return jobs.derived("family", lambda: _family_keys(jobs, jobs.obj("user")))
    return _family_keys(jobs, object_column(jobs, "user") if users is None else users)


def _family_keys(jobs: pd.DataFrame | JobColumns, users: np.ndarray) -> np.ndarray:
    names = object_column(jobs, "job_name")
    if len(jobs) <= SMALL_BATCH:
        return np.array(
            [None if not isinstance(nm, str) else f"{u if isinstance(u, str) else '?'}/{strip_name(nm)}"
             for u, nm in zip(users, names, strict=True)],
            dtype=object,
        )
    name_arr = pa.array(names, type=pa.string())
    user_arr = pc.fill_null(pa.array(users, type=pa.string()), "?")
    keys = pc.binary_join_element_wise(user_arr, _strip_names_arrow(name_arr), "/")
    return np.asarray(keys.to_numpy(zero_copy_only=False), dtype=object)


def _request_key(user: object, limit: float, gpus: float, cpus: float) -> str | None:
    if not isinstance(user, str):
        return None
    return f"{user}|{limit:g}|{gpus:g}|{cpus:g}"


def request_keys(jobs: pd.DataFrame | JobColumns, users: np.ndarray | None = None) -> np.ndarray:
    """``user|time_limit|gpus|cpus`` per job (None without a user), object array of shape (n_jobs,)."""
    if isinstance(jobs, JobColumns):  # once per view, its columns read through it (not from the frame)
        return jobs.derived("request", lambda: _request_keys(jobs, jobs.obj("user")))
    return _request_keys(jobs, object_column(jobs, "user") if users is None else users)


def _request_keys(jobs: pd.DataFrame | JobColumns, users: np.ndarray) -> np.ndarray:
    cols = [numeric_column(jobs, c) for c in ("time_limit_s", "num_gpus", "cpus")]
    if len(jobs) <= SMALL_BATCH:
        return np.array([_request_key(*row) for row in zip(users, *cols, strict=True)], dtype=object)
    # one integer per distinct (user, limit, gpus, cpus), then format each distinct key once
    combined = np.zeros(len(jobs), dtype=np.int64)
    firsts = []
    for values in (users, *cols):
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        combined = combined * np.int64(len(uniques) + 1) + codes
        combined = pd.factorize(combined)[0].astype(np.int64)  # keep the radix product small
    codes, _ = pd.factorize(combined)
    firsts = np.unique(codes, return_index=True)[1]
    labels = np.array([_request_key(users[i], cols[0][i], cols[1][i], cols[2][i]) for i in firsts], dtype=object)
    return labels[codes]
