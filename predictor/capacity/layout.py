"""The inventory compiled into flat arrays, so placement and accounting are numpy operations.

Every GPU of the cluster gets a global index ``0 .. n_gpus - 1``; the GPUs of one node are
contiguous (``node_first_gpu[n] .. node_first_gpu[n] + node_gpus[n] - 1``, in the node's local
order). Three nested groupings sit on top of them, each a "unit" a gang may be confined to:

* NVLink island (``gpu_island``; ``-1`` for a GPU outside any island),
* NUMA domain (``gpu_numa``; ``-1`` where the node does not say which NUMA node a GPU hangs off),
* node (``gpu_node``), and above nodes the rack (``node_rack``; ``-1`` where unknown).

Placement classes (``features.schema.PLACEMENT_CLASSES``) follow from these: a set of GPUs is
``nvlink`` when it is one GPU or lies inside one island, ``pcie_same_numa`` inside one NUMA domain,
``cross_numa`` inside one node, ``cross_node_same_rack`` inside one known rack, else ``cross_rack``.
Unknown topology never claims a better class than it can prove.

A layout is immutable and built once per inventory (``ClusterLayout.of(inventory)`` caches it).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import Inventory

__all__ = ["ClusterLayout", "NVLINK", "SAME_NUMA", "CROSS_NUMA", "SAME_RACK", "CROSS_RACK", "MILLI"]

#: Placement class indices into ``PLACEMENT_CLASSES`` (0 is best).
NVLINK, SAME_NUMA, CROSS_NUMA, SAME_RACK, CROSS_RACK = range(5)
#: Thousandths of one GPU: the unit of GPU sharing (``gpu_milli``).
MILLI = 1000

assert len(PLACEMENT_CLASSES) == 5


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class ClusterLayout:
    """Array form of an :class:`Inventory` (see the module docstring for the index conventions).

    Attributes
    ----------
    gpu_types : tuple of str
        GPU types present, cheapest first (cost per GPU-hour, then memory, then name); a type's
        code is its position here.
    type_memory_mib, type_cost : ndarray of shape (n_types,)
    node_names : tuple of str
    node_type : ndarray of shape (n_nodes,)
        Type code of each node's GPUs, ``-1`` for nodes without GPUs.
    node_gpus, node_first_gpu, node_rack : ndarray of shape (n_nodes,)
    gpu_node, gpu_local, gpu_island, gpu_numa, gpu_type : ndarray of shape (n_gpus,)
    island_gpus, numa_gpus : tuple of ndarray
        The global GPU indices of each island / NUMA domain.
    """

    inventory: Inventory
    gpu_types: tuple[str, ...]
    type_memory_mib: np.ndarray
    type_cost: np.ndarray
    node_names: tuple[str, ...]
    node_type: np.ndarray
    node_gpus: np.ndarray
    node_first_gpu: np.ndarray
    node_rack: np.ndarray
    rack_names: tuple[str, ...]
    gpu_node: np.ndarray
    gpu_local: np.ndarray
    gpu_island: np.ndarray
    gpu_numa: np.ndarray
    gpu_type: np.ndarray
    island_gpus: tuple[np.ndarray, ...]
    numa_gpus: tuple[np.ndarray, ...]

    _cache: ClassVar[dict[int, tuple[weakref.ref, ClusterLayout]]] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def of(cls, inventory: Inventory) -> ClusterLayout:
        """The layout of ``inventory``, compiled once and cached while the inventory object lives."""
        key = id(inventory)
        hit = cls._cache.get(key)
        if hit is not None and hit[0]() is inventory:
            return hit[1]
        layout = cls._compile(inventory)

        def forget(ref: weakref.ref, key: int = key) -> None:
            if cls._cache.get(key, (None,))[0] is ref:
                del cls._cache[key]

        cls._cache[key] = (weakref.ref(inventory, forget), layout)
        return layout

    @classmethod
    def _compile(cls, inv: Inventory) -> ClusterLayout:
        present = sorted(
            {n.gpu_type for n in inv.nodes if n.gpu_type and n.num_gpus > 0},
            key=lambda t: (inv.gpu_types[t].cost_per_hour, inv.gpu_types[t].memory_mib, t),
        )
        type_code = {t: i for i, t in enumerate(present)}
        racks = sorted({n.rack for n in inv.nodes if n.rack is not None})
        rack_code = {r: i for i, r in enumerate(racks)}

        node_type, node_gpus, node_first, node_rack = [], [], [], []
        gpu_node, gpu_local, gpu_island, gpu_numa = [], [], [], []
        island_gpus: list[np.ndarray] = []
        numa_gpus: list[np.ndarray] = []
        first = 0
        for ni, node in enumerate(inv.nodes):
            count = node.num_gpus if node.gpu_type else 0
            node_type.append(type_code[node.gpu_type] if count else -1)
            node_gpus.append(count)
            node_first.append(first)
            node_rack.append(rack_code[node.rack] if node.rack is not None else -1)
            island_of = [-1] * count
            for isl in node.nvlink_islands:
                members = [g for g in isl if 0 <= g < count]
                if not members:
                    continue
                for g in members:
                    island_of[g] = len(island_gpus)
                island_gpus.append(np.array([first + g for g in members], dtype=np.int64))
            numa_of = [-1] * count
            if len(node.numa_of_gpu) == count and count:
                local_numa: dict[int, int] = {}
                for g, numa in enumerate(node.numa_of_gpu):
                    if numa not in local_numa:
                        local_numa[numa] = len(numa_gpus) + len(local_numa)
                    numa_of[g] = local_numa[numa]
                for numa, _gid in sorted(local_numa.items(), key=lambda kv: kv[1]):
                    members = [first + g for g, m in enumerate(node.numa_of_gpu) if m == numa]
                    numa_gpus.append(np.array(members, dtype=np.int64))
            for g in range(count):
                gpu_node.append(ni)
                gpu_local.append(g)
                gpu_island.append(island_of[g])
                gpu_numa.append(numa_of[g])
            first += count

        node_type_a = np.array(node_type, dtype=np.int64)
        gpu_node_a = np.array(gpu_node, dtype=np.int64)
        return cls(
            inventory=inv,
            gpu_types=tuple(present),
            type_memory_mib=_frozen(np.array([inv.gpu_types[t].memory_mib for t in present], dtype=np.float64)),
            type_cost=_frozen(np.array([inv.gpu_types[t].cost_per_hour for t in present], dtype=np.float64)),
            node_names=tuple(n.name for n in inv.nodes),
            node_type=_frozen(node_type_a),
            node_gpus=_frozen(np.array(node_gpus, dtype=np.int64)),
            node_first_gpu=_frozen(np.array(node_first, dtype=np.int64)),
            node_rack=_frozen(np.array(node_rack, dtype=np.int64)),
            rack_names=tuple(racks),
            gpu_node=_frozen(gpu_node_a),
            gpu_local=_frozen(np.array(gpu_local, dtype=np.int64)),
            gpu_island=_frozen(np.array(gpu_island, dtype=np.int64)),
            gpu_numa=_frozen(np.array(gpu_numa, dtype=np.int64)),
            gpu_type=_frozen(node_type_a[gpu_node_a] if len(gpu_node_a) else np.zeros(0, dtype=np.int64)),
            island_gpus=tuple(_frozen(a) for a in island_gpus),
            numa_gpus=tuple(_frozen(a) for a in numa_gpus),
        )

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def n_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_types(self) -> int:
        return len(self.gpu_types)

    def type_index(self, name: str) -> int:
        """Code of GPU type ``name``; ``-1`` when the cluster has none of it."""
        try:
            return self.gpu_types.index(name)
        except ValueError:
            return -1

    def gpus_of_type(self) -> np.ndarray:
        """GPU count per type code, shape (n_types,)."""
        return self._gpus_of_type

    @cached_property
    def _gpus_of_type(self) -> np.ndarray:
        return _frozen(np.bincount(self.gpu_type, minlength=self.n_types))

    def max_gang_per_class(self) -> np.ndarray:
        """Largest gang each placement class can hold on an empty cluster, shape (n_types, 5)."""
        out = np.zeros((self.n_types, 5), dtype=np.int64)
        for t in range(self.n_types):
            of_t = self.gpu_type == t
            isl = [len(g) for g in self.island_gpus if len(g) and self.gpu_type[g[0]] == t]
            numa = [len(g) for g in self.numa_gpus if len(g) and self.gpu_type[g[0]] == t]
            nodes = self.node_gpus[self.node_type == t]
            racks = np.bincount(self.node_rack[(self.node_type == t) & (self.node_rack >= 0)],
                                weights=self.node_gpus[(self.node_type == t) & (self.node_rack >= 0)])
            single = 1 if of_t.any() else 0
            out[t, NVLINK] = max([single, *isl])
            out[t, SAME_NUMA] = max([out[t, NVLINK], *numa])
            out[t, CROSS_NUMA] = max(out[t, SAME_NUMA], int(nodes.max()) if len(nodes) else 0)
            out[t, SAME_RACK] = max(out[t, CROSS_NUMA], int(racks.max()) if len(racks) else 0)
            out[t, CROSS_RACK] = int(of_t.sum())
        return out

    def placement_class(self, gpus: np.ndarray) -> int:
        """Placement class index of a set of global GPU indices (the worst link it crosses)."""
        gpus = np.asarray(gpus, dtype=np.int64)
        if len(gpus) <= 1:
            return NVLINK
        isl = self.gpu_island[gpus]
        if isl[0] >= 0 and (isl == isl[0]).all():
            return NVLINK
        numa = self.gpu_numa[gpus]
        if numa[0] >= 0 and (numa == numa[0]).all():
            return SAME_NUMA
        nodes = self.gpu_node[gpus]
        if (nodes == nodes[0]).all():
            return CROSS_NUMA
        racks = self.node_rack[nodes]
        if racks[0] >= 0 and (racks == racks[0]).all():
            return SAME_RACK
        return CROSS_RACK

    def gpus_by_node(self, gpus: np.ndarray) -> tuple[tuple[str, int], ...]:
        """``((node name, count), ...)`` for a set of global GPU indices, in node order."""
        counts: dict[int, int] = {}
        for n in self.gpu_node[np.asarray(gpus, dtype=np.int64)].tolist():
            counts[n] = counts.get(n, 0) + 1
        return tuple((self.node_names[n], c) for n, c in sorted(counts.items()))

    def gpu_indices_by_node(self, gpus: np.ndarray) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """``((node name, (local GPU index, ...)), ...)`` for a set of global GPU indices."""
        gpus = np.sort(np.asarray(gpus, dtype=np.int64))
        out: dict[int, list[int]] = {}
        for n, local in zip(self.gpu_node[gpus].tolist(), self.gpu_local[gpus].tolist(), strict=True):
            out.setdefault(n, []).append(local)
        return tuple((self.node_names[n], tuple(v)) for n, v in out.items())

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Node name -> node index."""
        return {name: i for i, name in enumerate(self.node_names)}

    @cached_property
    def type_masks(self) -> np.ndarray:
        """Boolean mask of each type's GPUs, shape (n_types, n_gpus)."""
        masks = self.gpu_type[None, :] == np.arange(self.n_types)[:, None]
        return _frozen(masks)

    @cached_property
    def unit_matrices(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per level (island, NUMA domain, node, rack): ``(members, unit_type)``.

        ``members`` has shape (n_units, widest unit) holding global GPU indices padded with -1;
        ``unit_type`` the GPU type code of each unit (units are single-type except racks, whose rows
        are split by type). Used to find, per level, when some unit first has g GPUs free.
        """
        racks: list[np.ndarray] = []
        for r in range(len(self.rack_names)):
            nodes = np.flatnonzero(self.node_rack == r)
            for t in range(self.n_types):
                members = [np.arange(self.node_first_gpu[n], self.node_first_gpu[n] + self.node_gpus[n])
                           for n in nodes if self.node_type[n] == t]
                if members:
                    racks.append(np.concatenate(members))
        nodes = [np.arange(self.node_first_gpu[n], self.node_first_gpu[n] + self.node_gpus[n])
                 for n in range(self.n_nodes) if self.node_gpus[n] > 0]
        out = []
        for units in (list(self.island_gpus), list(self.numa_gpus), nodes, racks):
            width = max((len(u) for u in units), default=0)
            members = np.full((len(units), width), -1, dtype=np.int64)
            for i, u in enumerate(units):
                members[i, :len(u)] = u
            types = np.array([self.gpu_type[u[0]] for u in units], dtype=np.int64)
            out.append((_frozen(members), _frozen(types)))
        return tuple(out)

    def gpu_index(self, node: str, local: int) -> int:
        """Global index of GPU ``local`` on node ``node``."""
        n = self.node_index.get(node)
        if n is None:
            raise KeyError(f"no node named {node!r} in the inventory")
        if not 0 <= local < self.node_gpus[n]:
            raise KeyError(f"node {node} has {int(self.node_gpus[n])} GPUs; no GPU {local}")
        return int(self.node_first_gpu[n] + local)
