"""Compiled boosters (lleaves) predict what LightGBM predicts; LightGBM answers where they are absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models import compiled
from models.bundle import JobPredictorBundle
from models.lgbm import predict_booster

pytestmark = pytest.mark.skipif(not compiled.compiler_available(), reason="lleaves is not installed")

NUMERIC = ("duration_p10_s", "duration_p50_s", "duration_p90_s", "peak_vram_mib", "peak_vram_upper_mib")


@pytest.fixture
def fresh(bundle: JobPredictorBundle):
    """The bundle with no booster compiled before or after the test."""
    for b in compiled.boosters_in(bundle):
        compiled.forget(b)
    yield bundle
    for b in compiled.boosters_in(bundle):
        compiled.forget(b)


def _rows(booster, n: int, seed: int) -> np.ndarray:
    """Rows spanning each feature's split thresholds, with missing values and integer category codes."""
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 3, size=(n, booster.num_feature()))
    X[:, ::3] = np.round(np.abs(X[:, ::3]))  # integer-valued columns (categorical codes among them)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


def test_every_booster_compiled_agrees_with_lightgbm(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    boosters = compiled.boosters_in(fresh)
    assert len(boosters) >= 6  # three duration quantiles, memory median and upper, topology
    counts = compiled.compile_boosters(fresh, cache=tmp_path)
    assert counts == {"boosters": len(boosters), "compiled": len(boosters), "failed": 0, "skipped": 0}
    for k, booster in enumerate(boosters):
        fast = compiled.compiled_for(booster)
        assert fast is not None
        assert fast._entry is not None  # called with raw addresses, not through lleaves' Model.predict
        for n in (1, 7, 300):
            X = _rows(booster, n, seed=k * 10 + n)
            np.testing.assert_allclose(fast.predict(X), booster.predict(X, num_threads=1), rtol=0, atol=1e-6)
            np.testing.assert_array_equal(fast.predict(X), fast._model.predict(X, n_jobs=1))  # lleaves' own call
        assert fast.predict(np.zeros((0, booster.num_feature()))).shape == (0,)
    assert len(list(tmp_path.glob("*.o"))) == len({compiled.compiled_for(b).key for b in boosters})


def test_bundle_predictions_are_the_same_compiled(fresh: JobPredictorBundle, later_jobs: pd.DataFrame,
                                                  tmp_path: Path) -> None:
    now = float(later_jobs["submit_ts"].max())
    jobs = later_jobs.head(200)
    plain = fresh.predict_frame(jobs, fresh.history, now)
    compiled.compile_boosters(fresh, cache=tmp_path)
    fast = fresh.predict_frame(jobs, fresh.history, now)
    for col in (*NUMERIC, *[c for c in plain.columns if c.startswith("slowdown_")]):
        np.testing.assert_allclose(fast[col].to_numpy(float), plain[col].to_numpy(float), rtol=1e-9, atol=1e-6,
                                   err_msg=col)
    assert (fast["fits_gpu_types"] == plain["fits_gpu_types"]).all()


def test_second_load_reads_the_cache(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    compiled.compile_boosters(fresh, cache=tmp_path)
    made = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.o")}
    booster = compiled.boosters_in(fresh)[0]
    X = _rows(booster, 50, seed=3)
    before = predict_booster(booster, X)
    for b in compiled.boosters_in(fresh):
        compiled.forget(b)
    assert compiled.compile_boosters(fresh, cache=tmp_path)["compiled"] == len(made)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.o")} == made  # loaded, not rebuilt
    np.testing.assert_array_equal(predict_booster(booster, X), before)


def test_disabled_compilation_leaves_lightgbm(fresh: JobPredictorBundle, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREDICTOR_COMPILE_BOOSTERS", "false")
    counts = compiled.compile_boosters(fresh, cache=tmp_path)
    assert counts["skipped"] == counts["boosters"] and counts["compiled"] == 0
    booster = compiled.boosters_in(fresh)[0]
    assert compiled.compiled_for(booster) is None
    X = _rows(booster, 20, seed=5)
    np.testing.assert_array_equal(predict_booster(booster, X), booster.predict(X, num_threads=1))
    assert not list(tmp_path.glob("*.o"))


def test_a_failed_compilation_falls_back_to_lightgbm(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache directory should be")
    counts = compiled.compile_boosters(fresh, cache=blocked)
    assert counts["failed"] == counts["boosters"] > 0
    booster = compiled.boosters_in(fresh)[0]
    assert compiled.compiled_for(booster) is None
    X = _rows(booster, 20, seed=6)
    np.testing.assert_array_equal(predict_booster(booster, X), booster.predict(X, num_threads=1))


def test_a_second_process_waits_for_the_first_ones_object_file(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    """Workers starting together: the one holding a booster's lock compiles it, the other waits and
    loads the file instead of compiling again (flock conflicts between open files, as between processes)."""
    import fcntl
    import shutil
    import threading

    booster = compiled.boosters_in(fresh)[-1]
    key = compiled.compile_booster(booster, cache=tmp_path).key
    kept = tmp_path / "kept.o"
    shutil.move(tmp_path / f"{key}.o", kept)
    done: list[compiled.CompiledBooster] = []
    with open(tmp_path / f".{key}.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # another worker is compiling it
        waiter = threading.Thread(target=lambda: done.append(compiled.compile_booster(booster, cache=tmp_path)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not done  # waits for the lock, compiles nothing meanwhile
        shutil.copy2(kept, tmp_path / f"{key}.o")  # the other worker's file lands
        made = (tmp_path / f"{key}.o").stat().st_mtime_ns
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    waiter.join(60)
    assert done and done[0].key == key
    assert (tmp_path / f"{key}.o").stat().st_mtime_ns == made  # loaded, not compiled again
    X = _rows(booster, 30, seed=9)
    np.testing.assert_allclose(done[0].predict(X), booster.predict(X, num_threads=1), rtol=0, atol=1e-6)


def test_progress_is_reported_per_booster(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    seen: list[dict] = []
    counts = compiled.compile_boosters(fresh, cache=tmp_path, progress=seen.append)
    n = counts["boosters"]
    assert [s["compiled"] for s in seen] == list(range(n + 1)) and seen[-1] == counts


def test_a_killed_compile_leaves_nothing_for_long(fresh: JobPredictorBundle, tmp_path: Path) -> None:
    import os
    import time

    stale, recent = tmp_path / ".compile-dead", tmp_path / ".compile-busy"
    for d in (stale, recent):
        d.mkdir()
        (d / "model.txt").write_text("tree")
    old = time.time() - compiled.STALE_COMPILE_S - 60
    os.utime(stale, (old, old))
    compiled.compile_booster(compiled.boosters_in(fresh)[-1], cache=tmp_path)
    assert not stale.exists() and recent.exists()  # another process may still be compiling there
