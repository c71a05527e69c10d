"""The host's CPUs and PCI NUMA placement, read from Linux sysfs (no GPU driver needed)."""

from __future__ import annotations

import re
from pathlib import Path

from predictor.nodeinfo.cpulist import parse_cpulist
from predictor.nodeinfo.topology import CpuThread, HostCpus

__all__ = ["read_host_cpus", "read_host_memory_mib", "pci_numa_node", "sysfs_bus_id"]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_host_cpus(sys_root: str | Path = "/sys") -> HostCpus:
    """Online CPUs with their socket (``physical_package_id``), core (``core_id``) and NUMA node.

    A machine without ``/sys/devices/system/node`` (NUMA disabled) puts every CPU on node 0.

    Raises
    ------
    OSError
        When ``sys_root`` holds no CPU topology at all.
    """
    cpu_root = Path(sys_root) / "devices" / "system" / "cpu"
    online_text = _read(cpu_root / "online")
    if online_text is None:
        raise OSError(f"{cpu_root / 'online'}: cannot read the list of online CPUs")
    online = parse_cpulist(online_text)
    numa_of: dict[int, int] = {}
    node_root = Path(sys_root) / "devices" / "system" / "node"
    for node_dir in sorted(node_root.glob("node[0-9]*")):
        match = re.fullmatch(r"node(\d+)", node_dir.name)
        cpus = _read(node_dir / "cpulist")
        if match and cpus:
            for cpu in parse_cpulist(cpus):
                numa_of[cpu] = int(match.group(1))
    threads = []
    for cpu in online:
        topo = cpu_root / f"cpu{cpu}" / "topology"
        socket = _read(topo / "physical_package_id")
        core = _read(topo / "core_id")
        threads.append(CpuThread(cpu=cpu, socket=int(socket) if socket else 0,
                                 core=int(core) if core else cpu, numa_node=numa_of.get(cpu, 0)))
    return HostCpus(threads=tuple(threads))


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` as sysfs names it: ``0000:07:00.0`` (lower case, 4-digit domain)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def pci_numa_node(bus_id: str, sys_root: str | Path = "/sys") -> int | None:
    """NUMA node of a PCI device from sysfs, or None where unknown (``-1`` or no such device)."""
    text = _read(Path(sys_root) / "bus" / "pci" / "devices" / sysfs_bus_id(bus_id) / "numa_node")
    if text is None:
        return None
    node = int(text)
    return node if node >= 0 else None


def read_host_memory_mib(proc_root: str | Path = "/proc") -> int | None:
    """Total host memory (``MemTotal`` of ``/proc/meminfo``) in MiB, or None where unreadable."""
    text = _read(Path(proc_root) / "meminfo")
    for line in (text or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024  # kB -> MiB
    return None
