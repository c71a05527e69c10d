"""The capacity book of one scheduling cycle: what is free now, when each GPU frees up, what is reserved.

One book is opened per ``decide()`` from the snapshot and written as the cycle walks the queue in
priority order; the snapshot itself is never touched. Three per-GPU arrays:

``free_milli``
    thousandths of the GPU free now (starts in this cycle subtract from it);
``busy_until``
    when the GPU is predicted to be wholly free: ``now`` for an idle GPU, else the latest predicted
    (p90) end of the jobs on it, pushed later by every start and reservation booked on it;
``reserved_from``
    start of the earliest reservation holding the GPU (``inf`` if none).

Rules (documented in docs/rules-layer.md, *Reservations and backfill*, referred to by name):

*No double booking.* A reservation may only take GPUs with ``busy_until <= start``, and pushes their
``busy_until`` to its own predicted end; so on every GPU the running jobs, this cycle's starts and
the reservations follow one another in time and never overlap while jobs end by their p90.

*Backfill by p90.* A job starting now may use a free GPU only if its predicted end (p90 x slowdown of
the placement class it gets) is no later than the GPU's ``reserved_from``. A backfilled job therefore
never delays a reservation when it ends by its p90.

*Earliest start.* A blocked gang's reservation starts at the earliest ``t`` at which the GPUs with
``busy_until <= t`` hold a placement of the accepted class: per topology level, the g-th smallest
``busy_until`` inside each unit (island, NUMA domain, node, rack), minimised over units; for "any
class" the g-th smallest ``busy_until`` of the type.
GPU shares (``gpu_milli < 1000``) are reserved as whole GPUs: conservative, never double-booked.

*Node eligibility* (``predictor.capacity.eligibility``, docs/residency.md). While a constrained job
is decided (``restrict(row)``), every GPU-type mask below is intersected with the GPUs its
constraint allows: starts, backfills, reservations, earliest-start times and the placements of
preemptors (``extra_free``) never use a GPU outside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from predictor.capacity.eligibility import NodeEligibility
from predictor.capacity.layout import CROSS_RACK, MILLI, ClusterLayout
from predictor.capacity.placement import GangChoice, GangMemo, find_gang

#: Gangs up to this many GPUs are booked element by element (``CapacityBook.take``).
_SMALL_GANG = 8

__all__ = ["CapacityBook", "predicted_busy_until"]


def predicted_busy_until(n_gpus: int, now: float, alloc_gpus: np.ndarray, alloc_offsets: np.ndarray,
                         start_ts: np.ndarray, predicted_end_ts: np.ndarray, *, overrun_extension_s: float,
                         unknown_duration_s: float, overrun_growth: float = 0.0) -> np.ndarray:
    """When each GPU is predicted to be wholly free, from the running jobs' predicted p90 ends.

    A job without a prediction is assumed to run ``unknown_duration_s`` from its start; a job past
    its predicted end by ``o`` seconds is assumed to need ``max(overrun_extension_s, overrun_growth *
    o)`` more from ``now`` (rule *overrun growth*: the longer a job has outrun its prediction, the
    less "a few minutes more" is believed; 0 keeps the fixed extension).

    Returns
    -------
    ndarray of float64, shape (n_gpus,)
    """
    busy = np.full(n_gpus, now, dtype=np.float64)
    if len(alloc_gpus) == 0:
        return busy
    end = np.where(np.isfinite(predicted_end_ts), predicted_end_ts, start_ts + unknown_duration_s)
    extension = np.maximum(overrun_extension_s, overrun_growth * (now - end)) if overrun_growth else overrun_extension_s
    end = np.where(end > now, end, now + extension)
    np.maximum.at(busy, alloc_gpus, np.repeat(end, np.diff(alloc_offsets)))
    return busy


class CapacityBook:
    """Working capacity for one cycle (see the module docstring).

    Parameters
    ----------
    layout : ClusterLayout
    now : float
    free_milli : ndarray of int, shape (n_gpus,)
    busy_until : ndarray of float, shape (n_gpus,)
    strategy : {"best_class", "first_fit"}
    eligibility : NodeEligibility, optional
        The pending jobs' constraints (rule *node eligibility*); None: every job may use every GPU.
    gang_memo : GangMemo, optional
        Remembers gang searches across books of the same layout (same answers, see ``GangMemo``; keyed
        on the usable mask, so a constrained job's searches are remembered apart).
    """

    def __init__(self, layout: ClusterLayout, now: float, free_milli: np.ndarray, busy_until: np.ndarray,
                 strategy: str = "best_class", eligibility: NodeEligibility | None = None,
                 gang_memo: GangMemo | None = None) -> None:
        self.layout = layout
        self.gang_memo = gang_memo if gang_memo is not None and gang_memo.layout is layout else None
        self._find = self.gang_memo.find if self.gang_memo is not None else self._search
        self.now = float(now)
        self.strategy = strategy
        self.free_milli = np.array(free_milli, dtype=np.int64, copy=True)
        self.busy_until = np.maximum(np.asarray(busy_until, dtype=np.float64), self.now)
        self.reserved_from = np.full(layout.n_gpus, np.inf)
        self.any_reserved = False
        self.version = 0  # bumped by every booking; keys the caches below
        self._sorted_busy: dict[tuple[int, int], tuple[int, np.ndarray]] = {}
        self._by_class: dict[tuple[int, int, int], tuple[int, np.ndarray]] = {}
        self._lendable: dict[tuple[int, int], tuple[int, np.ndarray]] = {}
        # rule *node eligibility*: the constraint code of the job being decided (-1: none)
        self.eligibility = eligibility
        self.scope = -1
        self._scoped: dict[tuple[int, int], np.ndarray] = {}
        whole = self.free_milli == MILLI
        self.whole_free_by_type = np.bincount(layout.gpu_type[whole], minlength=layout.n_types)
        self.any_free_by_type = np.bincount(layout.gpu_type[self.free_milli > 0], minlength=layout.n_types)

    def _search(self, usable: np.ndarray, num_gpus: int, **kw) -> GangChoice | None:
        return find_gang(self.layout, usable, num_gpus, **kw)

    # ------------------------------------------------------------------ node eligibility
    def restrict(self, row: int) -> None:
        """Decide pending row ``row`` next: its constraint's GPUs only (rule *node eligibility*)."""
        self.scope = -1 if self.eligibility is None else int(self.eligibility.codes[row])

    def type_mask(self, type_code: int) -> np.ndarray:
        """GPUs of ``type_code`` the job being decided may use."""
        if self.scope < 0:
            return self.layout.type_masks[type_code]
        key = (type_code, self.scope)
        hit = self._scoped.get(key)
        if hit is None:
            hit = self._scoped[key] = self.layout.type_masks[type_code] & self.eligibility.gpu_masks[self.scope]
        return hit

    # ------------------------------------------------------------------ queries
    def could_fit_now(self, type_code: int, num_gpus: int, milli: int) -> bool:
        """Cheap necessary condition for a start now (ignores reservations and topology)."""
        if milli >= MILLI:
            return bool(self.whole_free_by_type[type_code] >= num_gpus)
        return bool(self.any_free_by_type[type_code] >= num_gpus)

    def whole_free_until(self, type_code: int, end_ts: float) -> int:
        """Wholly free GPUs of the type that a job ending at ``end_ts`` may use now (reservations
        respected, topology ignored): a tight necessary condition for a whole-GPU start."""
        if not self.any_reserved and self.scope < 0:
            return int(self.whole_free_by_type[type_code])
        key = (type_code, self.scope)
        hit = self._lendable.get(key)
        if hit is None or hit[0] != self.version:
            free = self.type_mask(type_code) & (self.free_milli == MILLI)
            hit = (self.version, np.sort(self.reserved_from[free]))
            self._lendable[key] = hit
        ordered = hit[1]
        return int(len(ordered) - np.searchsorted(ordered, end_ts, side="left"))

    def usable_now(self, type_code: int, milli: int, end_ts: float) -> np.ndarray:
        """GPUs of ``type_code`` with ``milli`` free now that a job ending at ``end_ts`` may use."""
        usable = self.type_mask(type_code) & (self.free_milli >= milli)
        if self.any_reserved:
            usable &= self.reserved_from >= end_ts
        return usable

    def place_now(self, type_code: int, num_gpus: int, milli: int, end_by_class: Sequence[float], *,
                  max_class: int = CROSS_RACK, extra_free: np.ndarray | None = None) -> GangChoice | None:
        """Best placement starting now whose GPUs are not reserved before the job's predicted end.

        ``end_by_class[k]`` is the job's predicted end if placed in class ``k`` (non-decreasing).
        ``extra_free`` adds thousandths per GPU (GPUs that preemption would free).
        """
        free = self.free_milli if extra_free is None else self.free_milli + extra_free
        base = self.type_mask(type_code) & (free >= milli)
        share = free if milli < MILLI else None
        need_class = 0
        while True:
            usable = base & (self.reserved_from >= end_by_class[need_class]) if self.any_reserved else base
            choice = self._find(usable, num_gpus, max_class=max_class, strategy=self.strategy, free_milli=share)
            if choice is None:
                return None
            c = choice.placement_class
            if c <= need_class or not self.any_reserved or \
                    (self.reserved_from[choice.gpus] >= end_by_class[c]).all():
                return choice
            need_class = c

    def earliest_any(self, type_code: int, num_gpus: int) -> float:
        """Earliest time ``num_gpus`` GPUs of the type are free at once, in any placement (``inf`` if never).

        The ``num_gpus``-th smallest ``busy_until`` of the type; sorted once per booking version.
        """
        ordered = self._busy_sorted(type_code)
        return float(ordered[num_gpus - 1]) if 0 < num_gpus <= len(ordered) else np.inf

    def earliest_any_rows(self, type_code: int, num_gpus: np.ndarray) -> np.ndarray:
        """:meth:`earliest_any` of the type for each gang size in ``num_gpus`` (one array look-up)."""
        ordered = self._busy_sorted(type_code)
        g = np.asarray(num_gpus, dtype=np.int64)
        ok = (g > 0) & (g <= len(ordered))
        out = np.full(len(g), np.inf)
        out[ok] = ordered[g[ok] - 1]
        return out

    def _busy_sorted(self, type_code: int) -> np.ndarray:
        """``busy_until`` of the type's GPUs (the job being decided may use), ascending; sorted once per
        booking version."""
        key = (type_code, self.scope)
        hit = self._sorted_busy.get(key)
        if hit is None or hit[0] != self.version:
            hit = (self.version, np.sort(self.busy_until[self.type_mask(type_code)]))
            self._sorted_busy[key] = hit
        return hit[1]

    def earliest_by_class(self, type_code: int, num_gpus: int) -> np.ndarray:
        """Earliest time a placement of class <= k exists, for k = 0..4 (``inf`` if never).

        Per level, the time a unit first holds ``num_gpus`` GPUs with ``busy_until <= t`` is the
        ``num_gpus``-th smallest ``busy_until`` among its GPUs; the level's time is the minimum over
        its units, and a class's time the minimum over the levels at or below it. O(n_gpus).
        """
        key = (type_code, int(num_gpus), self.scope)
        hit = self._by_class.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        lay = self.layout
        g = int(num_gpus)
        times = np.full(5, np.inf)
        overall = self.earliest_any(type_code, g)
        if not np.isfinite(overall) or g == 1:
            times[:] = overall
            self._by_class[key] = (self.version, times)
            return times
        for level, (members, unit_type) in enumerate(lay.unit_matrices):
            if members.shape[1] < g:
                continue
            rows = members[unit_type == type_code]
            if len(rows) == 0:
                continue
            ok = rows >= 0
            if self.scope >= 0:  # rule *node eligibility*: GPUs outside the constraint never free up
                ok &= self.eligibility.gpu_masks[self.scope][np.maximum(rows, 0)]
            vals = np.where(ok, self.busy_until[np.maximum(rows, 0)], np.inf)
            times[level] = float(np.partition(vals, g - 1, axis=1)[:, g - 1].min())
        times[4] = overall
        times = np.minimum.accumulate(times)
        self._by_class[key] = (self.version, times)
        return times

    def earliest_start(self, type_code: int, num_gpus: int, *, max_class: int = CROSS_RACK,
                       times: np.ndarray | None = None) -> tuple[float, GangChoice] | None:
        """Earliest time a gang of ``num_gpus`` GPUs of the type fits within ``max_class``, and where.

        None when the type has fewer GPUs than the gang or no such placement ever exists.
        ``times`` reuses a result of :meth:`earliest_by_class` for the same type and gang.
        """
        if times is None:
            times = self.earliest_by_class(type_code, num_gpus)
        t = float(times[max_class])
        if not np.isfinite(t):
            return None
        usable = self.type_mask(type_code) & (self.busy_until <= t)
        choice = self._find(usable, num_gpus, max_class=max_class, strategy=self.strategy)
        if choice is None:  # first_fit may miss a class-k set that exists; fall back to any class
            choice = self._find(usable, num_gpus, strategy="best_class", max_class=max_class)
        if choice is None:
            raise RuntimeError(f"no gang of {num_gpus} at the earliest time {t} computed for it")
        return t, choice

    # ------------------------------------------------------------------ bookings
    def take(self, gpus: np.ndarray, milli: np.ndarray | int, end_ts: float) -> None:
        """Book ``milli`` (per GPU, or one value for all) of each GPU in ``gpus`` until ``end_ts``."""
        if len(gpus) <= _SMALL_GANG and isinstance(milli, int | np.integer):
            self._take_few(gpus.tolist() if isinstance(gpus, np.ndarray) else list(gpus), int(milli), end_ts)
            return
        gpus = np.asarray(gpus, dtype=np.int64)
        was_whole = self.free_milli[gpus] == MILLI
        was_any = self.free_milli[gpus] > 0
        self.free_milli[gpus] -= milli
        if (self.free_milli[gpus] < 0).any():
            raise RuntimeError("capacity book over-allocated a GPU (a placement ignored free capacity)")
        types = self.layout.gpu_type[gpus]
        np.subtract.at(self.whole_free_by_type, types[was_whole & (self.free_milli[gpus] < MILLI)], 1)
        np.subtract.at(self.any_free_by_type, types[was_any & (self.free_milli[gpus] == 0)], 1)
        self.busy_until[gpus] = np.maximum(self.busy_until[gpus], end_ts)
        self.version += 1

    def _take_few(self, gpus: list[int], milli: int, end_ts: float) -> None:
        """:meth:`take` of one share on a few distinct GPUs, element by element (the same bookings as
        the array expressions, without a dozen numpy calls for a gang of one to eight GPUs)."""
        if len(set(gpus)) != len(gpus):  # a GPU twice: the array form's semantics
            self.take(np.asarray(gpus, dtype=np.int64), np.full(len(gpus), milli, dtype=np.int64), end_ts)
            return
        free, busy, gpu_type = self.free_milli, self.busy_until, self.layout.gpu_type
        after = [int(free[g]) - milli for g in gpus]
        if min(after, default=0) < 0:
            raise RuntimeError("capacity book over-allocated a GPU (a placement ignored free capacity)")
        end = float(end_ts)
        for g, left in zip(gpus, after, strict=True):
            before = left + milli
            free[g] = left
            if before == MILLI and left < MILLI:
                self.whole_free_by_type[gpu_type[g]] -= 1
            if before > 0 and left == 0:
                self.any_free_by_type[gpu_type[g]] -= 1
            if busy[g] < end or end != end:  # np.maximum: NaN wins
                busy[g] = end
        self.version += 1

    def give_back(self, gpus: np.ndarray, milli: np.ndarray | int) -> None:
        """Return shares held by jobs this cycle evicts (they are free after the grace period)."""
        gpus = np.asarray(gpus, dtype=np.int64)
        uniq, inverse = np.unique(gpus, return_inverse=True)
        add = np.bincount(inverse, weights=np.broadcast_to(milli, gpus.shape)).astype(np.int64)
        before = self.free_milli[uniq].copy()
        self.free_milli[uniq] += add
        if (self.free_milli[uniq] > MILLI).any():
            raise RuntimeError("capacity book gave back more than a GPU holds")
        after = self.free_milli[uniq]
        types = self.layout.gpu_type[uniq]
        np.add.at(self.whole_free_by_type, types[(after == MILLI) & (before < MILLI)], 1)
        np.add.at(self.any_free_by_type, types[(after > 0) & (before == 0)], 1)
        self.version += 1

    def reserve(self, gpus: np.ndarray, start_ts: float, end_ts: float, *, lend: bool = True) -> None:
        """Book a reservation of whole GPUs from ``start_ts`` to ``end_ts``.

        With ``lend=False`` the GPUs are not lent to backfill before ``start_ts`` either.
        """
        if (self.busy_until[gpus] > start_ts + 1e-9).any():
            raise RuntimeError("reservation would double-book a GPU")
        self.reserved_from[gpus] = np.minimum(self.reserved_from[gpus], start_ts if lend else -np.inf)
        self.busy_until[gpus] = np.maximum(self.busy_until[gpus], end_ts)
        self.any_reserved = True
        self.version += 1

    @property
    def total_free_gpus(self) -> float:
        return float(self.free_milli.sum()) / MILLI
