import pytest
from hypothesis import given
from hypothesis import strategies as st

from predictor.adapters.base import SchedulerRejected, SchedulerUnavailable
from predictor.adapters.retry import RetryExhausted, RetryPolicy


def _flaky(failures: int, exc=SchedulerUnavailable):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= failures:
            raise exc(f"down ({len(calls)})")
        return "ok"

    return fn, calls


def test_transient_failures_are_retried_with_growing_capped_delays():
    sleeps, caps = [], []
    policy = RetryPolicy(max_attempts=6, base_delay_s=1.0, max_delay_s=5.0, sleep=sleeps.append,
                         uniform=lambda lo, hi: caps.append(hi) or hi)
    fn, calls = _flaky(4)
    assert policy.call(fn) == ("ok", 5)
    assert caps == [1.0, 2.0, 4.0, 5.0] and sleeps == caps


def test_gives_up_after_max_attempts():
    policy = RetryPolicy(max_attempts=3, sleep=lambda s: None)
    fn, calls = _flaky(10)
    with pytest.raises(RetryExhausted, match="gave up after 3 attempts") as info:
        policy.call(fn)
    assert info.value.attempts == 3 and len(calls) == 3


def test_permanent_errors_are_not_retried():
    policy = RetryPolicy(sleep=lambda s: pytest.fail("must not sleep"))
    fn, calls = _flaky(1, SchedulerRejected)
    with pytest.raises(SchedulerRejected):
        policy.call(fn)
    assert len(calls) == 1


@given(st.integers(min_value=1, max_value=12), st.floats(0.01, 5), st.floats(0.01, 60))
def test_full_jitter_stays_within_the_cap(retry, base, cap):
    policy = RetryPolicy(base_delay_s=base, max_delay_s=cap)
    assert 0 <= policy.delay_cap(retry) <= cap
    assert policy.delay_cap(retry) == min(cap, base * 2 ** (retry - 1))


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base_delay_s": -1}])
def test_bad_policy(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
