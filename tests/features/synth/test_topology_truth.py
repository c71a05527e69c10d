"""Topology truth: slowdown physics and placement draws."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.schema import PLACEMENT_CLASSES
from features.synth.hardware import LINK_BANDWIDTH_GBPS
from features.synth.topology_truth import (
    comm_intensity,
    sample_placement,
    slowdown,
    slowdown_by_class,
    step_times,
)

comm_st = st.floats(0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(c=comm_st)
def test_monotone_across_placement_classes(c):
    row = slowdown_by_class(np.array([c]))[0]
    assert row[0] == pytest.approx(1.0)
    assert all(b >= a for a, b in zip(row, row[1:], strict=False))
    if c > 1e-9:
        assert all(b > a for a, b in zip(row, row[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(c=st.floats(0.0, 0.99), dc=st.floats(0.001, 0.5))
def test_increasing_with_comm_intensity(c, dc):
    hi = min(c + dc, 1.0)
    for cls in PLACEMENT_CLASSES[1:]:
        assert slowdown(np.array([hi]), [cls])[0] > slowdown(np.array([c]), [cls])[0]


def test_limits_are_one_and_the_bandwidth_ratio():
    assert np.allclose(slowdown_by_class(np.array([0.0])), 1.0)
    ratio = [LINK_BANDWIDTH_GBPS["nvlink"] / LINK_BANDWIDTH_GBPS[c] for c in PLACEMENT_CLASSES]
    np.testing.assert_allclose(slowdown_by_class(np.array([1.0]))[0], ratio)
    np.testing.assert_allclose(slowdown(np.array([0.3, 0.3]), ["nvlink", "cross_rack"]),
                               slowdown_by_class(np.array([0.3]))[0, [0, -1]])
    np.testing.assert_allclose(slowdown(np.array([0.3]), np.array([4])), slowdown(np.array([0.3]), ["cross_rack"]))
    with pytest.raises(ValueError, match="placement"):
        slowdown(np.array([0.1]), ["infiniband"])


def _times(num_gpus, trainable=7e9, batch=4.0, stage=0):
    return step_times(params=7e9, trainable=trainable, grad_bytes=2.0, batch_size=batch, seq_len=2048.0,
                      num_gpus=np.asarray(num_gpus, dtype=float), peak_tflops=312.0, mfu=0.4,
                      flops_per_param_token=6.0, zero_stage=stage, exposed_share=0.7)


def test_comm_intensity_zero_on_one_gpu_and_growing_with_gang_size():
    t_c, t_r = _times([1, 2, 8, 64])
    c = comm_intensity(t_c, t_r)
    assert c[0] == 0.0 and all(b > a for a, b in zip(c, c[1:], strict=False))
    # ring all-reduce volume 2(n-1)/n: 64 GPUs move 1.97/1.0 times what 2 GPUs move
    assert t_r[3] / t_r[1] == pytest.approx(2 * 63 / 64)


def test_lora_and_big_batches_lower_comm_intensity_and_zero3_raises_it():
    base = comm_intensity(*_times(8))
    assert comm_intensity(*_times(8, trainable=7e9 * 0.005)) < 0.05 * base
    assert comm_intensity(*_times(8, batch=32.0)) < base
    assert comm_intensity(*_times(8, stage=3)) > base


def test_placement_draws_respect_gang_size_and_nvlink():
    rng = np.random.default_rng(0)
    n = 20_000
    one = sample_placement(rng, np.ones(n), np.ones(n, dtype=bool))
    assert (one == 0).all()
    pcie = sample_placement(rng, np.full(n, 4.0), np.zeros(n, dtype=bool))
    assert (pcie > 0).all()
    multi = sample_placement(rng, np.full(n, 32.0), np.ones(n, dtype=bool))
    assert set(np.unique(multi)) == {3, 4}
    in_node = sample_placement(rng, np.full(n, 8.0), np.ones(n, dtype=bool))
    assert 0.55 < (in_node == 0).mean() < 0.7 and set(np.unique(in_node)) == set(range(5))
