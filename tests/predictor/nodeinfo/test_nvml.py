"""NVML discovery. The pure logic runs on published layouts; the no-driver path runs for real (this
machine has no NVIDIA driver); on a GPU machine the same test runs the real discovery instead."""

import pynvml
import pytest

from predictor.nodeinfo.nvml import (
    NvLinkEnd,
    NvmlUnavailable,
    discover_topology,
    mig_profile,
    normalise_bus_id,
    nvlink_counts,
    pcie_class_of_level,
)
from predictor.nodeinfo.sysfs import read_host_cpus


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_discovery_on_this_machine():
    """No driver: a plain error naming NVML's reason. With a driver: a consistent topology."""
    if not _driver_present():
        with pytest.raises(NvmlUnavailable, match=r"^no NVIDIA driver found \(NVML: .+\)$"):
            discover_topology()
        return
    topo = discover_topology()
    assert topo.gpus and topo.source == "nvml"
    assert all(g.memory_mib > 0 for g in topo.gpus)


@pytest.mark.parametrize(
    ("level", "cls"),
    [(pynvml.NVML_TOPOLOGY_INTERNAL, "PIX"), (pynvml.NVML_TOPOLOGY_SINGLE, "PIX"),
     (pynvml.NVML_TOPOLOGY_MULTIPLE, "PXB"), (pynvml.NVML_TOPOLOGY_HOSTBRIDGE, "PHB"),
     (pynvml.NVML_TOPOLOGY_NODE, "NODE"), (pynvml.NVML_TOPOLOGY_SYSTEM, "SYS")],
)
def test_common_ancestor_levels_map_to_nvidia_smi_classes(level, cls):
    assert pcie_class_of_level(level) == cls


def test_unknown_level_is_rejected():
    with pytest.raises(ValueError, match="unknown NVML topology level 35"):
        pcie_class_of_level(35)


@pytest.mark.parametrize(
    ("raw", "norm"),
    [("00000000:07:00.0", "00000000:07:00.0"), ("0000:bd:00.0", "00000000:BD:00.0"), (b"0:4e:00.0", "00000000:4E:00.0")],
)
def test_bus_ids_are_normalised(raw, norm):
    assert normalise_bus_id(raw) == norm


BUS = [f"00000000:{b}:00.0" for b in ("06", "07", "0A", "0B", "85", "86", "89", "8A")]

# DGX-1 with V100 (hybrid cube-mesh), the NVLink part of `nvidia-smi topo -m` as published:
# 6 links per GPU, some pairs joined by 2 links, others by 1, others not at all.
DGX1_NVLINK = [
    [0, 1, 1, 2, 2, 0, 0, 0],
    [1, 0, 2, 1, 0, 2, 0, 0],
    [1, 2, 0, 2, 0, 0, 1, 0],
    [2, 1, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 1, 1, 2],
    [0, 2, 0, 0, 1, 0, 2, 1],
    [0, 0, 1, 0, 1, 2, 0, 2],
    [0, 0, 0, 1, 2, 1, 2, 0],
]


def test_direct_nvlinks_reproduce_the_dgx1_cube_mesh():
    links = [[NvLinkEnd("gpu", BUS[j].lower()) for j in range(8) for _ in range(DGX1_NVLINK[i][j])] for i in range(8)]
    assert all(len(ends) == 6 for ends in links)
    assert nvlink_counts(BUS, links) == DGX1_NVLINK


def test_nvswitch_links_join_every_pair():
    switch = [NvLinkEnd("switch", f"00000000:C{k}:00.0") for k in range(6)]
    links = [[switch[k % 6] for k in range(12)] for _ in range(8)]  # 12 links per GPU into 6 NVSwitches
    counts = nvlink_counts(BUS, links)
    assert all(counts[i][j] == (0 if i == j else 12) for i in range(8) for j in range(8))


def test_one_sided_reports_and_foreign_ends():
    links = [[NvLinkEnd("gpu", BUS[1]), NvLinkEnd("gpu", "00000000:FF:00.0")], []]  # GPU1 reports nothing
    assert nvlink_counts(BUS[:2], links) == [[0, 1], [1, 0]]


@pytest.mark.parametrize(
    ("name", "profile"),
    [("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "3g.40gb"), ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
     ("1g.5gb", "1g.5gb")],
)
def test_mig_profile_from_device_name(name, profile):
    assert mig_profile(name) == profile


class _Handle:
    def __init__(self, index: int, mig: int | None = None):
        self.index, self.mig = index, mig


class _Answers:
    """NVML answers of a two-GPU node with 4 NVLinks between the GPUs and MIG on GPU1: exercises the
    glue in discover_topology (the pure helpers above carry the logic)."""

    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_NVLINK_DEVICE_TYPE_SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_NVLINK_MAX_LINKS = 6

    class _Pci:
        def __init__(self, bus):
            self.busId = bus

    class _Mem:
        def __init__(self, mib):
            self.total = mib * 2**20

    def nvmlInit(self): pass  # noqa: E704
    def nvmlShutdown(self): pass  # noqa: E704
    def nvmlSystemGetDriverVersion(self): return "550.54.15"  # noqa: E704
    def nvmlDeviceGetCount(self): return 2  # noqa: E704
    def nvmlDeviceGetHandleByIndex(self, i): return _Handle(i)  # noqa: E704
    def nvmlDeviceGetPciInfo(self, h): return self._Pci(BUS[h.index])  # noqa: E704

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100-SXM4-40GB" + (" MIG 3g.20gb" if h.mig is not None else "")

    def nvmlDeviceGetMemoryInfo(self, h): return self._Mem(20096 if h.mig is not None else 40960)  # noqa: E704
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h.index}" if h.mig is None else f"MIG-{h.index}-{h.mig}"  # noqa: E704
    def nvmlDeviceGetNumaNodeId(self, h): return 0  # noqa: E704
    def nvmlDeviceGetCpuAffinity(self, h, words): return [0b11] + [0] * (words - 1)  # noqa: E704
    def nvmlDeviceGetMigMode(self, h): return (int(h.index == 1), int(h.index == 1))  # noqa: E704
    def nvmlDeviceGetMaxMigDeviceCount(self, h): return 7  # noqa: E704

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, k):
        if k >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(h.index, k)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 4:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link): return self._Pci(BUS[1 - h.index])  # noqa: E704
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link): return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU  # noqa: E704
    def nvmlDeviceGetTopologyCommonAncestor(self, a, b): return pynvml.NVML_TOPOLOGY_SINGLE  # noqa: E704


def test_discovery_glue_assembles_the_topology():
    topo = discover_topology(nvml=_Answers(), host=read_host_cpus(), hostname="fake-a100")
    assert [g.name for g in topo.gpus] == ["NVIDIA A100-SXM4-40GB"] * 2
    assert topo.link(0, 1) == "NV4" and topo.pcie[0][1] == "PIX"
    assert topo.gpus[0].cpu_affinity == (0, 1)
    assert not topo.gpus[0].mig_enabled
    assert [m.profile for m in topo.gpus[1].mig_instances] == ["3g.20gb", "3g.20gb"]
    assert topo.driver_version == "550.54.15"
    assert topo.to_inventory_node().nvlink_islands == ((0, 1),)
