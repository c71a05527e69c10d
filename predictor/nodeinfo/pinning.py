"""CPU pinning plans: which cores each GPU's job should run on, for Slurm and for Kubernetes.

Rules (applied in this order):

1. *Reserve* ``reserved_cores_per_socket`` physical cores on every socket (both hardware threads)
   for the OS, interrupts and daemons. Cores on NUMA nodes that host no GPU are taken first (they
   cost GPU jobs nothing), then the lowest-numbered cores.
2. A GPU's *local CPUs* are the CPUs of its NUMA node (its CPU affinity where the NUMA node is
   unknown), minus the reserved ones.
3. For per-rank binding, the GPUs of one NUMA node split its local cores into disjoint, contiguous
   shares (all threads of a core stay together).

Slurm reads core numbers as *logical core indices* (gres.conf ``Cores=``: core 0 is the first core
of the first socket, as ``lstopo -l`` numbers them) and ``CpuSpecList`` as abstract CPU ids;
``--cpu-bind=map_cpu``/``mask_cpu`` and kubelet's ``reservedSystemCPUs`` take OS CPU ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from features.errors import InputError
from predictor.nodeinfo.cpulist import cpumask_hex, format_cpulist
from predictor.nodeinfo.topology import HostCpus, NodeTopology

__all__ = ["GpuPinning", "PinningPlan", "plan_pinning", "slurm_gpu_type", "slurm_node_line"]


@dataclass(frozen=True, slots=True)
class GpuPinning:
    """Where one GPU's work should run."""

    gpu: int
    numa_node: int | None
    local_cpus: tuple[int, ...]  # OS CPU ids near the GPU, reserved ones removed
    rank_cpus: tuple[int, ...]  # this GPU's disjoint share of local_cpus (per-rank binding)
    slurm_cores: tuple[int, ...]  # Slurm logical core indices of local_cpus (gres.conf Cores=)


def slurm_gpu_type(gpu_type: str) -> str:
    """A GRES type name Slurm accepts: lower case, letters, digits, ``-`` and ``_``."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in gpu_type.lower())


def slurm_node_line(topo: NodeTopology, node_name: str | None = None, cpu_spec_list: str = "") -> str:
    """The ``slurm.conf`` NodeName line of ``topo`` (sockets, cores, threads, GPUs), with
    ``CpuSpecList=cpu_spec_list`` when one is given (Slurm abstract CPU ids)."""
    if topo.host is None:
        raise InputError("the topology has no host CPU information (host:), so no slurm.conf node line can be made")
    h = topo.host
    sockets = len(h.sockets)
    types: dict[str, int] = {}
    for g in topo.gpus:
        t = slurm_gpu_type(g.gpu_type)
        types[t] = types.get(t, 0) + 1
    gres = ",".join(f"gpu:{t}:{n}" for t, n in types.items())
    line = (f"NodeName={node_name or topo.hostname} Sockets={sockets} "
            f"CoresPerSocket={len(h.cores()) // sockets} ThreadsPerCore={h.threads_per_core}")
    if gres:
        line += f" Gres={gres}"
    if cpu_spec_list:
        line += f" CpuSpecList={cpu_spec_list}"
    return line


@dataclass(frozen=True)
class PinningPlan:
    """A node's CPU pinning plan, with renderers for Slurm and Kubernetes configuration."""

    topology: NodeTopology
    reserved_cores_per_socket: int
    reserved_cpus: tuple[int, ...]
    gpus: tuple[GpuPinning, ...]

    @property
    def host(self) -> HostCpus:
        assert self.topology.host is not None
        return self.topology.host

    # -- Slurm ---------------------------------------------------------------------------------

    def gres_conf_lines(self, node_name: str | None = None, device_pattern: str = "/dev/nvidia{index}") -> list[str]:
        """``gres.conf`` lines, one per GPU, with ``Cores=`` GPU affinity (Slurm logical core ids)."""
        name = node_name or self.topology.hostname
        lines = []
        for g, pin in zip(self.topology.gpus, self.gpus, strict=True):
            lines.append(f"NodeName={name} Name=gpu Type={slurm_gpu_type(g.gpu_type)} "
                         f"File={device_pattern.format(index=g.index)} Cores={format_cpulist(pin.slurm_cores)}")
        return lines

    def cpu_spec_list(self) -> str:
        """Slurm ``CpuSpecList`` (abstract CPU ids, one per reserved core) for the reserved cores."""
        index = {core: i for i, core in enumerate(self.host.cores())}
        tpc = self.host.threads_per_core
        ids = sorted({index[(self.host.thread(c).socket, self.host.thread(c).core)] * tpc for c in self.reserved_cpus})
        return ",".join(str(i) for i in ids)

    def slurm_node_line(self, node_name: str | None = None) -> str:
        """The ``slurm.conf`` NodeName line matching this topology, with the reserved cores."""
        return slurm_node_line(self.topology, node_name, self.cpu_spec_list() if self.reserved_cpus else "")

    def srun_cpu_bind_map(self) -> str:
        """``--cpu-bind=map_cpu:`` binding local rank i (driving GPU i) to one CPU of its share."""
        return "--cpu-bind=map_cpu:" + ",".join(str(p.rank_cpus[0]) for p in self.gpus)

    def srun_cpu_bind_mask(self) -> str:
        """``--cpu-bind=mask_cpu:`` giving local rank i (driving GPU i) all CPUs of its share."""
        return "--cpu-bind=mask_cpu:" + ",".join(cpumask_hex(p.rank_cpus) for p in self.gpus)

    # -- Kubernetes ----------------------------------------------------------------------------

    def kubelet_config(self) -> dict[str, Any]:
        """KubeletConfiguration fields for CPU manager and Topology Manager on this node."""
        gpu_numa = {p.numa_node for p in self.gpus if p.numa_node is not None}
        numa_count = len(self.host.numa_nodes)
        cfg: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": format_cpulist(self.reserved_cpus),
            # single-numa-node only when every GPU is on one NUMA node; otherwise a pod asking for
            # GPUs of several NUMA nodes must still be admitted on the narrowest set: restricted.
            "topologyManagerPolicy": "single-numa-node" if len(gpu_numa) <= 1 else "restricted",
            "topologyManagerScope": "pod",
        }
        if self.host.threads_per_core > 1:
            cfg["cpuManagerPolicyOptions"] = {"full-pcpus-only": "true"}
        options = {}
        if numa_count > 2:
            options["prefer-closest-numa-nodes"] = "true"
        if numa_count > 8:  # Topology Manager refuses nodes with more NUMA nodes unless raised
            options["max-allowable-numa-nodes"] = str(numa_count)
        if options:
            cfg["topologyManagerPolicyOptions"] = options
        return cfg


def _reserved(host: HostCpus, topo: NodeTopology, per_socket: int) -> tuple[int, ...]:
    gpu_numa = {g.numa_node for g in topo.gpus if g.numa_node is not None}
    reserved: list[int] = []
    for socket in host.sockets:
        cores = [(s, c) for s, c in host.cores() if s == socket]
        if per_socket >= len(cores):
            raise InputError(f"cannot reserve {per_socket} cores per socket: socket {socket} has {len(cores)}")

        def rank(core: tuple[int, int]) -> tuple[bool, int]:
            cpus = host.cpus_of_core(*core)
            return (host.thread(cpus[0]).numa_node in gpu_numa, min(cpus))

        for core in sorted(cores, key=rank)[:per_socket]:
            reserved.extend(host.cpus_of_core(*core))
    return tuple(sorted(reserved))


def _split(cores: list[tuple[int, int]], parts: int) -> list[list[tuple[int, int]]]:
    """Split cores into ``parts`` contiguous shares (sizes differ by at most one; shared if too few)."""
    if len(cores) < parts:
        return [[cores[k % len(cores)]] for k in range(parts)]
    base, extra = divmod(len(cores), parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append(cores[start:start + size])
        start += size
    return out


def plan_pinning(topo: NodeTopology, reserved_cores_per_socket: int = 2) -> PinningPlan:
    """Compute the CPU pinning plan of ``topo`` (see the module docstring for the rules).

    Raises
    ------
    InputError
        When the topology has no host CPU information, or a GPU is left with no CPU.
    """
    if topo.host is None:
        raise InputError("the topology has no host CPU information (host:), so no pinning plan can be made")
    if reserved_cores_per_socket < 0:
        raise InputError(f"reserved cores per socket must be >= 0, got {reserved_cores_per_socket}")
    host = topo.host
    reserved = _reserved(host, topo, reserved_cores_per_socket)
    reserved_set = set(reserved)
    core_index = {core: i for i, core in enumerate(host.cores())}
    local: dict[int, tuple[int, ...]] = {}
    for g in topo.gpus:
        if g.numa_node is not None:
            cpus = host.cpus_of_numa(g.numa_node)
        else:
            known = {t.cpu for t in host.threads}
            cpus = tuple(c for c in g.cpu_affinity if c in known)
        usable = tuple(c for c in cpus if c not in reserved_set)
        if not usable:
            raise InputError(f"GPU{g.index}: no CPU left near it after reserving {reserved_cores_per_socket} "
                             "cores per socket (lower --reserve-cores)")
        local[g.index] = usable

    # Per-rank shares: GPUs with the same local CPUs split them core by core.
    groups: dict[tuple[int, ...], list[int]] = {}
    for g in topo.gpus:
        groups.setdefault(local[g.index], []).append(g.index)
    rank_cpus: dict[int, tuple[int, ...]] = {}
    for cpus, members in groups.items():
        cores = sorted({(host.thread(c).socket, host.thread(c).core) for c in cpus}, key=core_index.__getitem__)
        for gpu, share in zip(members, _split(cores, len(members)), strict=True):
            rank_cpus[gpu] = tuple(sorted(c for core in share for c in host.cpus_of_core(*core) if c in cpus))

    pins = tuple(
        GpuPinning(
            gpu=g.index,
            numa_node=g.numa_node,
            local_cpus=local[g.index],
            rank_cpus=rank_cpus[g.index],
            slurm_cores=tuple(sorted({core_index[(host.thread(c).socket, host.thread(c).core)] for c in local[g.index]})),
        )
        for g in topo.gpus
    )
    return PinningPlan(topology=topo, reserved_cores_per_socket=reserved_cores_per_socket,
                       reserved_cpus=reserved, gpus=pins)
