"""Cluster state during a replay: which thousandths of which GPU are held by whom.

Every GPU of the inventory has a global index; ``free_milli[g]`` is how much of GPU ``g`` is free,
in thousandths (1000 = the whole device), so fractional jobs (openb's ``gpu_milli``) and whole-GPU
gangs share one representation. The state only *acts*: it allocates what a plan names and releases
what a job held, and refuses (``PlanError``) anything that would over-allocate a GPU. Choosing where
a job goes is the rules layer's business (``predictor.capacity``).

Allocations are also kept in a *slot table* (``slot_gpu[k]``, ``slot_job[k]``: slot ``k`` says job
``slot_job[k]`` holds part of GPU ``slot_gpu[k]``; ``-1`` marks a free slot), so the running jobs'
allocations can be handed to a snapshot in CSR form with one ``argsort`` instead of a Python loop
over running jobs (:meth:`ClusterState.allocations`). ``version`` counts allocations and releases,
so a caller can reuse what it derived from an unchanged state (the CSR form is cached by it).
"""

from __future__ import annotations

import numpy as np

from predictor.capacity.inventory import Inventory
from predictor.policy.decision import Placement

__all__ = ["PlanError", "ClusterState"]

WHOLE = 1000


class PlanError(RuntimeError):
    """A plan from the rules layer cannot be carried out (unknown node, GPU already taken...).

    This is a bug in the plan, not in the user's input: the replay stops rather than bend the plan.
    """


class ClusterState:
    """Free capacity of every GPU of an inventory.

    Parameters
    ----------
    inventory : Inventory
        The cluster. Nodes without GPUs are kept (they hold no capacity).
    """

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.node_names: tuple[str, ...] = tuple(n.name for n in inventory.nodes)
        self.node_index: dict[str, int] = {name: i for i, name in enumerate(self.node_names)}
        counts = np.array([n.num_gpus for n in inventory.nodes], dtype=np.int64)
        self.gpus_per_node = counts
        self.node_offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.total_gpus = int(counts.sum())
        if self.total_gpus == 0:
            raise ValueError("the inventory has no GPU")
        self.node_of_gpu = np.repeat(np.arange(len(counts)), counts)
        self.free_milli = np.full(self.total_gpus, WHOLE, dtype=np.int64)
        memory = {name: t.memory_mib for name, t in inventory.gpu_types.items()}
        self.node_memory_mib = np.array(
            [memory.get(n.gpu_type, np.nan) if n.gpu_type else np.nan for n in inventory.nodes], dtype="float64"
        )
        self.allocated_milli = 0  # sum over GPUs of (WHOLE - free_milli)
        self.slot_gpu = np.full(self.total_gpus, -1, dtype=np.int64)
        self.slot_job = np.full(self.total_gpus, -1, dtype=np.int64)
        self._free_slots: list[int] = list(range(self.total_gpus - 1, -1, -1))
        self.version = 0  # bumped by every allocate and release
        self._csr: tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def capacity_milli(self) -> int:
        return self.total_gpus * WHOLE

    def could_fit(self, num_gpus: np.ndarray, milli: np.ndarray) -> bool:
        """Whether at least one of the jobs (``num_gpus[i]`` GPUs with ``milli[i]`` thousandths free
        each) has enough GPUs with that much free, anywhere. A necessary condition for starting any of
        them without an eviction, whatever the placement rules (a physical count, not a choice)."""
        if len(num_gpus) == 0:
            return False
        if (milli == WHOLE).all():  # whole-GPU jobs only: count the idle GPUs
            return bool(int(num_gpus.min()) <= np.count_nonzero(self.free_milli == WHOLE))
        free = np.sort(self.free_milli)
        have = len(free) - np.searchsorted(free, milli, side="left")
        return bool((have >= num_gpus).any())

    def free_whole_gpus_per_node(self) -> np.ndarray:
        """Completely free GPUs on each node, shape (n_nodes,)."""
        whole = (self.free_milli == WHOLE).astype(np.int64)
        return np.bincount(self.node_of_gpu, weights=whole, minlength=len(self.node_names)).astype(np.int64)

    def gpus_for(self, placement: Placement, milli: int) -> np.ndarray:
        """Global GPU indices a placement names, checked against the free capacity.

        When the placement lists GPU indices for a node they are used as given; otherwise the
        lowest-numbered GPUs of that node with ``milli`` free are taken (which device inside a node
        is an accounting detail: placement class and node were chosen by the rules layer).

        Raises
        ------
        PlanError
            Unknown node, a GPU index outside the node, or not enough free capacity.
        """
        explicit = dict(placement.gpu_indices)
        chosen: list[np.ndarray] = []
        for node, count in placement.gpus_by_node:
            i = self.node_index.get(node)
            if i is None:
                raise PlanError(f"placement names unknown node {node!r}")
            lo, n = int(self.node_offset[i]), int(self.gpus_per_node[i])
            if node in explicit:
                local = np.asarray(explicit[node], dtype=np.int64)
                if len(local) != count or (local < 0).any() or (local >= n).any():
                    raise PlanError(f"placement on {node}: GPU indices {tuple(local)} do not match {count} of {n} GPUs")
                g = lo + local
                if (self.free_milli[g] < milli).any():
                    raise PlanError(f"placement on {node}: GPUs {tuple(local)} lack {milli} free milli-GPU")
            else:
                fits = (self.free_milli[lo : lo + n] >= milli).nonzero()[0]
                if len(fits) < count:
                    raise PlanError(f"placement wants {count} GPU(s) with {milli} milli free on {node}, {len(fits)} have it")
                g = lo + fits[:count]
            chosen.append(g)
        if len(chosen) == 1 and node not in explicit:
            return chosen[0]  # distinct by construction (the free GPUs of one node)
        gpus = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)
        listed = gpus.tolist()
        if len(set(listed)) != len(listed):
            raise PlanError("placement names the same GPU twice")
        return gpus

    def allocate(self, gpus: np.ndarray, milli: int, job: int) -> np.ndarray:
        """Give job ``job`` ``milli`` of each GPU in ``gpus`` (from :meth:`gpus_for`); return its slots."""
        if (self.free_milli[gpus] < milli).any():
            raise PlanError("allocation would over-allocate a GPU")
        self.free_milli[gpus] -= milli
        self.allocated_milli += milli * len(gpus)
        if len(self._free_slots) < len(gpus):
            self._grow_slots(len(gpus))
        slots = np.array([self._free_slots.pop() for _ in range(len(gpus))], dtype=np.int64)
        self.slot_gpu[slots] = gpus
        self.slot_job[slots] = job
        self.version += 1
        return slots

    def release(self, gpus: np.ndarray, milli: int, slots: np.ndarray) -> None:
        """Give back what :meth:`allocate` took."""
        if (self.slot_gpu[slots] != gpus).any():
            raise PlanError("release of an allocation the slots do not hold")
        self.free_milli[gpus] += milli
        if (self.free_milli[gpus] > WHOLE).any():
            raise PlanError("release of GPUs that were not allocated")
        self.allocated_milli -= milli * len(gpus)
        self.slot_gpu[slots] = -1
        self.slot_job[slots] = -1
        self._free_slots.extend(slots.tolist())
        self.version += 1

    def _grow_slots(self, need: int) -> None:
        old = len(self.slot_gpu)
        extra = max(need, old)
        self.slot_gpu = np.concatenate([self.slot_gpu, np.full(extra, -1, dtype=np.int64)])
        self.slot_job = np.concatenate([self.slot_job, np.full(extra, -1, dtype=np.int64)])
        self._free_slots.extend(range(old + extra - 1, old - 1, -1))

    def allocations(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Running allocations in CSR form.

        Returns
        -------
        jobs : ndarray of int64, shape (n_running,)
            Job rows holding GPUs, ascending.
        offsets : ndarray of int64, shape (n_running + 1,)
        gpus : ndarray of int64
            ``gpus[offsets[i]:offsets[i + 1]]`` are the GPUs of ``jobs[i]``.

        The arrays are shared by every call until the next allocate or release: do not modify them.
        """
        if self._csr is not None and self._csr[0] == self.version:
            return self._csr[1]
        out = self._allocations()
        for a in out:
            a.flags.writeable = False
        self._csr = (self.version, out)
        return out

    def _allocations(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        owner_all = self.slot_job
        used = (owner_all >= 0).nonzero()[0]
        order = used[np.argsort(owner_all[used], kind="stable")]
        owner, gpu = owner_all[order], self.slot_gpu[order]
        if len(owner) == 0:
            return owner, np.zeros(1, dtype=np.int64), gpu
        starts = np.concatenate(([True], owner[1:] != owner[:-1])).nonzero()[0]
        jobs = owner[starts]
        offsets = np.append(starts, len(owner)).astype(np.int64)
        return jobs, offsets, gpu

    def memory_of(self, gpus: np.ndarray) -> float:
        """Smallest GPU memory (MiB) among ``gpus``; NaN when a node's GPU type is unknown."""
        if len(gpus) == 0:
            return float("nan")
        return float(np.min(self.node_memory_mib[self.node_of_gpu[gpus]]))
