"""GPU specs and link bandwidths agree with the capacity layer and with the placement ordering."""

from __future__ import annotations

import numpy as np
import pytest

from features.schema import PLACEMENT_CLASSES
from features.synth.hardware import GPU_NAMES, GPU_SPECS, LINK_BANDWIDTH_GBPS, peak_tflops
from predictor.capacity.inventory import KNOWN_GPU_TYPES


@pytest.mark.parametrize("name", GPU_NAMES)
def test_gpu_types_match_the_capacity_inventory(name):
    assert name in KNOWN_GPU_TYPES
    assert GPU_SPECS[name].memory_mib == KNOWN_GPU_TYPES[name].memory_mib


def test_link_bandwidth_falls_along_the_placement_classes():
    bw = [LINK_BANDWIDTH_GBPS[c] for c in PLACEMENT_CLASSES]
    assert all(a > b for a, b in zip(bw, bw[1:], strict=False))


@pytest.mark.parametrize(("gpu", "precision", "tflops"), [
    ("A100-80GB", "bf16", 312.0), ("A100-80GB", "fp32", 19.5), ("A100-80GB", "fp8", 312.0),
    ("H100-80GB", "fp8", 1979.0), ("V100", "fp16", 125.0), ("L40S", "fp8", 733.0),
])
def test_peak_tflops(gpu, precision, tflops):
    assert peak_tflops(np.array([GPU_NAMES.index(gpu)]), np.array([precision]))[0] == tflops
