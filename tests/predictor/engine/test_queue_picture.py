from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.schema import COLUMNS, FLOAT_COLUMNS, STRING_COLUMNS, conform
from models.prediction import PREDICTION_COLUMNS, Prediction
from predictor.capacity.inventory import homogeneous_inventory
from predictor.capacity.layout import ClusterLayout
from predictor.engine.engine import prediction_columns, predictions_from_columns
from predictor.engine.queue_picture import (
    QueuePicture,
    canonical_columns,
    canonical_frame,
    columns_from_lists,
    frame_of,
)
from predictor.policy.intake import Vocabulary
from predictor.policy.intake import pending_jobs as pending_arrays

texts = st.one_of(st.none(), st.just(""), st.just("  "), st.text(min_size=1, max_size=8))
numbers = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=False), st.integers(-5, 10**6))
record = st.fixed_dictionaries(
    {"job_id": st.text(min_size=1, max_size=6)},
    optional={**{c: texts for c in STRING_COLUMNS if c != "job_id"}, **{c: numbers for c in FLOAT_COLUMNS},
              "censored": st.booleans()},
)


@settings(max_examples=60, deadline=None)
@given(st.lists(record, min_size=1, max_size=5))
def test_canonical_frame_holds_what_conform_holds(records: list[dict]) -> None:
    fast = canonical_frame(records)
    slow = conform(pd.DataFrame.from_records(records))
    assert list(fast.columns) == list(COLUMNS)
    for col in COLUMNS:
        a = fast[col].to_numpy(dtype=object, na_value=None)
        b = slow[col].to_numpy(dtype=object, na_value=None)
        if col in FLOAT_COLUMNS:
            a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
            np.testing.assert_array_equal(a, b, err_msg=col)
        else:
            assert a.tolist() == b.tolist(), col


@settings(max_examples=40, deadline=None)
@given(st.lists(record, min_size=0, max_size=6))
def test_the_frame_from_blocks_is_the_frame_from_arrays(records: list[dict]) -> None:
    """``frame_of`` builds the table from ``canonical_columns``' three blocks when the columns are still
    theirs, and from the arrays one by one otherwise: the same table either way."""
    columns = canonical_columns(records)
    by_arrays = pd.DataFrame._from_arrays([columns[c] for c in COLUMNS], columns=pd.Index(COLUMNS),
                                          index=pd.RangeIndex(len(records)), verify_integrity=False)
    fast = frame_of(columns)
    pd.testing.assert_frame_equal(fast, by_arrays)
    assert fast._mgr.nblocks == 3  # the blocks themselves, not one per column
    changed = {**columns, "num_gpus": columns["num_gpus"] + 1.0}  # a column no longer in its block
    pd.testing.assert_frame_equal(frame_of(changed), by_arrays.assign(num_gpus=by_arrays["num_gpus"] + 1.0))
    columns["num_gpus"] = columns["num_gpus"] + 1.0  # replaced in place: its block no longer holds it
    pd.testing.assert_frame_equal(frame_of(columns), by_arrays.assign(num_gpus=by_arrays["num_gpus"] + 1.0))


odd = st.one_of(numbers, texts, st.sampled_from(["3.5", "nan", "x", "0", "false"]), st.booleans())


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(record, st.dictionaries(st.sampled_from(COLUMNS), odd, max_size=6)), min_size=0, max_size=6))
def test_columns_from_lists_are_canonical_columns(records: list[dict]) -> None:
    """The column-by-column build gives the arrays the record-by-record one gives, values numpy would
    not convert (a text in a number column) included, and its blocks make the same table."""
    n = len(records)
    keys = dict.fromkeys(k for r in records for k in r)
    by_column = columns_from_lists({k: [r.get(k) for r in records] for k in keys} | {"not_a_column": [1] * n}, n)
    by_record = canonical_columns(records)
    assert list(by_column) == list(by_record)
    for col in COLUMNS:
        a, b = by_column[col], by_record[col]
        assert a.dtype == b.dtype, col
        if a.dtype == object:
            assert a.tolist() == b.tolist(), col
        else:
            np.testing.assert_array_equal(a, b, err_msg=col)
    pd.testing.assert_frame_equal(frame_of(by_column), frame_of(by_record))


def test_columns_from_lists_names_a_short_column() -> None:
    with pytest.raises(ValueError, match="'num_gpus' has 1 values for 2 records"):
        columns_from_lists({"num_gpus": [1]}, 2)


def _prediction_frame(n: int, rng: np.random.Generator) -> pd.DataFrame:
    p50 = rng.uniform(60, 1e5, n)
    frame = pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)], "duration_p10_s": p50 / 2, "duration_p50_s": p50,
        "duration_p90_s": p50 * 2, "peak_vram_mib": np.where(rng.random(n) < 0.3, np.nan, rng.uniform(1e3, 8e4, n)),
        "peak_vram_upper_mib": rng.uniform(1e3, 9e4, n),
        "fits_gpu_types": rng.choice(["", "A100-80GB", "A100-80GB,H100-80GB"], n),
        **{c: 1.0 + 0.1 * i for i, c in enumerate(PREDICTION_COLUMNS) if c.startswith("slowdown_")},
        "model_version": rng.choice(["job-predictor/3", "fallback"], n), "fallback": rng.random(n) < 0.5,
        "fallback_reason": rng.choice([None, "no model"], n)})
    return frame[list(PREDICTION_COLUMNS)]


@pytest.mark.parametrize("n", [1, 7, 100])
def test_predictions_from_columns_match_from_row(n: int) -> None:
    frame = _prediction_frame(n, np.random.default_rng(n))
    fast = predictions_from_columns(prediction_columns(frame))
    slow = [Prediction.from_row(r) for r in frame.to_dict("records")]
    assert [p.to_row() for p in fast] == [p.to_row() for p in slow]


def test_candidates_replace_tracked_jobs_of_the_same_id() -> None:
    layout = ClusterLayout.of(homogeneous_inventory(16))
    jobs = canonical_frame([{"job_id": "a", "num_gpus": 2, "team": "nlp"}, {"job_id": "b", "num_gpus": 4}])
    preds = _prediction_frame(2, np.random.default_rng(0)).assign(job_id=["a", "b"])
    vocab = Vocabulary().extended(jobs)
    base = QueuePicture(layout, vocab, pending_arrays(jobs, preds, vocab, layout, 0.0), QueuePicture.empty(layout).running)
    again = canonical_frame([{"job_id": "b", "num_gpus": 8, "gpu_type": "A100-80GB"}])
    cand = pending_arrays(again, prediction_columns(preds.iloc[[1]]), vocab, layout, 0.0)
    trial = base.with_candidates(cand, vocab)
    assert trial.pending.job_id.tolist() == ["a", "b"] and trial.pending.num_gpus.tolist() == [2, 8]
    assert trial.pending.requested_types.tolist() == [[True], [True]]
    assert trial.pending.gpu_request.tolist() == [None, "A100-80GB"]


@pytest.mark.parametrize("n", [1, 5])
def test_prediction_docs_are_the_codec_documents(n: int) -> None:
    from predictor.engine.predictions import prediction_docs
    from predictor.store.codec import prediction_doc

    frame = _prediction_frame(n, np.random.default_rng(n)).copy()
    frame.loc[0, "peak_vram_mib"] = np.nan  # a job with no memory estimate
    frame.loc[0, "duration_p90_s"] = np.inf
    cols = prediction_columns(frame)
    assert prediction_docs(cols) == [prediction_doc(p) for p in predictions_from_columns(cols)]
