"""The upper bound: a margin per segment over the point where every descriptor is known, the
largest plausible value covered where one is not; and the precision and quantisation paths the
held-out fine-tuning runs exercise (pure bf16 with bf16 optimizer states, nf4 QLoRA)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from features.memory_descriptors import parse_precision
from models.memory_analytic import analytic_memory, states_share, transformer_shape
from models.memory_assumptions import QUANT_BYTES
from models.memory_calibration import MemoryCalibration, shipped_calibration
from models.memory_fitting import fit_calibration, measured_view

MIB = 2.0**20
CAL = MemoryCalibration(upper_margins=(0.3, 0.1, 0.05), upper_states_share=0.5)


def job(**fields) -> pd.DataFrame:
    base = {"job_id": "j", "model_params": 7e9, "precision_mode": "bf16-true", "optimizer": "adamw",
            "finetune_method": "full", "batch_size": 1.0, "seq_len": 2048.0, "num_gpus": 1.0, "gpu_type": None,
            "parallel_strategy": "ddp", "grad_checkpointing": "full", "vocab_size": 32_000.0, "lora_rank": 16.0,
            "quantization": "none"}
    base.update(fields)
    return pd.DataFrame([base])


def parts(cal: MemoryCalibration = CAL, **fields) -> dict:
    return {k: v[0] for k, v in analytic_memory(job(**fields), calibration=cal).items()}


def test_known_descriptors_get_the_margin_of_their_segment() -> None:
    full = parts()  # 7B full fine-tune, checkpointed: model states dominate
    assert full["assumed"] == ""
    assert states_share({k: np.array([v]) for k, v in full.items()})[0] > 0.5
    assert full["upper"] == pytest.approx(full["total"] * np.exp(0.3))
    long = parts(finetune_method="lora", grad_checkpointing="off", batch_size=8.0)  # activations dominate
    assert long["upper"] == pytest.approx(long["total"] * np.exp(0.1))


def test_an_unknown_descriptor_is_covered_at_its_largest_plausible_value() -> None:
    unknown = parts(precision_mode=None, precision="bf16")
    mixed, true16 = parts(precision_mode="bf16-mixed"), parts(precision_mode="bf16-true")
    assert "precision_mode=bf16-true" in unknown["assumed"]  # the point says what it assumed
    assert unknown["total"] == pytest.approx(true16["total"])
    assert unknown["upper"] >= mixed["total"] * np.exp(0.05)  # and the bound covers mixed precision
    assert unknown["upper"] >= true16["upper"]


def test_pure_bf16_full_fine_tuning_keeps_optimizer_states_in_bf16() -> None:
    """``bf16-true``: weights, gradients and both AdamW moments in bf16, no fp32 master: 8 bytes per
    parameter, half of mixed precision's 16 (the held-out pure-bf16 runs were over-predicted 1.9x by
    an estimate that assumed mixed precision)."""
    true16, mixed = parts(precision_mode="bf16-true"), parts(precision_mode="bf16-mixed")
    assert true16["states"] == pytest.approx(7e9 * 8.0 / MIB)
    assert mixed["states"] == pytest.approx(2.0 * true16["states"])
    for spelling in ("bf16-true", "torch_dtype=bfloat16"):  # Lightning's and Hugging Face's names
        precision, mode = parse_precision(spelling)
        assert parts(precision_mode=mode, precision=precision)["states"] == pytest.approx(true16["states"])


def test_nf4_qlora_stores_the_frozen_base_in_4_bits_except_embeddings() -> None:
    p = parts(finetune_method="qlora", quantization="nf4", lora_rank=16.0)
    hidden, layers = (float(v[0]) for v in transformer_shape(np.array([7e9])))
    emb = 2.0 * 32_000.0 * hidden
    adapters = 19.0 * 16.0 * hidden * layers
    # bitsandbytes base: embedding and output layer upcast to fp32 (prepare_model_for_kbit_training)
    frozen = (7e9 - emb) * QUANT_BYTES["nf4"] + emb * 4.0
    # adapters: bf16-true trains them in 16 bits (weights, gradients, AdamW moments in bf16)
    assert p["states"] == pytest.approx((frozen + adapters * (2.0 + 2.0 + 4.0)) / MIB, rel=1e-6)
    assert p["states"] * MIB / 7e9 < 0.7  # about 4.6 GB of weights for 7B, not 14
    unknown = parts(finetune_method="qlora", quantization=None)
    assert "quantization=nf4" in unknown["assumed"] and unknown["upper"] >= p["total"]


@pytest.mark.parametrize(("quantization", "emb_bytes", "extra_logit_bytes"), [
    ("nf4", 4.0, 2.0), ("int8", 4.0, 2.0),  # bitsandbytes: PEFT upcasts what is left in 16 bits, logits fp32
    ("int4", 2.0, 0.0), ("fp8", 2.0, 0.0),  # GPTQ / AWQ, fp8: left alone
], ids=["nf4", "int8", "gptq-int4", "fp8"])
def test_unquantised_layers_of_a_bitsandbytes_base_are_fp32(quantization: str, emb_bytes: float,
                                                           extra_logit_bytes: float) -> None:
    hidden, _ = (float(v[0]) for v in transformer_shape(np.array([7e9])))
    emb = 2.0 * 32_000.0 * hidden
    q = parts(finetune_method="qlora", quantization=quantization, lora_rank=16.0)
    lora = parts(finetune_method="lora", quantization="none", lora_rank=16.0)
    frozen_q = (7e9 - emb) * QUANT_BYTES[quantization] + emb * emb_bytes
    assert (lora["states"] - q["states"]) * MIB == pytest.approx(7e9 * 2.0 - frozen_q, rel=1e-6)
    tokens_vocab = 2048.0 * 32_000.0  # the job's batch 1 x sequence 2,048, vocabulary 32k
    assert (q["logits"] - lora["logits"]) * MIB == pytest.approx(tokens_vocab * extra_logit_bytes, rel=1e-6)


def test_paged_optimizer_state_is_not_resident() -> None:
    paged, plain = parts(optimizer="paged_adamw_8bit"), parts(optimizer="adamw_8bit")
    assert plain["states"] - paged["states"] == pytest.approx(7e9 * 2.0 / MIB)  # the two 8-bit moments


def test_fitted_margins_leave_at_most_the_miss_rate_above_the_bound() -> None:
    rng = np.random.default_rng(3)
    n = 240
    jobs = pd.concat([job(job_id=f"g{i}", model_params=float(rng.choice([1.3e9, 3e9, 7e9])),
                          finetune_method=str(rng.choice(["full", "lora", "qlora"])),
                          batch_size=float(rng.choice([1.0, 4.0])), seq_len=float(rng.choice([512.0, 4096.0])),
                          grad_checkpointing=str(rng.choice(["off", "full"])),
                          precision_mode=None if i % 3 == 0 else "bf16-true", precision="bf16")
                      for i in range(n)], ignore_index=True)
    jobs["quantization"] = np.where(jobs["finetune_method"] == "qlora", "nf4", "none")
    jobs["source"] = [f"s{i % 4}" for i in range(n)]
    jobs["measured"], jobs["peak_metric"] = True, "device"
    truth = analytic_memory(jobs, calibration=MemoryCalibration())["total"]
    jobs["peak_vram_mib"] = truth * np.exp(rng.normal(0.0, 0.15, n))
    cal = fit_calibration(jobs, miss_rate=0.10)
    assert cal.upper_miss_rate == 0.10 and cal.upper_margins[2] >= 0.0
    assert 0.1 < cal.upper_margins[0] < 0.4 and 0.1 < cal.upper_margins[1] < 0.4  # ~ the 90 % point of N(0, 0.15)
    view = measured_view(jobs, cal)
    actual = jobs["peak_vram_mib"].to_numpy()
    assert np.mean(actual > view["upper"]) <= 0.12
    assert np.all(view["upper"][view["unknown"]] >= view["total"][view["unknown"]])


def test_the_shipped_bound_was_validated_by_leaving_each_source_out() -> None:
    """The figures recorded when the shipped calibration was fitted (``python -m models.memory_fitting``):
    the issue's three targets on held-out sources, reported apart for known and unknown descriptors."""
    validation = shipped_calibration().validation["leave_one_source_out"]
    assert validation["targets_met"] == {"within_50pct": True, "underestimate_rate": True,
                                         "mean_overreserve_ratio": True}
    parts = (validation["all_known"], validation["some_unknown"])
    assert sum(p["n"] for p in parts) == validation["n"] and all(p["n"] > 100 for p in parts)
    assert all(p["underestimate_rate"] <= 0.10 for p in parts)
