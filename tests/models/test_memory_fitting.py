"""Fitting the memory estimate's constants on measured peaks, the shipped calibration, and the
leave-one-source-out validation. The generated tables here test the code path only: the shipped
constants come from the public measured tables (``test_shipped_constants_refit_from_the_tables``)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from models.memory_analytic import analytic_memory
from models.memory_calibration import (
    CALIBRATION_PATH,
    FITTED,
    MemoryCalibration,
    load_calibration,
    save_calibration,
    shipped_calibration,
)
from models.memory_fitting import SOURCE_LICENSES, fit_calibration, leave_one_source_out, measured_view
from models.memory_measured import read_measured_folder

TRUTH = MemoryCalibration(activation_bytes=40.0, checkpoint_bytes=3.0, logit_bytes=6.0, allocator=1.05,
                          logit_reserve=0.3, context_mib=900.0, image_sample_mib=60.0)


def generated_table(n: int, seed: int, noise: float = 0.03) -> pd.DataFrame:
    """Rows with varied descriptors whose peaks follow TRUTH (plus log-normal noise), in four sources."""
    rng = np.random.default_rng(seed)
    method = rng.choice(["full", "lora", "qlora"], n)
    jobs = pd.DataFrame({
        "job_id": [f"g{i}" for i in range(n)], "source": rng.choice(["s1", "s2", "s3", "s4"], n),
        "model_params": rng.choice([0.35e9, 1.3e9, 3e9, 7e9, 13e9], n), "finetune_method": method,
        "precision_mode": rng.choice(["bf16-mixed", "bf16-true", "fp32"], n),
        "quantization": np.where(method == "qlora", "nf4", "none"), "optimizer": "adamw",
        "batch_size": rng.choice([1.0, 2.0, 4.0, 8.0], n), "seq_len": rng.choice([512.0, 1024.0, 2048.0, 4096.0], n),
        "grad_checkpointing": rng.choice(["off", "full"], n), "num_gpus": 1.0, "parallel_strategy": "ddp",
        "lora_rank": 16.0, "vocab_size": rng.choice([32_000.0, 128_256.0], n), "peak_metric": "device",
        "measured": True,
    })
    jobs["peak_vram_mib"] = analytic_memory(jobs, calibration=TRUTH)["total"] * np.exp(rng.normal(0, noise, n))
    return jobs


def test_fit_recovers_the_constants_of_a_generated_table() -> None:
    cal = fit_calibration(generated_table(400, 1), cross_validate=False)
    # the well-identified constants; checkpointed activations and the context are small shares of these
    # peaks (those stay near their priors), and logit bytes trade off against their reserve
    for name in ("activation_bytes", "allocator"):
        assert getattr(cal, name) == pytest.approx(getattr(TRUTH, name), rel=0.15), name
    later = generated_table(1000, 2)  # enough rows that a 10 % miss rate is not 13 % by chance (200 rows: sd 0.02)
    view = measured_view(later, cal)
    actual = later["peak_vram_mib"].to_numpy()
    assert np.median(np.abs(np.log(view["total"] / actual))) < 0.05
    assert np.mean(actual > view["upper"]) <= 0.10


def test_rows_that_cannot_calibrate_are_left_out_and_too_few_refused() -> None:
    table = generated_table(40, 3)
    table.loc[:25, "measured"] = False
    with pytest.raises(InputError, match="at least 20 measured peaks"):
        fit_calibration(table)


def test_leave_one_source_out_reports_every_source() -> None:
    table, pooled, preds = leave_one_source_out(generated_table(160, 4), sources=["s1", "s2", "s3", "s4", "none"])
    assert table["source"].tolist() == ["s1", "s2", "s3", "s4", "none"]
    assert table.loc[4, "rows"] == 0 and table.loc[:3, "rows"].sum() == 160 == len(preds)
    assert pooled["within_50pct"] > 0.95 and set(pooled["targets_met"]) == {
        "within_50pct", "underestimate_rate", "mean_overreserve_ratio"}
    assert set(preds.columns) == {"source", "job_id", "measured_mib", "point_mib", "upper_mib", "assumed"}


def test_a_peak_measured_by_torch_is_compared_without_the_context() -> None:
    jobs = generated_table(3, 5)
    device = measured_view(jobs.assign(peak_metric="device"), TRUTH)
    allocated = measured_view(jobs.assign(peak_metric="allocated"), TRUTH)
    assert np.all(device["total"] - allocated["total"] > TRUTH.context_mib)


def test_calibration_file_round_trip_and_bad_files(tmp_path) -> None:
    path = tmp_path / "cal.json"
    cal = MemoryCalibration(activation_bytes=31.0, upper_margins=(0.1, 0.2, 0.3), sources=[{"source": "x"}])
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    assert list(tmp_path.iterdir()) == [path]  # written through a temporary file, nothing left behind
    path.write_text('{"activation_bytes": 1, "colour": "red"}')
    with pytest.raises(InputError, match="colour"):
        load_calibration(path)
    path.write_text("not json")
    with pytest.raises(InputError, match="cannot read"):
        load_calibration(path)


def test_the_shipped_calibration_is_the_default_and_says_where_it_came_from() -> None:
    cal = shipped_calibration()
    assert CALIBRATION_PATH.is_file() and cal == load_calibration(CALIBRATION_PATH)
    assert cal != MemoryCalibration()  # fitted, not the priors
    assert {s["source"] for s in cal.sources} == set(SOURCE_LICENSES)
    assert all(s["license"] in ("Apache-2.0", "BSD-3-Clause") and s["repository"] for s in cal.sources)
    assert sum(s["rows_used"] for s in cal.sources) == cal.validation["leave_one_source_out"]["n"]
    job = pd.DataFrame([{"job_id": "j", "model_params": 7e9, "num_gpus": 1.0}])
    assert analytic_memory(job)["total"][0] == analytic_memory(job, calibration=cal)["total"][0]


def test_shipped_constants_refit_from_the_tables(shared_file) -> None:
    """The shipped constants are what fitting the public tables gives (margins aside: those come from
    the leave-one-source-out residuals, which ``python -m models.memory_fitting`` computes)."""
    measured = shared_file("gpu-memory/measured")
    refit = fit_calibration(read_measured_folder(measured), cross_validate=False)
    shipped = asdict(shipped_calibration())
    for name in FITTED:
        assert getattr(refit, name) == pytest.approx(shipped[name], rel=1e-6), name
