"""Gang placement: pick all of a job's GPUs at once, in the best placement class available.

Rule *best-class placement* (the default strategy): among the GPUs the caller marks usable (all of
one GPU type), try, best first,

1. one NVLink island holding the whole gang (the island with the fewest usable GPUs that still fits:
   best fit, which keeps large islands whole for large gangs);
2. one NUMA domain (best fit);
3. one node (best fit);
4. one rack (best fit), filling its nodes with the most usable GPUs first (fewest nodes);
5. anywhere: racks with the most usable GPUs first, then their fullest nodes.

A single GPU is always ``nvlink`` (it talks to nobody); it goes to the GPU whose node has the fewest
usable GPUs (best fit), or for a GPU share (``gpu_milli < 1000``) to the usable GPU with the least
free share (packing shares, as the openb trace's cluster does). ``max_class`` stops the search at a
class, which is how callers ask "is an NVLink placement possible?".

Rule *first fit* (the status-quo strategy of a topology-unaware scheduler): the first usable GPUs in
inventory order, whatever class that makes.

Cost: O(n_gpus) per call (a few ``bincount`` passes over the usable mask), independent of the
number of jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from predictor.capacity.layout import CROSS_NUMA, CROSS_RACK, NVLINK, SAME_NUMA, SAME_RACK, ClusterLayout

__all__ = ["GangChoice", "find_gang", "GangMemo", "STRATEGIES"]

STRATEGIES: tuple[str, ...] = ("best_class", "first_fit")


@dataclass(frozen=True, slots=True)
class GangChoice:
    """A feasible set of GPUs for a gang and the placement class it lands in."""

    gpus: np.ndarray  # global GPU indices, sorted
    placement_class: int


def _choice(layout: ClusterLayout, gpus: np.ndarray) -> GangChoice:
    gpus = np.sort(gpus)
    return GangChoice(gpus=gpus, placement_class=layout.placement_class(gpus))


def _best_fit_unit(counts: np.ndarray, need: int) -> int:
    """Index of the unit with the fewest usable GPUs that still holds ``need``; -1 when none does."""
    ok = counts >= need
    if not ok.any():
        return -1
    masked = np.where(ok, counts, np.iinfo(np.int64).max)
    return int(np.argmin(masked))


def _take_from(units: tuple[np.ndarray, ...], unit: int, usable: np.ndarray, need: int) -> np.ndarray:
    members = units[unit]
    return members[usable[members]][:need]


def _fill_nodes(layout: ClusterLayout, usable: np.ndarray, node_order: np.ndarray,
                node_counts: np.ndarray, need: int) -> np.ndarray:
    """Take usable GPUs node by node in ``node_order`` until ``need`` are taken."""
    counts = node_counts[node_order]
    upto = int(np.searchsorted(np.cumsum(counts), need)) + 1
    taken: list[np.ndarray] = []
    left = need
    for n in node_order[:upto].tolist():
        first = layout.node_first_gpu[n]
        local = usable[first:first + layout.node_gpus[n]].nonzero()[0] + first
        taken.append(local[:left])
        left -= len(taken[-1])
        if left <= 0:
            break
    return np.concatenate(taken)


def find_gang(layout: ClusterLayout, usable: np.ndarray, num_gpus: int, *,
              max_class: int = CROSS_RACK, strategy: str = "best_class",
              free_milli: np.ndarray | None = None) -> GangChoice | None:
    """Choose ``num_gpus`` GPUs among ``usable`` (see the module docstring for the rules).

    Parameters
    ----------
    layout : ClusterLayout
    usable : ndarray of bool, shape (n_gpus,)
        GPUs this gang may use; the caller restricts it to one GPU type (gangs are homogeneous).
    num_gpus : int
        Gang size, at least 1.
    max_class : int
        Worst placement class accepted (index into ``PLACEMENT_CLASSES``).
    strategy : {"best_class", "first_fit"}
    free_milli : ndarray of shape (n_gpus,), optional
        Free share of each GPU; given for GPU-share jobs so one GPU goes to the fullest GPU.

    Returns
    -------
    GangChoice or None
        None when no set of usable GPUs within ``max_class`` exists.
    """
    need = int(num_gpus)
    if need < 1:
        raise ValueError(f"a gang needs at least one GPU, got {num_gpus}")
    if strategy == "first_fit":
        cand = usable.nonzero()[0][:need]
        if len(cand) < need:
            return None
        choice = _choice(layout, cand)
        return choice if choice.placement_class <= max_class else None

    if need == 1:
        cand = usable.nonzero()[0]
        if len(cand) == 0:
            return None
        if free_milli is not None:
            pick = cand[np.argmin(free_milli[cand])]
        else:
            per_node = np.bincount(layout.gpu_node[cand], minlength=layout.n_nodes)
            pick = cand[np.argmin(per_node[layout.gpu_node[cand]])]
        return GangChoice(gpus=np.array([pick], dtype=np.int64), placement_class=NVLINK)

    idx = usable.nonzero()[0]  # the method: np.flatnonzero's two Python-level wrappers cost more on 1-D masks
    if len(idx) < need:
        return None
    node_counts = np.bincount(layout.gpu_node[idx], minlength=layout.n_nodes)
    if node_counts.max() >= need:
        for level, gpu_unit, units in (
            (NVLINK, layout.gpu_island, layout.island_gpus),
            (SAME_NUMA, layout.gpu_numa, layout.numa_gpus),
        ):
            if level > max_class:
                return None
            unit_ids = gpu_unit[idx]
            known = unit_ids >= 0
            if known.any():
                counts = np.bincount(unit_ids[known], minlength=len(units))
                unit = _best_fit_unit(counts, need)
                if unit >= 0:
                    return GangChoice(gpus=np.sort(_take_from(units, unit, usable, need)), placement_class=level)
        if CROSS_NUMA > max_class:
            return None
        node = _best_fit_unit(node_counts, need)
        first = layout.node_first_gpu[node]
        local = usable[first:first + layout.node_gpus[node]].nonzero()[0][:need] + first
        return _choice(layout, local)
    if max_class < SAME_RACK:
        return None

    in_rack = layout.node_rack >= 0
    rack_counts = np.bincount(layout.node_rack[in_rack], weights=node_counts[in_rack],
                              minlength=len(layout.rack_names)).astype(np.int64)
    rack = _best_fit_unit(rack_counts, need) if len(rack_counts) else -1
    if rack >= 0:
        nodes = np.flatnonzero((layout.node_rack == rack) & (node_counts > 0))
        order = nodes[np.argsort(-node_counts[nodes], kind="stable")]
        return _choice(layout, _fill_nodes(layout, usable, order, node_counts, need))
    if max_class < CROSS_RACK:
        return None
    nodes = np.flatnonzero(node_counts > 0)
    rack_of = layout.node_rack[nodes]
    rack_total = np.where(rack_of >= 0, rack_counts[np.maximum(rack_of, 0)] if len(rack_counts) else 0,
                          node_counts[nodes])
    order = nodes[np.lexsort((-node_counts[nodes], rack_of, -rack_total))]
    return _choice(layout, _fill_nodes(layout, usable, order, node_counts, need))


class GangMemo:
    """``find_gang`` remembered across calls: a pure function of the usable mask, the gang size, the
    class limit, the strategy and (for a single GPU share) the usable GPUs' free shares, so a search
    asked again on the same capacity picture returns the first answer (the replay asks the same
    searches cycle after cycle while the cluster has not changed). Bounded: forgets everything past
    ``max_entries``. The chosen GPU arrays are shared and read-only.

    :meth:`recall` / :meth:`remember` keep other pure functions of one per-GPU array the same way
    (``CycleContext.best_class_now``'s free maxima, keyed by the free shares).
    """

    def __init__(self, layout: ClusterLayout, max_entries: int = 8192) -> None:
        self.layout = layout
        self.max_entries = max_entries
        self._memo: dict[tuple, GangChoice | None] = {}
        self.hits = self.misses = 0

    def find(self, usable: np.ndarray, num_gpus: int, *, max_class: int = CROSS_RACK, strategy: str = "best_class",
             free_milli: np.ndarray | None = None) -> GangChoice | None:
        """``find_gang(self.layout, usable, ...)``, remembered."""
        share = None if free_milli is None or int(num_gpus) != 1 or strategy == "first_fit" \
            else free_milli[usable].tobytes()
        key = (usable.tobytes(), int(num_gpus), int(max_class), strategy, share)
        memo = self._memo
        if key in memo:
            self.hits += 1
            return memo[key]
        self.misses += 1
        choice = find_gang(self.layout, usable, num_gpus, max_class=max_class, strategy=strategy, free_milli=free_milli)
        if choice is not None:
            choice.gpus.flags.writeable = False
        if len(memo) >= self.max_entries:
            memo.clear()
        memo[key] = choice
        return choice

    def recall(self, what: str, of: np.ndarray):
        """What :meth:`remember` kept for ``what`` of an equal array ``of``, else None."""
        hit = self._memo.get((what, of.tobytes()))
        if hit is None:
            self.misses += 1
        else:
            self.hits += 1
        return hit

    def remember(self, what: str, of: np.ndarray, value) -> None:
        if len(self._memo) >= self.max_entries:
            self._memo.clear()
        self._memo[(what, of.tobytes())] = value
