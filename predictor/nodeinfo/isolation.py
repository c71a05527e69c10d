"""CPU isolation plans: which CPUs of a GPU node stay with the operating system (*housekeeping*) and
which are isolated for jobs, and the settings an admin applies for it (kernel command line, irqbalance,
systemd, Slurm, kubelet), all derived from the node's topology.

What it is for: the article this product started from reports that CPU pinning cut context switches
by 96 % and that full isolation (isolcpus + IRQ affinity) gained 15-20 % for latency-sensitive jobs.
Those are the article's figures, quoted as the purpose of the plan; nothing here measured them.

Rules (applied in this order):

1. *Housekeeping*: the first ``housekeeping_cores`` physical cores (every hardware thread of each) of
   every NUMA node, lowest CPU ids first, or an explicit CPU list widened to whole cores. Every NUMA
   node keeps one (its kernel threads and the interrupts of its devices stay local, and a managed
   interrupt needs a housekeeping CPU in its mask), the boot CPU is one (the kernel keeps it for
   timekeeping: ``nohz_full`` drops it), and at least one core is isolated.
2. *Isolated*: every other CPU. Sets are made of whole cores, so SMT siblings stay together.
3. *GPU-local*: a GPU's jobs get the isolated CPUs of its NUMA node (of its CPU affinity where the
   NUMA node is unknown); GPUs sharing those CPUs split them into disjoint, contiguous whole-core
   shares of at least one core each (one rank per GPU, bound to its share).
4. *Tiers*: tiers whose jobs carry an SLA (an ``sla_class`` in the policy) get isolated cores,
   exclusively and bound per rank; the other tiers do not (see the note on ``domain``).

Slurm reads ``CpuSpecList`` as *Slurm abstract CPU ids* (``lstopo`` logical PU order: core by core in
Slurm's core order, the threads of a core consecutive) and widens it to whole cores; it takes effect
only with ``task/cgroup`` and ``ConstrainCores=yes``. ``TaskPluginParam=SlurmdOffSpec`` is left out
on purpose: without it slurmd and slurmstepd are confined to the specialized (housekeeping) cores.
Kernel parameters, ``CPUAffinity=``, ``IRQBALANCE_BANNED_CPULIST`` and kubelet's
``reservedSystemCPUs`` take OS CPU ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from features.errors import InputError
from predictor.nodeinfo.cpulist import cpumask_hex, format_cpulist
from predictor.nodeinfo.pinning import slurm_node_line
from predictor.nodeinfo.topology import HostCpus, NodeTopology

__all__ = [
    "DEFAULT_ISOLCPUS_FLAGS",
    "ISOLCPUS_FLAGS",
    "KUBELET_DROPIN",
    "PURPOSE",
    "SYSTEMD_DROPIN",
    "GpuIsolation",
    "IsolationOptions",
    "IsolationPlan",
    "NumaIsolation",
    "TierIsolation",
    "plan_isolation",
    "slurm_abstract_cpu_ids",
]

#: Flags of the kernel's ``isolcpus=`` parameter (Documentation/admin-guide/kernel-parameters.txt).
ISOLCPUS_FLAGS: tuple[str, ...] = ("managed_irq", "domain", "nohz")
DEFAULT_ISOLCPUS_FLAGS: tuple[str, ...] = ("managed_irq", "domain")
SYSTEMD_DROPIN = "/etc/systemd/system.conf.d/50-cpu-isolation.conf"
KUBELET_DROPIN = "/etc/kubernetes/kubelet.conf.d/50-cpu-isolation.conf"
PURPOSE = ("The article this product started from reports that CPU pinning cut context switches by 96 % and "
           "that full isolation (isolcpus + IRQ affinity) gained 15-20 % for latency-sensitive jobs; these "
           "are the article's figures, not measurements of this plan.")


@dataclass(frozen=True, slots=True)
class IsolationOptions:
    """What the admin chooses; the rest follows from the topology (see the module docstring)."""

    housekeeping_cores: int = 1  # physical cores per NUMA node left to the OS
    housekeeping_cpus: tuple[int, ...] | None = None  # explicit OS CPU ids instead (widened to cores)
    isolcpus_flags: tuple[str, ...] = DEFAULT_ISOLCPUS_FLAGS
    isolated_tiers: tuple[str, ...] | None = None  # None: the tiers with an SLA class


@dataclass(frozen=True, slots=True)
class NumaIsolation:
    """One NUMA node's split."""

    numa_node: int
    socket: int
    housekeeping_cpus: tuple[int, ...]
    isolated_cpus: tuple[int, ...]
    gpus: tuple[int, ...]  # GPUs attached to this NUMA node


@dataclass(frozen=True, slots=True)
class GpuIsolation:
    """The isolated CPUs one GPU's job runs on."""

    gpu: int
    numa_node: int | None
    local_cpus: tuple[int, ...]  # isolated CPUs near the GPU (shared with the GPUs of its NUMA node)
    rank_cpus: tuple[int, ...]  # this GPU's exclusive whole-core share of local_cpus


@dataclass(frozen=True, slots=True)
class TierIsolation:
    """Whether the jobs of one policy tier get isolated cores."""

    tier: str
    sla_class: str | None
    isolated: bool


def slurm_abstract_cpu_ids(host: HostCpus, cpus: Sequence[int]) -> tuple[int, ...]:
    """Slurm abstract CPU ids of OS CPUs: ``core index x threads per core + thread within the core``."""
    tpc = host.threads_per_core
    index = {core: i for i, core in enumerate(host.cores())}
    ids = []
    for cpu in cpus:
        t = host.thread(cpu)
        ids.append(index[(t.socket, t.core)] * tpc + host.cpus_of_core(t.socket, t.core).index(cpu))
    return tuple(sorted(ids))


@dataclass(frozen=True)
class IsolationPlan:
    """A node's CPU isolation plan, with renderers for each place it is applied."""

    topology: NodeTopology
    options: IsolationOptions
    housekeeping_cpus: tuple[int, ...]
    isolated_cpus: tuple[int, ...]
    numa: tuple[NumaIsolation, ...]
    gpus: tuple[GpuIsolation, ...]
    tiers: tuple[TierIsolation, ...]

    @property
    def host(self) -> HostCpus:
        assert self.topology.host is not None
        return self.topology.host

    @property
    def housekeeping_core_count(self) -> int:
        return len({(self.host.thread(c).socket, self.host.thread(c).core) for c in self.housekeeping_cpus})

    # -- kernel, irqbalance, systemd -----------------------------------------------------------

    def kernel_args(self) -> dict[str, str]:
        """Kernel command-line parameters, name -> value."""
        isolated, housekeeping = format_cpulist(self.isolated_cpus), format_cpulist(self.housekeeping_cpus)
        return {"isolcpus": ",".join((*self.options.isolcpus_flags, isolated)), "nohz_full": isolated,
                "rcu_nocbs": isolated, "irqaffinity": housekeeping}

    def kernel_cmdline(self) -> str:
        """The parameters as they go on the kernel command line (``GRUB_CMDLINE_LINUX``)."""
        return " ".join(f"{k}={v}" for k, v in self.kernel_args().items())

    def irqbalance_line(self) -> str:
        """The irqbalance setting that keeps it from moving interrupts back onto isolated CPUs."""
        return f"IRQBALANCE_BANNED_CPULIST={format_cpulist(self.isolated_cpus)}"

    def systemd_dropin(self) -> str:
        """A ``system.conf`` drop-in putting PID 1 and every service it starts on housekeeping CPUs."""
        return f"[Manager]\nCPUAffinity={format_cpulist(self.housekeeping_cpus)}\n"

    # -- Slurm ---------------------------------------------------------------------------------

    def cpu_spec_list(self) -> str:
        """Slurm ``CpuSpecList``: abstract CPU ids of every housekeeping thread."""
        return format_cpulist(slurm_abstract_cpu_ids(self.host, self.housekeeping_cpus))

    def slurm_conf_lines(self, node_name: str | None = None) -> list[str]:
        """``slurm.conf`` lines: the task plugins CpuSpecList needs, and the node line carrying it."""
        return ["TaskPlugin=task/affinity,task/cgroup",
                slurm_node_line(self.topology, node_name, self.cpu_spec_list())]

    def cgroup_conf_lines(self) -> list[str]:
        """``cgroup.conf`` lines (CpuSpecList has no effect without ConstrainCores)."""
        return ["ConstrainCores=yes"]

    def srun_cpu_bind_mask(self) -> str:
        """``--cpu-bind=mask_cpu:`` giving local rank i (driving GPU i) its isolated share ("" without GPUs)."""
        if not self.gpus:
            return ""
        return "--cpu-bind=mask_cpu:" + ",".join(cpumask_hex(g.rank_cpus) for g in self.gpus)

    # -- Kubernetes ----------------------------------------------------------------------------

    def kubelet_config(self) -> dict[str, Any]:
        """A KubeletConfiguration drop-in: static CPU manager, housekeeping CPUs reserved."""
        options = {"strict-cpu-reservation": "true"}  # Burstable/BestEffort pods off the reserved CPUs too
        if self.host.threads_per_core > 1:
            options["full-pcpus-only"] = "true"  # exclusive CPUs come as whole cores
        return {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                "cpuManagerPolicy": "static", "cpuManagerPolicyOptions": options,
                "reservedSystemCPUs": format_cpulist(self.housekeeping_cpus)}

    # -- who gets the isolated cores -------------------------------------------------------------

    def notes(self) -> tuple[str, ...]:
        """What an admin must know before applying the plan."""
        isolated = [t.tier for t in self.tiers if t.isolated]
        shared = [t.tier for t in self.tiers if not t.isolated]
        notes = []
        if "domain" in self.options.isolcpus_flags:
            who = f" ({', '.join(isolated)})" if isolated else ""
            rest = f"; keep {', '.join(shared)} on nodes without this plan" if shared else ""
            notes.append("isolcpus domain: the kernel does not spread tasks across isolated CPUs (a rank's "
                         "data-loader workers and OpenMP threads stay on the CPU they started on), so only jobs "
                         f"that pin each thread to its own CPU belong on them{who}{rest}; or drop the flag "
                         "(--isolcpus-flags managed_irq) so unpinned jobs and the kubelet's shared pool can "
                         "use the isolated CPUs")
        notes += [
            "nohz_full and rcu_nocbs need a kernel built with CONFIG_NO_HZ_FULL and CONFIG_RCU_NOCB_CPU; the "
            "kernel command line and CPUAffinity take effect at the next boot",
            "Slurm: CpuSpecList needs task/cgroup with ConstrainCores=yes; TaskPluginParam=SlurmdOffSpec is "
            "left out so slurmd and slurmstepd stay on the housekeeping cores",
            "kubelet: drain the node, delete /var/lib/kubelet/cpu_manager_state and restart the kubelet after "
            "changing cpuManagerPolicy or reservedSystemCPUs; strict-cpu-reservation needs kubelet 1.33 or "
            "later (remove it on older ones)",
        ]
        return tuple(notes)

    def to_document(self, node_name: str | None = None) -> dict[str, Any]:
        """The plan as a JSON-able document (CPU sets as CPU lists)."""
        return {
            "purpose": PURPOSE,
            "housekeeping_cores_per_numa_node": (self.options.housekeeping_cores
                                                 if self.options.housekeeping_cpus is None else None),
            "housekeeping_cpus": format_cpulist(self.housekeeping_cpus),
            "isolated_cpus": format_cpulist(self.isolated_cpus),
            "numa_nodes": [{"numa_node": n.numa_node, "socket": n.socket,
                            "housekeeping_cpus": format_cpulist(n.housekeeping_cpus),
                            "isolated_cpus": format_cpulist(n.isolated_cpus), "gpus": list(n.gpus)}
                           for n in self.numa],
            "gpus": [{"gpu": g.gpu, "numa_node": g.numa_node, "local_cpus": format_cpulist(g.local_cpus),
                      "rank_cpus": format_cpulist(g.rank_cpus)} for g in self.gpus],
            "kernel_cmdline": self.kernel_cmdline(),
            "kernel_args": self.kernel_args(),
            "irqbalance": self.irqbalance_line(),
            "systemd": {"path": SYSTEMD_DROPIN, "text": self.systemd_dropin()},
            "slurm": {"slurm_conf": self.slurm_conf_lines(node_name), "cgroup_conf": self.cgroup_conf_lines(),
                      "cpu_spec_list": self.cpu_spec_list(), "cpu_bind_mask": self.srun_cpu_bind_mask()},
            "kubelet": {"path": KUBELET_DROPIN, "config": self.kubelet_config()},
            "tiers": [{"tier": t.tier, "sla_class": t.sla_class, "isolated": t.isolated} for t in self.tiers],
            "notes": list(self.notes()),
        }


# -- the planner ---------------------------------------------------------------------------------


def _core(host: HostCpus, cpu: int) -> tuple[int, int]:
    t = host.thread(cpu)
    return (t.socket, t.core)


def _housekeeping(host: HostCpus, options: IsolationOptions) -> set[int]:
    known = {t.cpu for t in host.threads}
    if options.housekeeping_cpus is not None:
        unknown = sorted(set(options.housekeeping_cpus) - known)
        if unknown:
            raise InputError(f"housekeeping CPUs: CPU {unknown[0]} does not exist on this node "
                             f"(CPUs {format_cpulist(known)})")
        chosen = {c for cpu in options.housekeeping_cpus for c in host.cpus_of_core(*_core(host, cpu))}
        boot = min(known)
        if boot not in chosen:
            raise InputError(f"housekeeping CPUs must include CPU {boot}: the kernel keeps the boot CPU for "
                             "timekeeping (nohz_full drops it)")
        missing = [n for n in host.numa_nodes if not chosen & set(host.cpus_of_numa(n))]
        if missing:
            raise InputError(f"housekeeping CPUs leave NUMA node {missing[0]} without a housekeeping core "
                             f"(add one of {format_cpulist(host.cpus_of_numa(missing[0]))})")
        return chosen
    per_node = options.housekeeping_cores
    if per_node < 1:
        raise InputError(f"housekeeping cores per NUMA node must be at least 1 (never isolate every CPU), "
                         f"got {per_node}")
    chosen = set()
    for node in host.numa_nodes:
        cpus = host.cpus_of_numa(node)
        cores = sorted({_core(host, c) for c in cpus}, key=lambda k: min(host.cpus_of_core(*k)))
        if per_node >= len(cores):
            raise InputError(f"cannot keep {per_node} housekeeping cores per NUMA node: NUMA node {node} has "
                             f"{len(cores)}, so none of its cores would be isolated")
        for core in cores[:per_node]:
            chosen.update(host.cpus_of_core(*core))
    return chosen


def _gpu_shares(topo: NodeTopology, host: HostCpus, isolated: set[int]) -> tuple[GpuIsolation, ...]:
    local: dict[int, tuple[int, ...]] = {}
    for g in topo.gpus:
        near = host.cpus_of_numa(g.numa_node) if g.numa_node is not None else g.cpu_affinity
        local[g.index] = tuple(sorted(c for c in near if c in isolated))
        if not local[g.index]:
            where = f"NUMA node {g.numa_node}" if g.numa_node is not None else "its CPU affinity"
            raise InputError(f"GPU{g.index}: no isolated CPU near it ({where}); lower the housekeeping cores")
    groups: dict[tuple[int, ...], list[int]] = {}
    for g in topo.gpus:
        groups.setdefault(local[g.index], []).append(g.index)
    order = {core: i for i, core in enumerate(host.cores())}
    rank: dict[int, tuple[int, ...]] = {}
    for cpus, members in groups.items():
        cores = sorted({_core(host, c) for c in cpus}, key=order.__getitem__)
        if len(cores) < len(members):
            raise InputError(f"GPUs {','.join(map(str, members))} share {len(cores)} isolated core(s) and each "
                             "needs one of its own; lower the housekeeping cores")
        base, extra = divmod(len(cores), len(members))
        start = 0
        for k, gpu in enumerate(members):
            size = base + (1 if k < extra else 0)
            share = cores[start:start + size]
            start += size
            rank[gpu] = tuple(sorted(c for core in share for c in host.cpus_of_core(*core) if c in cpus))
    return tuple(GpuIsolation(gpu=g.index, numa_node=g.numa_node, local_cpus=local[g.index], rank_cpus=rank[g.index])
                 for g in topo.gpus)


def _tiers(tiers: Mapping[str, str | None], chosen: tuple[str, ...] | None) -> tuple[TierIsolation, ...]:
    if chosen is not None:
        unknown = [t for t in chosen if t not in tiers]
        if unknown:
            raise InputError(f"isolated tier {unknown[0]!r} is not a tier of the policy "
                             f"({', '.join(tiers) or 'none'})")
    picked = set(chosen) if chosen is not None else {t for t, sla in tiers.items() if sla is not None}
    return tuple(TierIsolation(tier=t, sla_class=sla, isolated=t in picked) for t, sla in tiers.items())


def plan_isolation(topo: NodeTopology, options: IsolationOptions | None = None,
                   tiers: Mapping[str, str | None] | None = None) -> IsolationPlan:
    """Compute the CPU isolation plan of ``topo`` (see the module docstring for the rules).

    Parameters
    ----------
    topo : NodeTopology
        The node, with host CPU information.
    options : IsolationOptions, optional
        Housekeeping cores (or CPUs), ``isolcpus`` flags, tiers to isolate; defaults when omitted.
    tiers : mapping of str to str or None, optional
        The policy's tiers, name -> SLA class (None for a tier without one), in policy order.

    Raises
    ------
    InputError
        No host CPU information, a request that leaves a NUMA node without a housekeeping core or
        without isolated cores, a GPU without an isolated core of its own, an unknown flag or tier.
    """
    options = options or IsolationOptions()
    if topo.host is None:
        raise InputError("the topology has no host CPU information (host:), so no isolation plan can be made")
    bad = [f for f in options.isolcpus_flags if f not in ISOLCPUS_FLAGS]
    if bad or not options.isolcpus_flags or len(set(options.isolcpus_flags)) != len(options.isolcpus_flags):
        what = f"{bad[0]!r} is not one of" if bad else "must be distinct flags among"
        raise InputError(f"isolcpus flags: {what} {', '.join(ISOLCPUS_FLAGS)}")
    host = topo.host
    housekeeping = _housekeeping(host, options)
    isolated = {t.cpu for t in host.threads} - housekeeping
    if not isolated:
        raise InputError("the housekeeping CPUs cover every CPU of the node: nothing would be isolated")
    numa = tuple(
        NumaIsolation(numa_node=n, socket=host.socket_of_numa(n),
                      housekeeping_cpus=tuple(c for c in host.cpus_of_numa(n) if c in housekeeping),
                      isolated_cpus=tuple(c for c in host.cpus_of_numa(n) if c in isolated),
                      gpus=tuple(g.index for g in topo.gpus if g.numa_node == n))
        for n in host.numa_nodes)
    return IsolationPlan(topology=topo, options=options, housekeeping_cpus=tuple(sorted(housekeeping)),
                         isolated_cpus=tuple(sorted(isolated)), numa=numa, gpus=_gpu_shares(topo, host, isolated),
                         tiers=_tiers(tiers or {}, options.isolated_tiers))
