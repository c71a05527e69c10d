"""The topology of one GPU node: its CPUs (sockets, cores, NUMA nodes), its GPUs, and the links
between every pair of GPUs, in the vocabulary of ``nvidia-smi topo -m``.

The same model is filled either by NVML discovery on a live node (``predictor.nodeinfo.nvml``) or
from a recorded topology file (``predictor.nodeinfo.records``); everything downstream (the matrix,
CPU pinning plans, the inventory Node) reads only this model.

Link classes between two GPUs, nearest first (``nvidia-smi topo -m`` legend):

``NV#``   a bonded set of # NVLinks (directly, or through NVSwitch);
``PIX``   at most a single PCIe bridge (one PCIe switch);
``PXB``   multiple PCIe bridges, without a PCIe host bridge;
``PHB``   a PCIe host bridge (typically the CPU);
``NODE``  PCIe and the interconnect between host bridges within one NUMA node;
``SYS``   PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from features.schema import PLACEMENT_CLASSES
from predictor.capacity.inventory import KNOWN_GPU_TYPES, Node

__all__ = [
    "PCIE_CLASSES",
    "CpuThread",
    "HostCpus",
    "MigInstance",
    "GpuDevice",
    "NodeTopology",
    "inventory_gpu_type",
]

#: PCIe path classes, nearest first, as ``nvidia-smi topo -m`` prints them.
PCIE_CLASSES: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True, slots=True)
class CpuThread:
    """One logical CPU (hardware thread) as Linux numbers it, and where it sits."""

    cpu: int
    socket: int
    core: int  # physical core id, unique within its socket
    numa_node: int


@dataclass(frozen=True)
class HostCpus:
    """The host's logical CPUs with their socket, physical core and NUMA node."""

    threads: tuple[CpuThread, ...]

    def __post_init__(self) -> None:
        ids = [t.cpu for t in self.threads]
        if len(set(ids)) != len(ids):
            raise ValueError("host CPUs: a CPU id appears twice")
        sockets_of_numa: dict[int, set[int]] = {}
        for t in self.threads:
            sockets_of_numa.setdefault(t.numa_node, set()).add(t.socket)
        split = sorted(n for n, s in sockets_of_numa.items() if len(s) > 1)
        if split:
            raise ValueError(f"host CPUs: NUMA node {split[0]} spans several sockets")
        object.__setattr__(self, "threads", tuple(sorted(self.threads, key=lambda t: t.cpu)))

    @classmethod
    def from_layout(cls, sockets: int, cores_per_socket: int, threads_per_core: int,
                    numa_cpus: Mapping[int, Sequence[int]]) -> HostCpus:
        """Build from the usual Linux enumeration of an x86 server.

        CPU ``t * sockets * cores_per_socket + s * cores_per_socket + c`` is hardware thread ``t`` of
        core ``c`` on socket ``s`` (all first threads, socket by socket, then all second threads),
        which is how Linux numbers the CPUs of the DGX and dual-socket servers recorded here.
        ``numa_cpus`` maps each NUMA node to its CPU ids; every CPU must be in exactly one node.
        """
        if min(sockets, cores_per_socket, threads_per_core) < 1:
            raise ValueError("sockets, cores_per_socket and threads_per_core must be at least 1")
        total_cores = sockets * cores_per_socket
        numa_of: dict[int, int] = {}
        for node, cpus in numa_cpus.items():
            for cpu in cpus:
                if cpu in numa_of:
                    raise ValueError(f"CPU {cpu} is listed in NUMA nodes {numa_of[cpu]} and {node}")
                numa_of[cpu] = int(node)
        expected = total_cores * threads_per_core
        missing = sorted(set(range(expected)) - set(numa_of))
        extra = sorted(set(numa_of) - set(range(expected)))
        if missing or extra:
            bad = f"CPU {missing[0]} is in no NUMA node" if missing else f"CPU {extra[0]} does not exist"
            raise ValueError(f"{bad} ({sockets} sockets x {cores_per_socket} cores x {threads_per_core} threads)")
        threads = []
        for cpu in range(expected):
            flat_core = cpu % total_cores
            threads.append(CpuThread(cpu=cpu, socket=flat_core // cores_per_socket,
                                     core=flat_core % cores_per_socket, numa_node=numa_of[cpu]))
        return cls(threads=tuple(threads))

    @property
    def sockets(self) -> tuple[int, ...]:
        return tuple(sorted({t.socket for t in self.threads}))

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({t.numa_node for t in self.threads}))

    def cpus_of_numa(self, node: int) -> tuple[int, ...]:
        return tuple(t.cpu for t in self.threads if t.numa_node == node)

    def socket_of_numa(self, node: int) -> int:
        for t in self.threads:
            if t.numa_node == node:
                return t.socket
        raise KeyError(f"no NUMA node {node}")

    def thread(self, cpu: int) -> CpuThread:
        for t in self.threads:
            if t.cpu == cpu:
                return t
        raise KeyError(f"no CPU {cpu}")

    def cores(self) -> tuple[tuple[int, int], ...]:
        """Physical cores as ``(socket, core)``, in Slurm's logical core order.

        Slurm numbers cores socket by socket (``Core L#`` of ``lstopo -l``): core 0 is the first core
        of the first socket. Within a socket cores are ordered by their lowest CPU id.
        """
        first_cpu: dict[tuple[int, int], int] = {}
        for t in self.threads:
            key = (t.socket, t.core)
            first_cpu[key] = min(first_cpu.get(key, t.cpu), t.cpu)
        return tuple(sorted(first_cpu, key=lambda k: (k[0], first_cpu[k])))

    def cpus_of_core(self, socket: int, core: int) -> tuple[int, ...]:
        return tuple(t.cpu for t in self.threads if t.socket == socket and t.core == core)

    @property
    def threads_per_core(self) -> int:
        cores = self.cores()
        return max(len(self.cpus_of_core(s, c)) for s, c in cores) if cores else 1


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device carved out of a GPU (profile as ``nvidia-smi -L`` names it, e.g. ``3g.40gb``)."""

    profile: str
    memory_mib: int
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU: identity, memory, NUMA node and CPU affinity, MIG state."""

    index: int
    name: str
    memory_mib: int
    pci_bus_id: str | None = None
    uuid: str | None = None
    numa_node: int | None = None
    cpu_affinity: tuple[int, ...] = ()
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()

    @property
    def gpu_type(self) -> str:
        return inventory_gpu_type(self.name, self.memory_mib)


_TYPE_RULES: tuple[tuple[str, str | None], ...] = (
    # (regex on the NVML name, inventory type or None = decide by memory below)
    (r"\bB200\b", "B200"), (r"\bH200\b", "H200"), (r"\bH100\b", "H100-80GB"),
    (r"\bA100\b", None), (r"\bV100\b", None), (r"\bL40S\b", "L40S"), (r"\bA40\b", "A40"),
    (r"\bA10\b", "A10"), (r"\bT4\b", "T4"), (r"\bP100\b", "P100"), (r"\bK80\b", "K80"),
)


def inventory_gpu_type(nvml_name: str, memory_mib: int) -> str:
    """Map an NVML device name (``NVIDIA A100-SXM4-80GB``) to the inventory's GPU type name.

    A100 and V100 come in two memory sizes; the size decides. Unknown models keep their NVML name
    without the vendor prefix, spaces replaced by dashes.
    """
    for pattern, gpu_type in _TYPE_RULES:
        if re.search(pattern, nvml_name):
            if gpu_type is not None:
                return gpu_type
            if "A100" in pattern:
                return "A100-80GB" if memory_mib > 48_000 else "A100-40GB"
            return "V100M32" if memory_mib > 20_000 else "V100"
    bare = re.sub(r"^(NVIDIA|Tesla)\s+", "", nvml_name.strip())
    return re.sub(r"\s+", "-", bare) or "unknown"


@dataclass(frozen=True)
class NodeTopology:
    """A GPU node: GPUs, pairwise PCIe classes and NVLink counts, host CPUs.

    ``pcie[i][j]`` is the PCIe path class between GPU i and GPU j (``"X"`` on the diagonal);
    ``nvlink[i][j]`` the number of NVLinks joining them (0 when none; through NVSwitch counts).
    """

    hostname: str
    gpus: tuple[GpuDevice, ...]
    pcie: tuple[tuple[str, ...], ...]
    nvlink: tuple[tuple[int, ...], ...]
    host: HostCpus | None = None
    driver_version: str | None = None
    host_memory_mib: int | None = None
    source: str = ""
    title: str = ""

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if [g.index for g in self.gpus] != list(range(n)):
            raise ValueError("gpus: indices must be 0..N-1 in order")
        for name, matrix in (("pcie", self.pcie), ("nvlink", self.nvlink)):
            if len(matrix) != n or any(len(row) != n for row in matrix):
                raise ValueError(f"{name}: must be a {n}x{n} matrix (one row and column per GPU)")
        for i in range(n):
            if self.pcie[i][i] != "X":
                raise ValueError(f"pcie: diagonal entry for GPU{i} must be 'X'")
            for j in range(n):
                if i != j and self.pcie[i][j] not in PCIE_CLASSES:
                    raise ValueError(f"pcie: GPU{i}-GPU{j} is {self.pcie[i][j]!r}; expected one of "
                                     f"{', '.join(PCIE_CLASSES)}")
                if self.pcie[i][j] != self.pcie[j][i] or self.nvlink[i][j] != self.nvlink[j][i]:
                    raise ValueError(f"pcie/nvlink: GPU{i}-GPU{j} differs from GPU{j}-GPU{i}")
                if self.nvlink[i][j] < 0 or (i == j and self.nvlink[i][j] != 0):
                    raise ValueError(f"nvlink: GPU{i}-GPU{j} must be a count >= 0 (0 on the diagonal)")
        if self.host is not None:
            known = set(self.host.numa_nodes)
            for g in self.gpus:
                if g.numa_node is not None and g.numa_node not in known:
                    raise ValueError(f"gpus[{g.index}]: NUMA node {g.numa_node} is not among the host's {sorted(known)}")

    # -- links ---------------------------------------------------------------------------------

    def link(self, i: int, j: int) -> str:
        """The ``nvidia-smi topo -m`` cell for GPU i and GPU j: ``X``, ``NV#`` or a PCIe class."""
        if i == j:
            return "X"
        return f"NV{self.nvlink[i][j]}" if self.nvlink[i][j] > 0 else self.pcie[i][j]

    def nvlink_islands(self) -> tuple[tuple[int, ...], ...]:
        """Groups of two or more GPUs joined (transitively) by NVLink, as the inventory wants them."""
        seen: set[int] = set()
        islands = []
        for start in range(len(self.gpus)):
            if start in seen:
                continue
            group, stack = {start}, [start]
            while stack:
                i = stack.pop()
                for j, count in enumerate(self.nvlink[i]):
                    if count > 0 and j not in group:
                        group.add(j)
                        stack.append(j)
            seen |= group
            if len(group) > 1:
                islands.append(tuple(sorted(group)))
        return tuple(islands)

    def placement_class(self, gpu_indices: Sequence[int]) -> str:
        """Placement class of a gang on these GPUs: the worst link any pair of them crosses."""
        idx = sorted(set(gpu_indices))
        if any(i < 0 or i >= len(self.gpus) for i in idx):
            raise ValueError(f"GPU indices {idx} outside 0..{len(self.gpus) - 1}")
        pairs = [(a, b) for k, a in enumerate(idx) for b in idx[k + 1:]]
        if all(self.nvlink[a][b] > 0 for a, b in pairs):
            return PLACEMENT_CLASSES[0]
        if all(self.pcie[a][b] != "SYS" or self.nvlink[a][b] > 0 for a, b in pairs):
            return PLACEMENT_CLASSES[1]
        return PLACEMENT_CLASSES[2]

    # -- inventory -----------------------------------------------------------------------------

    @property
    def gpu_type(self) -> str | None:
        """The inventory GPU type when all GPUs are the same model, else None."""
        types = {g.gpu_type for g in self.gpus}
        return types.pop() if len(types) == 1 else None

    def to_inventory_node(self, name: str | None = None, rack: str | None = None,
                          block: str | None = None, mem_mib: int | None = None) -> Node:
        """The ``predictor.capacity.inventory.Node`` record for this machine."""
        numa = tuple(g.numa_node if g.numa_node is not None else -1 for g in self.gpus)
        return Node(
            name=name or self.hostname,
            gpu_type=self.gpu_type if self.gpus else None,
            num_gpus=len(self.gpus),
            nvlink_islands=self.nvlink_islands(),
            numa_of_gpu=numa if all(n >= 0 for n in numa) else (),
            rack=rack,
            block=block,
            cpus=len(self.host.threads) if self.host else None,
            mem_mib=mem_mib if mem_mib is not None else self.host_memory_mib,
        )

    def inventory_entry(self, name: str | None = None, rack: str | None = None,
                        block: str | None = None) -> dict:
        """This node as an entry of an inventory YAML file (``predictor.capacity.inventory_sources``)."""
        node = self.to_inventory_node(name=name, rack=rack, block=block)
        entry: dict = {"name": node.name, "gpu_type": node.gpu_type, "gpus": node.num_gpus,
                       "nvlink_islands": [list(i) for i in node.nvlink_islands] or "none"}
        if node.numa_of_gpu:
            entry["numa_of_gpu"] = list(node.numa_of_gpu)
        for key, value in (("rack", node.rack), ("block", node.block), ("cpus", node.cpus), ("mem_mib", node.mem_mib)):
            if value is not None:
                entry[key] = value
        return entry

    def gpu_types_used(self) -> dict[str, int]:
        """Memory (MiB) of each inventory GPU type present, for the inventory's ``gpu_types``."""
        out: dict[str, int] = {}
        for g in self.gpus:
            known = KNOWN_GPU_TYPES.get(g.gpu_type)
            out[g.gpu_type] = known.memory_mib if known else g.memory_mib
        return out
