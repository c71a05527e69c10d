import os

import pytest

from predictor.nodeinfo.cpulist import parse_cpulist
from predictor.nodeinfo.sysfs import pci_numa_node, read_host_cpus, read_host_memory_mib, sysfs_bus_id


def test_reads_this_machines_cpus():
    host = read_host_cpus()
    with open("/sys/devices/system/cpu/online") as f:
        assert {t.cpu for t in host.threads} == set(parse_cpulist(f.read()))
    assert {t.cpu for t in host.threads} >= set(os.sched_getaffinity(0))
    assert host.numa_nodes and host.sockets


def _fake_sys(root, cpus):
    """A sysfs tree: cpus is a list of (cpu, socket, core, numa)."""
    cpu_root = root / "devices" / "system" / "cpu"
    cpu_root.mkdir(parents=True)
    (cpu_root / "online").write_text(",".join(str(c[0]) for c in cpus) + "\n")
    nodes = {}
    for cpu, socket, core, numa in cpus:
        topo = cpu_root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{socket}\n")
        (topo / "core_id").write_text(f"{core}\n")
        nodes.setdefault(numa, []).append(cpu)
    for numa, members in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{numa}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(",".join(map(str, members)) + "\n")
    return root


def test_reads_a_two_socket_tree(tmp_path):
    cpus = [(0, 0, 0, 0), (1, 0, 1, 0), (2, 1, 0, 1), (3, 1, 1, 1), (4, 0, 0, 0), (5, 0, 1, 0), (6, 1, 0, 1), (7, 1, 1, 1)]
    host = read_host_cpus(_fake_sys(tmp_path, cpus))
    assert host.sockets == (0, 1) and host.numa_nodes == (0, 1)
    assert host.cpus_of_core(1, 0) == (2, 6)
    assert host.threads_per_core == 2


def test_missing_cpu_tree_is_an_os_error(tmp_path):
    with pytest.raises(OSError, match="online CPUs"):
        read_host_cpus(tmp_path)


def test_pci_numa_node(tmp_path):
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:07:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("3\n")
    assert sysfs_bus_id("00000000:07:00.0") == "0000:07:00.0"
    assert pci_numa_node("00000000:07:00.0", tmp_path) == 3
    (dev / "numa_node").write_text("-1\n")
    assert pci_numa_node("00000000:07:00.0", tmp_path) is None
    assert pci_numa_node("00000000:99:00.0", tmp_path) is None


def test_host_memory():
    assert read_host_memory_mib() > 0
    assert read_host_memory_mib("/nonexistent") is None
