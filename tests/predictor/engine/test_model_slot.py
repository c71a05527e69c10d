from __future__ import annotations

import threading
import time

import pandas as pd

from models.fallback import FallbackPredictor
from predictor.engine.model_slot import ModelSlot
from tests.serving.doubles import TimeLimitPredictor


class Registry:
    """The registry as the slot sees it: where the alias points, and loading a version."""

    def __init__(self) -> None:
        self.alias: str | None = None
        self.broken: set[str] = set()
        self.unreachable = False
        self.loads: list[str] = []

    def resolve(self) -> str | None:
        if self.unreachable:
            raise ConnectionError("tracking server down")
        return self.alias

    def load(self, version: str) -> TimeLimitPredictor:
        self.loads.append(version)
        if version in self.broken:
            raise ValueError("artifact is corrupt")
        return TimeLimitPredictor(version)


def make_slot(reg: Registry) -> ModelSlot:
    return ModelSlot(uri="models:/job-predictor@champion", resolve=reg.resolve, load=reg.load,
                     fallback=FallbackPredictor(), poll_s=0.01)


def test_fallback_until_a_model_is_registered_then_swap() -> None:
    reg = Registry()
    slot = make_slot(reg)
    assert slot.current.fallback and slot.current.fallback_reason == "model not loaded yet"
    assert not slot.check_once()
    assert slot.current.fallback_reason == "no model registered at models:/job-predictor@champion"
    reg.alias = "job-predictor/1"
    assert slot.check_once() and slot.current.version == "job-predictor/1" and not slot.current.fallback
    assert not slot.check_once() and reg.loads == ["job-predictor/1"]  # unchanged alias: no reload


def test_a_failed_load_or_an_unreachable_registry_keeps_the_current_model() -> None:
    reg = Registry()
    reg.alias = "job-predictor/1"
    slot = make_slot(reg)
    slot.check_once()
    reg.alias, reg.broken = "job-predictor/2", {"job-predictor/2"}
    assert not slot.check_once()
    assert slot.current.version == "job-predictor/1"
    assert slot.last_error == "loading job-predictor/2 failed: ValueError: artifact is corrupt"
    reg.unreachable = True
    assert not slot.check_once() and slot.current.version == "job-predictor/1"
    assert slot.last_error.startswith("cannot reach the model registry")


def test_a_broken_first_model_leaves_the_fallback_saying_why() -> None:
    reg = Registry()
    reg.alias, reg.broken = "job-predictor/1", {"job-predictor/1"}
    slot = make_slot(reg)
    slot.check_once()
    assert slot.current.fallback
    assert slot.current.fallback_reason == "loading job-predictor/1 failed: ValueError: artifact is corrupt"


def test_requests_during_hot_reload_never_fail_and_see_whole_models() -> None:
    """Readers keep scoring while the background thread swaps models under them."""
    reg = Registry()
    slot = make_slot(reg)
    slot.subscribe(lambda m: seen_swaps.append(m.version))
    seen_swaps: list[str] = []
    jobs = pd.DataFrame({"job_id": ["a"], "time_limit_s": [100.0]})
    stop = threading.Event()
    errors: list[BaseException] = []
    versions: set[str] = set()

    def reader() -> None:
        while not stop.is_set():
            try:
                model = slot.current  # read once per request
                out = model.predictor.predict_frame(jobs, None, 0.0)
                assert out["model_version"].iloc[0] == model.version  # the predictor is the version the slot says
                versions.add(model.version)
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    slot.start()
    for v in range(1, 6):
        reg.alias = f"job-predictor/{v}"
        deadline = time.time() + 5
        while slot.current.version != reg.alias and time.time() < deadline:
            time.sleep(0.005)
    slot.stop()
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert slot.current.version == "job-predictor/5"
    assert seen_swaps[-5:] == [f"job-predictor/{v}" for v in range(1, 6)]
    assert len(versions) >= 2


class BlockingWarmup:
    """A warm-up that reports one step, then waits until released (or raises, when told to)."""

    def __init__(self, fail: bool = False) -> None:
        self.started, self.release, self.fail = threading.Event(), threading.Event(), fail
        self.seen: list[str] = []

    def __call__(self, version, predictor, report) -> None:  # noqa: ANN001 - the slot's WarmFn
        self.seen.append(version)
        report({"boosters": 2, "compiled": 0})
        self.started.set()
        assert self.release.wait(10)
        if self.fail:
            raise RuntimeError("compiler crashed")
        report({"boosters": 2, "compiled": 2})


def test_a_new_version_answers_before_its_warmup_ends() -> None:
    reg, warm = Registry(), BlockingWarmup()
    reg.alias = "job-predictor/1"
    slot = ModelSlot(uri="models:/job-predictor@champion", resolve=reg.resolve, load=reg.load,
                     fallback=FallbackPredictor(), poll_s=0.01, warm=warm)
    checker = threading.Thread(target=slot.check_once)
    checker.start()
    assert warm.started.wait(10)
    # swapped in, ready, and saying how far the warm-up is, while the warm-up still runs
    assert slot.current.version == "job-predictor/1" and not slot.current.fallback
    assert slot.first_check_done.is_set()
    assert slot.warmup.version == "job-predictor/1" and not slot.warmup.done
    assert slot.warmup.counts == {"boosters": 2, "compiled": 0}
    warm.release.set()
    checker.join(10)
    assert slot.warmup.done and slot.warmup.counts == {"boosters": 2, "compiled": 2}
    assert warm.seen == ["job-predictor/1"]
    assert not slot.check_once() and warm.seen == ["job-predictor/1"]  # same version: not warmed again


def test_warmup_in_background_returns_at_the_swap_and_a_failed_one_keeps_the_version() -> None:
    reg, warm = Registry(), BlockingWarmup(fail=True)
    reg.alias = "job-predictor/3"
    slot = ModelSlot(uri="models:/job-predictor@champion", resolve=reg.resolve, load=reg.load,
                     fallback=FallbackPredictor(), poll_s=0.01, warm=warm)
    assert slot.check_once(warmup="background")  # returns while the warm-up waits
    assert warm.started.wait(10) and not slot.warmup.done
    warm.release.set()
    deadline = time.time() + 10
    while not slot.warmup.done and time.time() < deadline:
        time.sleep(0.01)
    assert slot.warmup.done and slot.warmup.counts == {"boosters": 2, "compiled": 0}  # what it got to
    assert slot.current.version == "job-predictor/3" and not slot.current.fallback


def test_a_one_shot_command_skips_the_warmup() -> None:
    reg, warm = Registry(), BlockingWarmup()
    reg.alias = "job-predictor/4"
    slot = ModelSlot(uri="models:/job-predictor@champion", resolve=reg.resolve, load=reg.load,
                     fallback=FallbackPredictor(), poll_s=0.01, warm=warm)
    assert slot.check_once(warmup="skip") and slot.current.version == "job-predictor/4"
    assert warm.seen == [] and slot.warmup is None and slot.first_check_done.is_set()
    import pytest

    with pytest.raises(ValueError, match="warmup: now, background or skip"):
        slot.check_once(warmup="later")
