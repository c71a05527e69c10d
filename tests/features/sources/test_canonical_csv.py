"""``csv`` reader (canonical CSV/Parquet): exact round trips and every schema reject reason reached
through a real file."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from features.errors import InputError
from features.schema import FINETUNE_METHODS, PLACEMENT_CLASSES, PRECISIONS, STATES, conform, validate
from features.sources import read_chunks

from .conftest import ingest_into

text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp", "Zs")) | st.just(" "), max_size=12)
maybe_text = st.one_of(st.none(), text.map(str.strip).filter(bool))
number = st.one_of(st.none(), st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False))
epoch = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)


@st.composite
def canonical_rows(draw) -> dict:
    submit = draw(epoch)
    start = draw(st.one_of(st.none(), st.floats(0, 1e6).map(lambda d: submit + d)))
    end = draw(st.one_of(st.none(), st.floats(0, 1e6).map(lambda d: (start or submit) + d)))
    return {
        "user": draw(maybe_text), "team": draw(maybe_text), "queue": draw(maybe_text), "tier": draw(maybe_text),
        "job_name": draw(maybe_text), "gpu_type": draw(maybe_text), "optimizer": draw(maybe_text),
        "num_gpus": draw(number), "cpus": draw(number), "mem_mib": draw(number), "peak_vram_mib": draw(number),
        "gpu_milli": draw(st.one_of(st.none(), st.integers(1, 1000).map(float))),
        "time_limit_s": draw(st.one_of(st.none(), st.floats(1, 1e7))),
        "model_params": draw(number), "batch_size": draw(number), "seq_len": draw(number),
        "precision": draw(st.one_of(st.none(), st.sampled_from(PRECISIONS))),
        "finetune_method": draw(st.one_of(st.none(), st.sampled_from(FINETUNE_METHODS))),
        "placement_class": draw(st.one_of(st.none(), st.sampled_from(PLACEMENT_CLASSES))),
        "submit_ts": submit, "start_ts": start, "end_ts": end,
        "state": draw(st.sampled_from(STATES)),
        "source": draw(st.sampled_from(["sacct", "synth", None])),
    }


def _canonical(rows: list[dict]) -> pd.DataFrame:
    for i, row in enumerate(rows):
        row["job_id"] = f"job-{i}"
    jobs = validate(pd.DataFrame(rows), log_end_ts=5e9).jobs
    jobs["source"] = jobs["source"].fillna("csv")  # the reader names itself where the table did not
    return jobs.sort_values("job_id").reset_index(drop=True)


def _read_back(path) -> pd.DataFrame:
    """The csv reader then validate, as ingest runs them (the pipeline itself is tested in test_ingest)."""
    raw = pd.concat(list(read_chunks("csv", [path])), ignore_index=True)
    assert raw.pop("reader_reject_reason").isna().all()
    result = validate(raw, log_end_ts=5e9)
    assert result.rejects.empty
    return result.jobs.sort_values("job_id").reset_index(drop=True)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(canonical_rows(), min_size=1, max_size=8))
def test_csv_round_trip_is_exact(tmp_path, rows):
    table = _canonical(rows)
    assume(not table.empty)  # every drawn row may be invalid: nothing to round-trip then
    path = tmp_path / "jobs.csv"
    table.to_csv(path, index=False)
    pd.testing.assert_frame_equal(_read_back(path), table)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(canonical_rows(), min_size=1, max_size=8))
def test_parquet_round_trip_is_exact(tmp_path, rows):
    table = _canonical(rows)
    assume(not table.empty)  # every drawn row may be invalid: nothing to round-trip then
    path = tmp_path / "jobs.parquet"
    table.to_parquet(path, index=False)
    pd.testing.assert_frame_equal(_read_back(path), table)


def _row(**kw) -> dict:
    base = {"job_id": "bad", "user": "u", "submit_ts": "100", "start_ts": "110", "end_ts": "200", "state": "COMPLETED"}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    "override, reason",
    [
        ({"job_id": ""}, "missing job_id"),
        ({"submit_ts": ""}, "missing or unparseable submit time"),
        ({"submit_ts": "yesterday"}, "unparseable submit_ts"),
        ({"state": "WEIRD"}, "unknown state"),
        ({"state": ""}, "missing state"),
        ({"num_gpus": "-1"}, "negative num_gpus"),
        ({"num_nodes": "-2"}, "negative num_nodes"),
        ({"cpus": "-4"}, "negative cpus"),
        ({"mem_mib": "-1"}, "negative mem_mib"),
        ({"batch_size": "-8"}, "negative batch_size"),
        ({"seq_len": "-1"}, "negative seq_len"),
        ({"model_params": "-7e9"}, "negative model_params"),
        ({"num_gpus": "four"}, "unparseable num_gpus"),
        ({"time_limit_s": "0"}, "non-positive time_limit_s"),
        ({"gpu_milli": "1500"}, "gpu_milli outside 1..1000"),
        ({"start_ts": "50"}, "start before submit"),
        ({"end_ts": "105"}, "end before start"),
        ({"start_ts": ""}, "completed without a start time"),
        ({"duration_s": "-3"}, "negative duration_s"),
        ({"peak_vram_mib": "-1"}, "negative peak_vram_mib"),
        ({"placement_class": "moon"}, "unknown placement_class"),
        ({"finetune_method": "adapters"}, "unknown finetune_method"),
        ({"precision": "fp64x"}, "unknown precision"),
        ({"censored": "maybe"}, "unparseable censored"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_every_reject_reason_from_a_file(tmp_path, override, reason):
    rows = [_row(job_id="ok"), _row(**override)]
    path = tmp_path / "jobs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    got = ingest_into(tmp_path, "csv", [path])
    assert list(got.jobs["job_id"]) == ["ok"]
    assert list(got.rejects["reject_reason"]) == [reason]


def test_duplicate_ids_across_files_are_rejected(tmp_path):
    for name in ("a.csv", "b.csv"):
        pd.DataFrame([_row(job_id="same")]).to_csv(tmp_path / name, index=False)
    got = ingest_into(tmp_path, "csv", [tmp_path / "a.csv", tmp_path / "b.csv"])
    assert len(got.jobs) == 1 and list(got.rejects["reject_reason"]) == ["duplicate job_id"]


def test_iso_dates_and_text_values(tmp_path):
    path = tmp_path / "jobs.csv"
    pd.DataFrame([_row(job_id="x", submit_ts="2024-05-01T10:00:00Z", start_ts="2024-05-01T10:00:10",
                       end_ts="1714557700", user="NA", censored="false")]).to_csv(path, index=False)
    row = ingest_into(tmp_path, "csv", [path]).job("x")
    assert row["submit_ts"] == 1714557600 and row["start_ts"] == 1714557610  # no offset: UTC
    assert row["user"] == "NA"  # only an empty field is null


def test_extra_columns_kept(tmp_path):
    frame = pd.DataFrame([_row(job_id="x", submit_ts=100.0, start_ts=110.0, end_ts=200.0)])
    frame["gpu_util"] = [87]
    frame.to_parquet(tmp_path / "jobs.parquet", index=False)
    frame.to_csv(tmp_path / "jobs.csv", index=False)
    from_parquet = ingest_into(tmp_path, "csv", [tmp_path / "jobs.parquet"]).job("x")
    from_csv = ingest_into(tmp_path, "csv", [tmp_path / "jobs.csv"]).job("x")
    assert from_parquet["gpu_util"] == 87 and from_csv["gpu_util"] == "87"  # CSV has no types: kept as text


def test_missing_required_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("job_id,user\n1,u\n")
    with pytest.raises(InputError, match=r"missing column\(s\) submit_ts, state"):
        list(read_chunks("csv", [path]))


def test_conform_keeps_canonical_order():
    assert list(conform(pd.DataFrame([_row()])).columns[:3]) == ["job_id", "user", "team"]
