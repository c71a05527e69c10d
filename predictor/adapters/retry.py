"""Retry with exponential backoff and full jitter, for schedulers that are briefly unreachable.

Only ``SchedulerUnavailable`` is retried; ``SchedulerRejected`` and every other error propagate at
once. The delay before retry ``k`` (1-based) is uniform in ``[0, min(max_delay_s, base_delay_s * 2**(k-1))]``
("full jitter"), so many workers retrying together spread out instead of hammering the scheduler in step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from predictor.adapters.base import SchedulerUnavailable

__all__ = ["RetryPolicy", "RetryExhausted"]

T = TypeVar("T")


class RetryExhausted(SchedulerUnavailable):
    """Still unreachable after every attempt; carries the number of attempts made."""

    def __init__(self, message: str, attempts: int):
        super().__init__(message)
        self.attempts = attempts


@dataclass
class RetryPolicy:
    """How often and how long to retry. ``sleep`` and ``uniform`` are injectable for tests."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must be >= 0")

    def delay_cap(self, retry: int) -> float:
        """Upper bound of the delay before retry number ``retry`` (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))

    def call(self, fn: Callable[[], T], on_retry: Callable[[int, Exception, float], None] | None = None) -> tuple[T, int]:
        """Call ``fn`` until it succeeds; return its result and the number of attempts it took.

        Raises
        ------
        RetryExhausted
            When every attempt raised ``SchedulerUnavailable``.
        """
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(), attempt
            except SchedulerUnavailable as exc:
                if attempt == self.max_attempts:
                    raise RetryExhausted(f"{exc} (gave up after {attempt} attempts)", attempt) from exc
                delay = self.uniform(0.0, self.delay_cap(attempt))
                if on_retry is not None:
                    on_retry(attempt, exc, delay)
                self.sleep(delay)
        raise AssertionError("unreachable")
