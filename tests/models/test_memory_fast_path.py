"""The analytic memory fast paths give exactly what the vectorised path gave before them.

``tests/models/reference_memory_analytic.py`` is a frozen copy of that path. Compared with it, on
synthetic jobs, the measured tables' rows and random combinations of every descriptor (known,
missing, unparseable, zero, negative, infinite): the row-by-row path (``models.memory_scalar``, up to
``SCALAR_ROWS`` jobs), the cheaper vectorised path (above), and ``resolve_jobs`` (which
``models.memory_fitting`` reads) -- same arrays, same dtypes, NaN at the same places.
"""

from __future__ import annotations

import warnings
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.job_keys import JobColumns
from models import memory_analytic as ma
from models import memory_scalar
from models.memory_calibration import MemoryCalibration, shipped_calibration
from models.memory_scalar import scalar_memory
from tests.models import reference_memory_analytic as ref
from tests.models.memory_rows import POOLS, measured_rows, random_rows, synthetic_rows

CALIBRATIONS = {
    "shipped": shipped_calibration(),
    "prior": MemoryCalibration(),
    "odd": MemoryCalibration(activation_bytes=20, checkpoint_bytes=3, logit_bytes=6, allocator=1, logit_reserve=0,
                             context_mib=0, image_sample_mib=15, upper_margins=(0.0, 1.5, 0.25), upper_states_share=0.9),
}
TABLES = {"default": None, "small": {"V100": 16_384, "T4": 15_360.5}, "empty": {}}


def assert_same_array(new: np.ndarray, old: np.ndarray, what: str) -> None:
    assert isinstance(new, np.ndarray) and new.dtype == old.dtype and new.shape == old.shape, (
        what, type(new), getattr(new, "dtype", None), old.dtype)
    if old.dtype == object:
        assert new.tolist() == old.tolist(), what
        return
    if old.dtype.kind != "f":
        np.testing.assert_array_equal(new, old, err_msg=what)
        return
    nan = np.isnan(old)
    np.testing.assert_array_equal(np.isnan(new), nan, err_msg=what)
    np.testing.assert_array_equal(new[~nan], old[~nan], err_msg=what)
    np.testing.assert_array_equal(np.signbit(new[~nan]), np.signbit(old[~nan]), err_msg=what)


def assert_same_parts(new: ma.MemoryParts, old: ma.MemoryParts) -> None:
    assert isinstance(new, ma.MemoryParts) and list(new) == list(old)
    for key in old:
        assert_same_array(new[key], old[key], key)


def reference(jobs, table=None, cal=None) -> ma.MemoryParts:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ref.analytic_memory(jobs, table, calibration=cal)


def new(jobs, table=None, cal=None) -> ma.MemoryParts:  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ma.analytic_memory(jobs, table, calibration=cal)


@pytest.fixture(scope="module")
def varied() -> pd.DataFrame:
    """About 2,000 rows: random combinations, synthetic jobs and (where present) the measured tables."""
    frames = [random_rows(900, seed=5), synthetic_rows(400, seed=8)[list(POOLS)]]
    measured = measured_rows()
    if measured is not None:
        frames.append(measured[list(POOLS)])
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("cal", list(CALIBRATIONS), ids=str)
@pytest.mark.parametrize("table", list(TABLES), ids=str)
def test_one_row_equals_the_reference(varied: pd.DataFrame, cal: str, table: str) -> None:
    rows = varied if (cal, table) == ("shipped", "default") else varied.iloc[::5]
    for i in range(len(rows)):
        row = rows.iloc[i:i + 1]
        assert_same_parts(new(row, TABLES[table], CALIBRATIONS[cal]), reference(row, TABLES[table], CALIBRATIONS[cal]))


@pytest.mark.parametrize("size", [1, 2, 7, ma.SCALAR_ROWS, ma.SCALAR_ROWS + 1, 100, 1000])
@pytest.mark.parametrize("view", ["frame", "columns"])
def test_batches_equal_the_reference(varied: pd.DataFrame, size: int, view: str) -> None:
    shuffled = varied.sample(frac=1.0, random_state=size).reset_index(drop=True)
    for start in range(0, min(len(shuffled), 3 * size), size):
        batch = shuffled.iloc[start:start + size]
        jobs = JobColumns(batch) if view == "columns" else batch
        assert_same_parts(new(jobs), reference(batch))


@pytest.mark.parametrize("cal", list(CALIBRATIONS), ids=str)
def test_both_paths_at_any_size(varied: pd.DataFrame, cal: str) -> None:
    """The row-by-row path on the whole table and the vectorised path on single rows, as well."""
    c = CALIBRATIONS[cal]
    old = reference(varied, None, c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_same_parts(scalar_memory(varied, None, c), old)
        assert_same_parts(ma.parts_from(ma.resolve_jobs(varied, calibration=c), c), old)
        for i in range(0, len(varied), 97):
            row = varied.iloc[i:i + 1]
            assert_same_parts(ma.parts_from(ma.resolve_jobs(row, calibration=c), c), reference(row, None, c))


@pytest.mark.parametrize("cal", list(CALIBRATIONS), ids=str)
def test_resolved_jobs_equal_the_reference(varied: pd.DataFrame, cal: str) -> None:
    """What ``models.memory_fitting`` reads: both scenarios, field by field, and their terms."""
    c = CALIBRATIONS[cal]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        old, now = ref.resolve_jobs(varied, calibration=c), ma.resolve_jobs(varied, calibration=c)
        for which in ("point", "upper"):
            for f in fields(old.point):
                assert_same_array(getattr(getattr(now, which), f.name), getattr(getattr(old, which), f.name),
                                  f"{which}.{f.name}")
            old_terms, new_terms = old.terms(which, c), now.terms(which, c)
            for key in old_terms:
                assert_same_array(new_terms[key], old_terms[key], f"{which} {key}")
    for name in ("params", "method", "num_gpus", "assumed", "cap_mib"):
        assert_same_array(getattr(now, name), getattr(old, name), name)


def test_no_rows() -> None:
    empty = random_rows(0, seed=1)
    assert_same_parts(new(empty), reference(empty))
    assert_same_parts(scalar_memory(empty, None, shipped_calibration()), reference(empty))
    assert_same_parts(new(pd.DataFrame(index=range(3))), reference(pd.DataFrame(index=range(3))))


def test_the_dispatch_takes_the_row_by_row_path_for_few_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    assert ma._ROW_PATH == [memory_scalar.scalar_memory]  # registered by importing models.memory_scalar
    monkeypatch.setattr(ma, "_ROW_PATH", [lambda *a: seen.append(len(a[0])) or scalar_memory(*a)])
    for n in (1, ma.SCALAR_ROWS, ma.SCALAR_ROWS + 1, 0):
        new(random_rows(n, seed=2))
    assert seen == [1, ma.SCALAR_ROWS]


def _column(name: str, pool: list) -> st.SearchStrategy:
    if isinstance(pool[1], float):
        return st.one_of(st.sampled_from(pool), st.floats(allow_nan=True, allow_infinity=True),
                         st.floats(min_value=1.0, max_value=1e12))
    return st.one_of(st.sampled_from(pool), st.text(max_size=6))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({name: _column(name, pool) for name, pool in POOLS.items()}),
       st.sampled_from(list(CALIBRATIONS)))
def test_any_row_equals_the_reference(row: dict, cal: str) -> None:
    frame = pd.DataFrame({k: pd.Series([v], dtype=float if isinstance(POOLS[k][1], float) else object)
                          for k, v in row.items()})
    assert_same_parts(new(frame, None, CALIBRATIONS[cal]), reference(frame, None, CALIBRATIONS[cal]))
