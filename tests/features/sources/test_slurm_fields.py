import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from features.schema import STATES
from features.sources.slurm_fields import (
    SLURM_STATES,
    format_slurm_duration,
    normalise_slurm_state,
    parse_slurm_duration,
    tres_count,
    tres_gpu_type,
    tres_memory_mib,
)


def _seconds(text: str | None) -> float:
    values, bad = parse_slurm_duration(pa.array([text], pa.string()))
    assert not bad[0], f"{text!r} reported unparseable"
    return float(values[0])


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("03:04:05", 3 * 3600 + 4 * 60 + 5),
        ("04:05", 4 * 60 + 5),  # MM:SS
        ("90", 90 * 60),  # minutes
        ("1-02", 86400 + 2 * 3600),  # days-hours
        ("1-02:03", 86400 + 2 * 3600 + 3 * 60),  # days-hours:minutes
        ("00:00:01.500", 1.5),
        ("UNLIMITED", math.nan),
        ("INFINITE", math.nan),
        ("Partition_Limit", math.nan),
        ("", math.nan),
        (None, math.nan),
    ],
)
def test_slurm_durations(text, seconds):
    got = _seconds(text)
    assert (math.isnan(got) and math.isnan(seconds)) or got == seconds


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "-5", "1-", "12:xx"])
def test_garbage_durations_are_flagged_not_nulled(text):
    values, bad = parse_slurm_duration(pa.array([text]))
    assert bad[0] and np.isnan(values[0])


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_duration_format_parse_round_trip(seconds):
    text = format_slurm_duration(seconds)
    assert _seconds(text) == seconds
    assert ("-" in text) == (seconds >= 86400)


TRES = "billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1"


@pytest.mark.parametrize(
    "tres, key, expected",
    [
        (TRES, "cpu", 8.0),
        (TRES, "node", 1.0),
        (TRES, "gres/gpu", 4.0),
        ("cpu=2,gres/gpu:a100=2,gres/gpu:v100=2", "gres/gpu", 4.0),  # typed entries only: summed
        ("cpu=2,mem=4000M,node=1", "gres/gpu", math.nan),
        ("cpu=00:00:05,mem=1124K", "cpu", math.nan),  # usage strings are not counts
        (None, "cpu", math.nan),
    ],
)
def test_tres_counts(tres, key, expected):
    got = tres_count(pa.array([tres], pa.string()), key)[0]
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_tres_gpu_type():
    got = tres_gpu_type(pa.array([TRES, "cpu=1,gres/gpu=1", None], pa.string())).to_pylist()
    assert got == ["a100", None, None]


@pytest.mark.parametrize(
    "tres, bare, mib",
    [
        ("mem=64G", "M", 65536.0),
        ("mem=4000M", "M", 4000.0),
        ("mem=1.5T", "M", 1.5 * 1024 * 1024),
        ("mem=2048K", "M", 2.0),
        ("mem=12345", "M", 12345.0),  # requests: bare numbers are MiB
        ("gres/gpumem=1048576", "B", 1.0),  # usage: bare numbers are bytes
        ("cpu=1", "M", math.nan),
    ],
)
def test_tres_memory(tres, bare, mib):
    key = "gres/gpumem" if "gpumem" in tres else "mem"
    values, bad = tres_memory_mib(pa.array([tres]), key, bare_unit=bare)
    assert not bad[0]
    assert (math.isnan(values[0]) and math.isnan(mib)) or values[0] == pytest.approx(mib)


def test_tres_memory_with_unknown_unit_is_flagged():
    _, bad = tres_memory_mib(pa.array(["mem=64Q"]), "mem", bare_unit="M")
    assert bad[0]


@pytest.mark.parametrize(
    "native, canonical",
    [
        ("CANCELLED by 0", "CANCELLED"),
        ("CANCELLED by 12345", "CANCELLED"),
        ("CANCELLED+", "CANCELLED"),
        ("completed", "COMPLETED"),
        ("CD", "COMPLETED"),
        ("BOOT_FAIL", "NODE_FAIL"),
        ("DEADLINE", "TIMEOUT"),
        ("REQUEUED", "PENDING"),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("WEIRD", "WEIRD"),  # passes through so validate reports "unknown state"
        ("", None),
    ],
)
def test_state_mapping(native, canonical):
    assert normalise_slurm_state(pa.array([native])).to_pylist() == [canonical]


def test_every_mapped_state_is_canonical():
    assert set(SLURM_STATES.values()) <= set(STATES)
