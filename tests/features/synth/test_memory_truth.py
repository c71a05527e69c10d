"""Memory truth: published reference numbers, monotonicity, and the analytic estimate's relation to it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features.synth.memory_truth import (
    ANALYTIC_OVERHEAD_MIB,
    METHODS,
    OPTIMIZERS,
    PRECISIONS,
    activation_bytes,
    analytic_peak_vram_mib,
    encode,
    model_state_bytes,
    true_peak_vram_mib,
)
from features.synth.zoo import transformer_shape

GB = 1e9


def states(params, precision="bf16", optimizer="adamw", method="full", stage=0, gpus=1, hidden=0.0, lora=0.01):
    one = np.atleast_1d
    return model_state_bytes(one(float(params)), encode(one(precision), one(optimizer), one(method)), one(stage),
                             one(gpus), one(lora), one(hidden))[0]


@pytest.mark.parametrize(("stage", "expected_gb"), [(0, 120.0), (2, 16.6), (3, 1.9)],
                         ids=["ddp", "zero2", "zero3"])
def test_zero_paper_figure_1(stage, expected_gb):
    """ZeRO paper, Fig. 1: 7.5B parameters, mixed-precision Adam, 64 GPUs (no ZeRO-3 buffers: hidden=0)."""
    assert states(7.5e9, stage=stage, gpus=64) / GB == pytest.approx(expected_gb, rel=0.02)


@pytest.mark.parametrize(("precision", "optimizer", "bytes_per_param"), [
    ("bf16", "adamw", 16), ("fp16", "adamw", 16), ("fp32", "adamw", 16), ("bf16", "adamw_8bit", 10),
    ("bf16", "sgd", 12), ("fp32", "sgd", 12), ("bf16", "adafactor", 8), ("fp8", "adamw", 16),
])
def test_bytes_per_parameter_of_full_training(precision, optimizer, bytes_per_param):
    assert states(1e9, precision, optimizer) == pytest.approx(bytes_per_param * 1e9)


def test_qlora_frozen_weights_take_4_127_bits():
    frozen_only = states(1e9, method="qlora", lora=0.0)
    assert frozen_only == pytest.approx(1e9 * 4.127 / 8)


def test_korthikanti_equation_1():
    """GPT-3 175B layer: s b h (34 + 5 a s / h) bytes, no checkpointing, no FlashAttention, no logits."""
    s, b, h, a = 2048.0, 1.0, 12288.0, 96.0
    got = activation_bytes(h, 1.0, a, 0.0, 1.0, b, s, encode(["bf16"], ["adamw"], ["full"]), False, False)
    assert got[0] == pytest.approx(s * b * h * (34 + 5 * a * s / h))


def _truth(params, batch=4.0, seq=2048.0, method="full", precision="bf16", optimizer="adamw", gpus=1.0, stage=0,
           checkpointing=False, flash=True):
    h, layers, heads = transformer_shape(np.atleast_1d(params))
    return true_peak_vram_mib(params=np.atleast_1d(params), hidden=h, layers=layers, heads=heads, vocab=50_000.0,
                              logit_fraction=1.0, precision=precision, optimizer=optimizer, finetune_method=method,
                              batch_size=batch, seq_len=seq, num_gpus=gpus, zero_stage=stage, lora_fraction=0.01,
                              checkpointing=checkpointing, flash_attention=flash, fragmentation=1.1,
                              overhead_mib=700.0)[0]


settings_fast = settings(max_examples=40, deadline=None)
params_st = st.floats(1e8, 4.1e11)


@settings_fast
@given(p=params_st, factor=st.floats(1.01, 10), batch=st.sampled_from([1.0, 4.0, 32.0]),
       method=st.sampled_from(METHODS), ckpt=st.booleans(), flash=st.booleans())
def test_monotone_in_parameters(p, factor, batch, method, ckpt, flash):
    assert _truth(p * factor, batch, method=method, checkpointing=ckpt, flash=flash) > \
        _truth(p, batch, method=method, checkpointing=ckpt, flash=flash)


@settings_fast
@given(p=params_st, batch=st.sampled_from([1.0, 2.0, 8.0, 32.0]), seq=st.sampled_from([256.0, 2048.0, 8192.0]),
       precision=st.sampled_from(PRECISIONS), optimizer=st.sampled_from(OPTIMIZERS), ckpt=st.booleans(),
       stage=st.sampled_from([0, 2, 3]), gpus=st.sampled_from([1.0, 8.0, 64.0]))
def test_monotone_in_batch_and_sequence(p, batch, seq, precision, optimizer, ckpt, stage, gpus):
    kw = dict(precision=precision, optimizer=optimizer, checkpointing=ckpt, stage=stage, gpus=gpus)
    base = _truth(p, batch, seq, **kw)
    assert _truth(p, batch * 2, seq, **kw) > base
    assert _truth(p, batch, seq * 2, **kw) > base


@settings_fast
@given(p=params_st, batch=st.sampled_from([1.0, 8.0]), precision=st.sampled_from(["bf16", "fp16", "fp32"]),
       optimizer=st.sampled_from(OPTIMIZERS))
def test_lora_below_full_and_qlora_below_lora(p, batch, precision, optimizer):
    full = _truth(p, batch, method="full", precision=precision, optimizer=optimizer)
    lora = _truth(p, batch, method="lora", precision=precision, optimizer=optimizer)
    qlora = _truth(p, batch, method="qlora", precision=precision, optimizer=optimizer)
    assert qlora < lora < full


@settings_fast
@given(p=params_st, stage=st.sampled_from([2, 3]))
def test_sharding_divides_states_across_gpus(p, stage):
    per_gpu = [states(p, stage=stage, gpus=n) for n in (2, 4, 8, 64)]
    assert all(a > b for a, b in zip(per_gpu, per_gpu[1:], strict=False))
    assert states(p, stage=0, gpus=64) == states(p, stage=0, gpus=1)


def test_checkpointing_and_flash_attention_reduce_memory():
    p = 7e9
    assert _truth(p, 8, checkpointing=True) < _truth(p, 8)
    assert _truth(p, 8, flash=True) < _truth(p, 8, flash=False)


def test_analytic_equals_truth_when_hidden_settings_are_its_defaults():
    h, layers, heads = transformer_shape(np.array([7e9]))
    truth = true_peak_vram_mib(params=7e9, hidden=h, layers=layers, heads=heads, vocab=50_257.0, logit_fraction=1.0,
                               precision="bf16", optimizer="adamw", finetune_method="lora", batch_size=4.0,
                               seq_len=2048.0, num_gpus=1.0, zero_stage=0, lora_fraction=0.005,
                               checkpointing=False, flash_attention=True, fragmentation=1.0,
                               overhead_mib=ANALYTIC_OVERHEAD_MIB)
    est = analytic_peak_vram_mib(7e9, "bf16", "adamw", "lora", 4.0, 2048.0, 1.0)
    np.testing.assert_allclose(est, truth)


def test_analytic_picks_the_lowest_zero_stage_that_fits():
    args = (np.array([13e9]), "bf16", "adamw", "full", np.array([1.0]), np.array([2048.0]), np.array([8.0]))
    roomy = analytic_peak_vram_mib(*args, gpu_memory_mib=np.array([1e9]))  # everything fits: DDP
    tight = analytic_peak_vram_mib(*args, gpu_memory_mib=np.array([81920.0]))
    assert roomy[0] > 13e9 * 16 / 2**20 and tight[0] < 81920.0 < roomy[0]


@pytest.mark.parametrize(("field", "value"), [("precision", "int4"), ("optimizer", "lion"),
                                               ("finetune_method", "prefix")])
def test_unknown_descriptor_is_named(field, value):
    kw = {"precision": "bf16", "optimizer": "adamw", "finetune_method": "full", field: value}
    with pytest.raises(ValueError, match=value):
        analytic_peak_vram_mib(1e9, kw["precision"], kw["optimizer"], kw["finetune_method"], 1.0, 512.0, 1.0)
