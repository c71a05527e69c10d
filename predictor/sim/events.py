"""The event heap: the one place where simulated time lives.

Every future happening of a replay (a job arriving, a running job completing, a preempted job's
GPUs coming back after its grace period, a reservation expiring, an out-of-memory crash) is an
event on one heap. :meth:`EventQueue.pop_batch` hands the replay loop *all* events that share the
earliest time, so simultaneous happenings are coalesced into one scheduling step and the rules layer
is consulted once per distinct instant, not once per event.

Events that became pointless (the completion of a job that was preempted before it finished) are not
removed from the heap; each carries the job's *epoch* at the time it was pushed and is dropped on pop
when the job's epoch has moved on. That keeps push and pop at O(log n).

The rules layer's "decide again at" time (a plan's ``revisit_at_ts``) is one *superseding* wakeup
(:meth:`EventQueue.wake_at`): every new plan replaces the previous plan's revisit, so only the
latest one is live and the others are dropped on pop like stale completions. Without that, every
plan whose reservation keeps moving (a running job past its predicted end is assumed to need
another ``overrun_extension_s``) would start its own chain of wakeups, and the chains would
multiply with every event.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["EventKind", "Event", "EventQueue"]


class EventKind(IntEnum):
    """What happens. The integer value orders events that share a timestamp: resources are
    released (completions, crashes, evicted GPUs coming back) before new jobs arrive, so that an
    arrival at the same instant as a completion sees the freed GPUs."""

    COMPLETION = 0  # a running job finished its work
    OOM = 1  # a running job crashed because its GPU memory was too small
    TIMEOUT = 2  # the scheduler ends a running job at its time limit
    RELEASE = 3  # GPUs of an evicted job come back after the eviction's grace period
    ARRIVAL = 4  # a job is submitted
    WAKEUP = 5  # nothing changes, but a decision may (a reservation expires or is due)


@dataclass(frozen=True, slots=True, order=True)
class Event:
    """One future happening. Ordered by time, then kind, then insertion order."""

    time: float
    kind: EventKind
    seq: int
    job: int = -1  # row of the job in the JobTable, -1 for events that concern no job
    epoch: int = 0  # the job's epoch when the event was pushed (stale when it differs)


class EventQueue:
    """A min-heap of events and the simulated clock.

    ``now`` only moves forward, and only in :meth:`pop_batch`.
    """

    def __init__(self, start_time: float = 0.0) -> None:
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.now = float(start_time)
        self.popped = 0  # events handed out (stale ones excluded)
        self._wake_token = 0  # token of the last superseding wakeup pushed
        self._wake_live = 0  # token of the live one (0: none)
        self.wake_time: float | None = None  # time of the live superseding wakeup

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time: float, kind: EventKind, job: int = -1, epoch: int = 0) -> None:
        """Schedule an event. Raises ``ValueError`` for a time before ``now`` (time never goes back)."""
        if time < self.now:
            raise ValueError(f"event {kind.name} at {time} is before the clock ({self.now})")
        heapq.heappush(self._heap, (time, int(kind), self._seq, job, epoch))
        self._seq += 1

    def push_many(self, times, kind: EventKind, jobs) -> None:
        """Schedule one event per (time, job) pair, epoch 0 (used for the initial arrivals)."""
        start = self._seq
        items = [(float(t), int(kind), start + i, int(j), 0) for i, (t, j) in enumerate(zip(times, jobs, strict=True))]
        if items and min(i[0] for i in items) < self.now:
            raise ValueError("an event is before the clock")
        self._seq += len(items)
        if self._heap:
            for item in items:
                heapq.heappush(self._heap, item)
        else:
            items.sort()
            self._heap = items  # a sorted list is a valid heap

    def wake_at(self, time: float) -> None:
        """Make ``time`` the one live superseding wakeup (see the module docstring); a previous one
        is dropped. Pushing the live time again is a no-op."""
        if self._wake_live and self.wake_time == time:
            return
        if time < self.now:
            raise ValueError(f"wakeup at {time} is before the clock ({self.now})")
        self._wake_token += 1
        self._wake_live = self._wake_token
        self.wake_time = float(time)
        heapq.heappush(self._heap, (float(time), int(EventKind.WAKEUP), self._seq, -1, self._wake_token))
        self._seq += 1

    def cancel_wakeup(self) -> None:
        """Drop the live superseding wakeup, if any."""
        self._wake_live = 0
        self.wake_time = None

    def peek_time(self) -> float | None:
        """Time of the next event (possibly stale), or None when the heap is empty."""
        return self._heap[0][0] if self._heap else None

    def pop_batch(self, epochs) -> list[Event]:
        """Advance ``now`` to the earliest event time and return every live event at that time.

        Parameters
        ----------
        epochs : sequence of int
            The current epoch of each job; an event whose epoch differs from its job's is stale and
            silently discarded (its job was preempted or re-placed since it was pushed).

        Returns
        -------
        list of Event
            Live events sharing the earliest time, ordered by kind then insertion. Empty only when
            the heap holds nothing live.
        """
        heap = self._heap
        while heap:
            t = heap[0][0]
            batch: list[Event] = []
            while heap and heap[0][0] == t:
                time, kind, seq, job, epoch = heapq.heappop(heap)
                if job >= 0:
                    if epochs[job] != epoch:
                        continue
                elif epoch:  # a superseding wakeup: live only if it is the latest
                    if epoch != self._wake_live:
                        continue
                    self._wake_live = 0
                    self.wake_time = None
                batch.append(Event(time, EventKind(kind), seq, job, epoch))
            if batch:
                self.now = t
                self.popped += len(batch)
                return batch
        return []
