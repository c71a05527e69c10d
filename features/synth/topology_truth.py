"""How a placement slows a data-parallel job down: step-time model, comm intensity, placements.

Step-time model
---------------
One training step on one GPU takes ``t_compute + t_comm`` seconds:

* ``t_compute = k P b s / (peak * mfu)``: ``k = 6`` FLOPs per parameter per token for full
  training (Kaplan et al., 2020; Narayanan et al., SC'21), ``4`` for LoRA/QLoRA (no weight
  gradients for frozen weights), ``+2`` with activation checkpointing (one extra forward); ``peak``
  from :func:`features.synth.hardware.peak_tflops`; ``mfu`` the family's model-FLOPs utilisation.
* ``t_comm = e * V / B``: a ring all-reduce moves ``V = 2 (n - 1) / n * T * g`` bytes per GPU
  (Patarasuk & Yuan, 2009; the NCCL busbw convention), ``T`` trainable parameters with ``g``-byte
  gradients; ZeRO-3/FSDP moves 1.5x that (all-gather in forward and backward plus reduce-scatter,
  ZeRO paper section 7). ``B`` is the bandwidth of the worst link the placement crosses
  (:data:`features.synth.hardware.LINK_BANDWIDTH_GBPS`) and ``e`` in (0, 1] the share of
  communication not hidden behind the backward pass (bucketing/overlap quality of the family).

Comm intensity and slowdown
---------------------------
``comm_intensity c = t_comm(cross_rack) / (t_compute + t_comm(cross_rack))``: the share of a step
spent communicating on the slowest placement class, in [0, 1); 0 for single-GPU jobs. Writing
``r_p = B_cross_rack / B_p``, the slowdown of placement ``p`` relative to ``nvlink`` is

    slowdown(c, p) = ((1 - c) + c r_p) / ((1 - c) + c r_nvlink)

which is 1 on ``nvlink``, increases with ``c`` and along :data:`features.schema.PLACEMENT_CLASSES`
(bandwidths are monotone), and reaches ``B_nvlink / B_p`` as ``c -> 1``. The GPU count enters
through ``c`` (ring factor, per-GPU batch). The reference ("best placement") is all GPUs in one
NVLink domain even where that is not achievable (PCIe-only GPUs, gangs larger than a node).

Placements
----------
Single-GPU jobs run on ``nvlink`` (no link crossed). Gangs that fit a node land inside one NVLink
island most of the time, otherwise across PCIe/NUMA or scattered over nodes by fragmentation;
PCIe-only GPU types never get ``nvlink``; gangs larger than a node are cross-node, mostly inside a
rack (:data:`PLACEMENT_PROBABILITIES`).
"""

from __future__ import annotations

import numpy as np

from features.schema import PLACEMENT_CLASSES
from features.synth.hardware import GPUS_PER_NODE, LINK_BANDWIDTH_GBPS

__all__ = [
    "PLACEMENT_PROBABILITIES",
    "step_times",
    "comm_intensity",
    "slowdown",
    "slowdown_by_class",
    "sample_placement",
]

_BANDWIDTH = np.array([LINK_BANDWIDTH_GBPS[c] for c in PLACEMENT_CLASSES])
_REF = _BANDWIDTH[-1]
_CLASS_INDEX = {c: i for i, c in enumerate(PLACEMENT_CLASSES)}

#: P(placement class) for multi-GPU gangs, by gang kind (order of PLACEMENT_CLASSES).
PLACEMENT_PROBABILITIES: dict[str, tuple[float, ...]] = {
    "in_node_nvlink": (0.62, 0.12, 0.12, 0.10, 0.04),
    "in_node_pcie": (0.0, 0.60, 0.25, 0.11, 0.04),
    "multi_node": (0.0, 0.0, 0.0, 0.70, 0.30),
    "multi_rack": (0.0, 0.0, 0.0, 0.30, 0.70),
}
#: GPUs under one top-of-rack switch (16 nodes of 8).
GPUS_PER_RACK = 16 * GPUS_PER_NODE


def step_times(*, params, trainable, grad_bytes, batch_size, seq_len, num_gpus, peak_tflops, mfu,
               flops_per_param_token, zero_stage, exposed_share) -> tuple[np.ndarray, np.ndarray]:
    """Compute seconds per step and exposed communication seconds per step on the reference link.

    Parameters
    ----------
    params, trainable, grad_bytes, batch_size, seq_len, num_gpus, peak_tflops, mfu,
    flops_per_param_token, zero_stage, exposed_share : array-like, shape (n,)
        See the module docstring; ``peak_tflops`` in TFLOP/s, ``grad_bytes`` per gradient value.

    Returns
    -------
    t_compute, t_comm_ref : ndarray of float, shape (n,)
        Seconds; ``t_comm_ref`` is on the ``cross_rack`` link (0 for one GPU).
    """
    n = np.asarray(num_gpus, dtype=float)
    flops = np.asarray(flops_per_param_token, dtype=float) * np.asarray(params, dtype=float) \
        * np.asarray(batch_size, dtype=float) * np.asarray(seq_len, dtype=float)
    t_compute = flops / (np.asarray(peak_tflops, dtype=float) * 1e12 * np.asarray(mfu, dtype=float))
    ring = 2.0 * (n - 1.0) / np.maximum(n, 1.0)
    volume = ring * np.asarray(trainable, dtype=float) * np.asarray(grad_bytes, dtype=float)
    volume = volume * np.where(np.asarray(zero_stage) == 3, 1.5, 1.0)
    t_comm_ref = np.asarray(exposed_share, dtype=float) * volume / (_REF * 1e9)
    return t_compute, t_comm_ref


def comm_intensity(t_compute: np.ndarray, t_comm_ref: np.ndarray) -> np.ndarray:
    """Share of a step spent communicating on the slowest placement class, in [0, 1)."""
    return t_comm_ref / (t_compute + t_comm_ref)


def _class_codes(placement) -> np.ndarray:
    arr = np.asarray(placement)
    if arr.dtype.kind in "iu":
        return arr
    codes = np.full(arr.shape, -1)
    for name, i in _CLASS_INDEX.items():
        codes[arr == name] = i
    if (codes < 0).any():
        raise ValueError(f"unknown placement class: {sorted({str(x) for x in arr[codes < 0]})[:5]}")
    return codes


def slowdown(comm: np.ndarray, placement) -> np.ndarray:
    """Run-time multiplier of each job's placement relative to ``nvlink`` (>= 1).

    Parameters
    ----------
    comm : array-like of float, shape (n,)
        Comm intensity in [0, 1].
    placement : array-like of str or int, shape (n,)
        Placement class names or their index in :data:`features.schema.PLACEMENT_CLASSES`.
    """
    c = np.clip(np.asarray(comm, dtype=float), 0.0, 1.0)
    ratio = _REF / _BANDWIDTH[_class_codes(placement)]
    return ((1.0 - c) + c * ratio) / ((1.0 - c) + c * (_REF / _BANDWIDTH[0]))


def slowdown_by_class(comm: np.ndarray) -> np.ndarray:
    """Slowdown on every placement class, shape (n, len(PLACEMENT_CLASSES))."""
    c = np.clip(np.asarray(comm, dtype=float), 0.0, 1.0)[:, None]
    ratio = (_REF / _BANDWIDTH)[None, :]
    return ((1.0 - c) + c * ratio) / ((1.0 - c) + c * ratio[:, :1])


def sample_placement(rng: np.random.Generator, num_gpus: np.ndarray, nvlink_capable: np.ndarray) -> np.ndarray:
    """Draw a placement class index per job (see :data:`PLACEMENT_PROBABILITIES`).

    Parameters
    ----------
    rng : numpy Generator
    num_gpus : ndarray of float, shape (n,)
    nvlink_capable : ndarray of bool, shape (n,)
        Whether the job's GPU type has NVLink.

    Returns
    -------
    ndarray of int, shape (n,)
        Index into :data:`features.schema.PLACEMENT_CLASSES`.
    """
    n = np.asarray(num_gpus, dtype=float)
    kind = np.where(n > GPUS_PER_RACK, 3, np.where(n > GPUS_PER_NODE, 2, np.where(nvlink_capable, 0, 1)))
    table = np.cumsum(np.array([PLACEMENT_PROBABILITIES[k] for k in
                                ("in_node_nvlink", "in_node_pcie", "multi_node", "multi_rack")]), axis=1)
    u = rng.random(n.shape[0])
    codes = (u[:, None] >= table[kind]).sum(axis=1)
    codes = np.minimum(codes, len(PLACEMENT_CLASSES) - 1)
    return np.where(n <= 1, 0, codes)
