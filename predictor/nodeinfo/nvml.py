"""GPU discovery through the NVIDIA Management Library (``nvidia-ml-py``, imported as ``pynvml``).

``discover_topology()`` asks NVML, per GPU: name, memory, PCI bus id, UUID, NUMA node, CPU affinity,
MIG mode and MIG devices, and each NVLink's state and remote end; per pair of GPUs: the PCIe common
ancestor. The pure helpers below turn those answers into the ``NodeTopology`` vocabulary and are what
the tests exercise on recorded data; on a machine without a driver ``nvmlInit`` fails and
``NvmlUnavailable`` says so plainly.

NVSwitch systems: each GPU's links end on NVSwitches, not on peer GPUs. ``nvidia-smi topo -m`` then
shows ``NV#`` between every pair with # the links the two GPUs have into the switch fabric (12 on
DGX A100, 18 on DGX H100), which is what ``nvlink_counts`` computes.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from predictor.nodeinfo.cpulist import cpus_from_mask_words
from predictor.nodeinfo.sysfs import pci_numa_node, read_host_cpus, read_host_memory_mib
from predictor.nodeinfo.topology import GpuDevice, HostCpus, MigInstance, NodeTopology

__all__ = [
    "NvmlUnavailable",
    "NvLinkEnd",
    "pcie_class_of_level",
    "normalise_bus_id",
    "nvlink_counts",
    "mig_profile",
    "discover_topology",
]

#: nvmlGpuTopologyLevel_t -> nvidia-smi class (INTERNAL: two GPUs on one board, shown as PIX).
_LEVEL_CLASS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_REMOTE_GPU, _REMOTE_SWITCH = "gpu", "switch"


class NvmlUnavailable(RuntimeError):
    """NVML could not start: no driver, no library, or no permission."""


@dataclass(frozen=True, slots=True)
class NvLinkEnd:
    """The far end of one active NVLink: a GPU (by PCI bus id) or an NVSwitch."""

    kind: str  # "gpu" or "switch"
    bus_id: str


def pcie_class_of_level(level: int) -> str:
    """Map ``nvmlDeviceGetTopologyCommonAncestor``'s level to the ``nvidia-smi topo -m`` class."""
    try:
        return _LEVEL_CLASS[int(level)]
    except KeyError:
        raise ValueError(f"unknown NVML topology level {level}") from None


def normalise_bus_id(bus_id: str | bytes) -> str:
    """One spelling for PCI bus ids: upper case with an 8-digit domain (``00000000:07:00.0``)."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, _, rest = text.strip().upper().partition(":")
    return f"{int(domain, 16):08X}:{rest}"


def nvlink_counts(bus_ids: Sequence[str], links: Sequence[Sequence[NvLinkEnd]]) -> list[list[int]]:
    """NVLinks between every pair of GPUs, from each GPU's list of active link ends.

    Direct links count on both ends (the larger of the two views is taken, in case one side reports
    fewer). Two GPUs that both reach the NVSwitch fabric are joined by as many links as the one with
    fewer switch links has. A link whose far end is not one of these GPUs and not marked as a
    switch (an IBM NPU, or a GPU not visible here) is ignored.
    """
    norm = [normalise_bus_id(b) for b in bus_ids]
    index = {b: i for i, b in enumerate(norm)}
    n = len(norm)
    direct = [[0] * n for _ in range(n)]
    switch_links = [0] * n
    for i, ends in enumerate(links):
        for end in ends:
            if end.kind == _REMOTE_SWITCH:
                switch_links[i] += 1
                continue
            j = index.get(normalise_bus_id(end.bus_id))
            if j is not None and j != i:
                direct[i][j] += 1
    counts = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            fabric = min(switch_links[i], switch_links[j])
            counts[i][j] = max(direct[i][j], direct[j][i]) + fabric
    return counts


def mig_profile(mig_device_name: str) -> str:
    """The MIG profile from a MIG device's NVML name: ``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` -> ``3g.40gb``."""
    _, sep, profile = mig_device_name.rpartition("MIG ")
    return profile.strip() if sep else mig_device_name.strip()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(nvml: ModuleType, fn, *args):  # noqa: ANN001, ANN202 - NVML call passthrough
    """Call an NVML function, returning None where the GPU or driver does not support it."""
    try:
        return fn(*args)
    except (nvml.NVMLError, AttributeError):
        return None


def _links(nvml: ModuleType, handle: Any, gpu_bus_ids: set[str]) -> list[NvLinkEnd]:
    ends = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            continue  # link absent, or NVLink not supported at all on this GPU
        if state != nvml.NVML_FEATURE_ENABLED:
            continue
        remote = normalise_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
        kind_code = _optional(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        if kind_code == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
            kind = _REMOTE_SWITCH
        elif kind_code is None and remote not in gpu_bus_ids:
            kind = _REMOTE_SWITCH  # old drivers cannot say; a non-GPU end on a DGX is an NVSwitch
        else:
            kind = _REMOTE_GPU
        ends.append(NvLinkEnd(kind=kind, bus_id=remote))
    return ends


def _mig(nvml: ModuleType, handle: Any) -> tuple[bool, tuple[MigInstance, ...]]:
    mode = _optional(nvml, nvml.nvmlDeviceGetMigMode, handle)
    if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        return False, ()
    instances = []
    for k in range(int(_optional(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0)):
        mig = _optional(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, k)
        if mig is None:
            continue
        instances.append(MigInstance(profile=mig_profile(_text(nvml.nvmlDeviceGetName(mig))),
                                     memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(mig).total // 2**20),
                                     uuid=_optional(nvml, nvml.nvmlDeviceGetUUID, mig)))
    return True, tuple(instances)


def discover_topology(nvml: ModuleType | None = None, host: HostCpus | None = None,
                      hostname: str | None = None) -> NodeTopology:
    """Discover this machine's GPUs and their topology with NVML.

    Parameters
    ----------
    nvml : module, optional
        The NVML binding (``pynvml`` from ``nvidia-ml-py`` by default).
    host : HostCpus, optional
        The host's CPUs; read from sysfs by default.
    hostname : str, optional
        Node name to record; the machine's host name by default.

    Raises
    ------
    NvmlUnavailable
        ``"no NVIDIA driver found (NVML: <reason>)"`` when NVML cannot start.
    """
    nvml = nvml or importlib.import_module("pynvml")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc})") from None
    try:
        host = host if host is not None else read_host_cpus()
        words = max(1, math.ceil((max(t.cpu for t in host.threads) + 1) / 64))
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus_ids = [normalise_bus_id(nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
        gpus, links = [], []
        for i, h in enumerate(handles):
            numa = _optional(nvml, nvml.nvmlDeviceGetNumaNodeId, h)
            if numa is None or numa < 0:
                numa = pci_numa_node(bus_ids[i])
            affinity = _optional(nvml, nvml.nvmlDeviceGetCpuAffinity, h, words) or []
            mig_enabled, mig_instances = _mig(nvml, h)
            gpus.append(GpuDevice(
                index=i, name=_text(nvml.nvmlDeviceGetName(h)),
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(h).total // 2**20), pci_bus_id=bus_ids[i],
                uuid=_optional(nvml, nvml.nvmlDeviceGetUUID, h), numa_node=numa,
                cpu_affinity=cpus_from_mask_words(list(affinity)), mig_enabled=mig_enabled,
                mig_instances=mig_instances))
            links.append(_links(nvml, h, set(bus_ids)))
        pcie = [["X" if i == j else pcie_class_of_level(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
                 for j in range(count)] for i in range(count)]
        driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion)
        return NodeTopology(
            hostname=hostname or os.uname().nodename,
            gpus=tuple(gpus),
            pcie=tuple(tuple(r) for r in pcie),
            nvlink=tuple(tuple(r) for r in nvlink_counts(bus_ids, links)),
            host=host,
            driver_version=_text(driver) if driver is not None else None,
            host_memory_mib=read_host_memory_mib(),
            source="nvml",
            title=f"{count} GPU(s) discovered with NVML",
        )
    finally:
        _optional(nvml, nvml.nvmlShutdown)
