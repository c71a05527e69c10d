"""``serving.convert.job_columns``: job specs to canonical columns, record by record for a few, column by
column for a batch: the same arrays either way."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from features.schema import COLUMNS
from serving.convert import COLUMNWISE_FROM, job_columns
from serving.schemas.jobs import JobCreate, JobSpec

NOW = 1_700_000_000.0

spec_fields = st.fixed_dictionaries(
    {"job_id": st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,6}\Z")},
    optional={"user": st.sampled_from(["ana", " bo ", "cy"]), "team": st.sampled_from(["vision", "nlp"]),
              "num_gpus": st.integers(1, 16), "gpu_milli": st.floats(1, 1000), "gpu_type": st.just("A100-80GB"),
              "time_limit_s": st.one_of(st.integers(1, 10**6), st.floats(1, 1e6)),
              "submit_ts": st.floats(0, 1e10), "job_name": st.sampled_from(["", "   ", "llama-ft", " x "]),
              "model_params": st.floats(0, 1e12), "precision": st.sampled_from(["bf16", "fp16"]),
              "batch_size": st.integers(0, 512), "checkpoint_kind": st.none()})


def _one_by_one(specs: list[JobSpec]) -> dict[str, np.ndarray]:
    """Each spec converted alone (record by record, below ``COLUMNWISE_FROM``), the columns joined."""
    alone = [job_columns([spec], NOW) for spec in specs]
    return {col: np.concatenate([one[col] for one in alone]) for col in COLUMNS}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(spec_fields, st.booleans()), min_size=1, max_size=3 * COLUMNWISE_FROM))
def test_a_batch_converts_as_its_specs_one_by_one(given_specs: list[tuple[dict, bool]]) -> None:
    specs = [(JobCreate if create else JobSpec).model_validate(fields) for fields, create in given_specs]
    fast, slow = job_columns(specs, NOW), _one_by_one(specs)
    for col in COLUMNS:
        assert fast[col].dtype == slow[col].dtype, col
        if fast[col].dtype == object:
            assert fast[col].tolist() == slow[col].tolist(), col
        else:
            np.testing.assert_array_equal(fast[col], slow[col], err_msg=col)
    assert fast["state"].tolist() == ["PENDING"] * len(specs)
    assert all(t == NOW for t, (f, _) in zip(fast["submit_ts"].tolist(), given_specs, strict=True)
               if "submit_ts" not in f)
