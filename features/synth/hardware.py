"""GPU models and interconnects the synthetic cluster is built from.

Everything here is a published vendor or benchmark figure; the generator never invents a device.

GPU specs (:data:`GPU_SPECS`)
    Memory per device in MiB, as reported by ``nvidia-smi`` (the same numbers as
    ``predictor.capacity.inventory.KNOWN_GPU_TYPES``, which this layer may not import; a test keeps
    the two in step). Peak dense tensor throughput in TFLOP/s per precision, from the NVIDIA
    datasheets: V100 SXM2 (fp16 125, fp32 15.7), A10 (bf16 125, fp32 31.2), L40S (bf16 362,
    fp8 733, fp32 91.6), A100 SXM (bf16 312, fp32 19.5), H100 SXM (bf16 989, fp8 1979, fp32 67).
    Sparsity figures are not used. V100 has no bf16 (jobs fall back to fp16); only Ada (L40S) and
    Hopper (H100) have fp8 tensor cores. ``nvlink`` is false for the PCIe-only A10 and L40S.

Link bandwidths (:data:`LINK_BANDWIDTH_GBPS`)
    Effective per-GPU all-reduce bus bandwidth (NCCL's ``busbw``) on the worst link a placement
    class crosses, GB/s, ordered like :data:`features.schema.PLACEMENT_CLASSES`:

    * ``nvlink`` 240: nccl-tests ``all_reduce_perf`` on an 8x A100 NVSwitch node reaches
      ~230-240 GB/s busbw (NVLink 3, 600 GB/s bidirectional per GPU).
    * ``pcie_same_numa`` 24: PCIe 4.0 x16 is 32 GB/s per direction; P2P through one PCIe switch
      measures ~22-25 GB/s.
    * ``cross_numa`` 16: P2P across the CPU interconnect (``SYS`` in ``nvidia-smi topo -m``) is
      staged through host memory and loses roughly a third to a half of the PCIe figure.
    * ``cross_node_same_rack`` 12: one 100 Gb/s InfiniBand NIC per node (12.5 GB/s line rate); both
      Philly (Jeon et al., ATC'19) and Helios (Hu et al., SC'21) ran 100 Gb/s InfiniBand.
    * ``cross_rack`` 6: the same NIC behind a 2:1 oversubscribed aggregation layer.

    These are monotone by construction (each class crosses everything the one before it does), which
    is what the schema's "worst link crossed" ordering means. A DGX-class fleet with one NIC per GPU
    would have faster cross-node links; the profile describes a commodity cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from features.schema import PLACEMENT_CLASSES
from features.synth.memory_truth import PRECISIONS, to_codes

__all__ = [
    "GpuSpec",
    "GPU_SPECS",
    "GPU_NAMES",
    "LINK_BANDWIDTH_GBPS",
    "GPUS_PER_NODE",
    "gpu_array",
    "peak_tflops",
]

#: GPUs per node in the synthetic fleet (8 for every type: DGX/HGX and 8-slot PCIe servers).
GPUS_PER_NODE = 8


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: memory (MiB), dense peak TFLOP/s per precision, and NVLink capability."""

    name: str
    memory_mib: int
    tflops_16bit: float
    tflops_fp32: float
    tflops_fp8: float | None
    bf16: bool
    nvlink: bool


GPU_SPECS: Mapping[str, GpuSpec] = MappingProxyType(
    {
        g.name: g
        for g in (
            GpuSpec("V100", 16_384, 125.0, 15.7, None, bf16=False, nvlink=True),
            GpuSpec("A10", 24_576, 125.0, 31.2, None, bf16=True, nvlink=False),
            GpuSpec("L40S", 46_068, 362.0, 91.6, 733.0, bf16=True, nvlink=False),
            GpuSpec("A100-40GB", 40_960, 312.0, 19.5, None, bf16=True, nvlink=True),
            GpuSpec("A100-80GB", 81_920, 312.0, 19.5, None, bf16=True, nvlink=True),
            GpuSpec("H100-80GB", 81_559, 989.0, 67.0, 1979.0, bf16=True, nvlink=True),
        )
    }
)
#: GPU type names in a fixed order (index = the integer code used inside the generator).
GPU_NAMES: tuple[str, ...] = tuple(GPU_SPECS)

LINK_BANDWIDTH_GBPS: Mapping[str, float] = MappingProxyType(
    dict(zip(PLACEMENT_CLASSES, (240.0, 24.0, 16.0, 12.0, 6.0), strict=True))
)


def gpu_array(attr: str) -> np.ndarray:
    """One attribute of every GPU type, indexed by the integer GPU code."""
    return np.array([getattr(GPU_SPECS[n], attr) for n in GPU_NAMES], dtype=float)


def peak_tflops(gpu_code: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """Dense peak TFLOP/s for each job's GPU type and training precision.

    Parameters
    ----------
    gpu_code : ndarray of int, shape (n,)
        Index into :data:`GPU_NAMES`.
    precision : ndarray of str or int, shape (n,)
        ``fp32``, ``tf32``, ``fp16``, ``bf16`` or ``fp8`` (or their codes in
        :data:`features.synth.memory_truth.PRECISIONS`). fp8 on a GPU without fp8 tensor cores runs
        at the 16-bit rate; tf32 is counted at the plain fp32 rate (PyTorch's default matmul
        precision).
    """
    p = to_codes(precision, PRECISIONS, "precision")
    t16 = gpu_array("tflops_16bit")[gpu_code]
    t32 = gpu_array("tflops_fp32")[gpu_code]
    t8 = np.array([GPU_SPECS[n].tflops_fp8 or GPU_SPECS[n].tflops_16bit for n in GPU_NAMES])[gpu_code]
    out = np.where(p <= PRECISIONS.index("tf32"), t32, t16)
    return np.where(p == PRECISIONS.index("fp8"), t8, out)
