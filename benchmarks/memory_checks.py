"""Peak GPU memory checks that ``bench_predict.py`` prints under ``memory``.

* Leave one source out on the measured tables (``gpu-memory/measured``,
  ``models.memory_fitting.leave_one_source_out``): constants and bound margins fitted on every
  source but one, scored on the one left out, for each source in turn; per-source table, pooled
  metrics against the issue's targets, and the pooled metrics of rows whose descriptors were all
  known apart from those where the estimate assumed some (``all_known`` / ``some_unknown``).
* ``llm_finetuning``: the same held-out predictions restricted to LLM fine-tuning runs (a text
  model of 1e9 parameters or more, every source but torchtitan, whose runs are pretraining), pooled
  and per method (full / LoRA / QLoRA): the runs the issue's held-out set is made of.
* ``descriptors_removed``: the same with the held-out rows' memory descriptors emptied (a log that
  records only size, precision, method, optimizer, batch, sequence and GPUs).
* ``hardware_tiers``: what the shipped estimate gives for the article's three tiers (the same jobs
  as ``tests/models/test_memory_tiers.py``), GiB per GPU.
* ``shipped``: the calibration in ``models/calibration/memory.json``.

Run alone: ``python benchmarks/memory_checks.py`` (prints the JSON; exits 2 without the tables).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from models.memory_analytic import GPU_MEMORY_MIB, analytic_memory
from models.memory_calibration import FITTED, shipped_calibration
from models.memory_fitting import labelled_rows, leave_one_source_out
from models.memory_measured import read_measured_folder
from models.metrics import point_metrics, reservation_metrics

MEMORY_DESCRIPTORS = ("precision_mode", "quantization", "parallel_strategy", "tensor_parallel_size",
                      "pipeline_parallel_size", "context_parallel_size", "grad_checkpointing", "loss_implementation",
                      "lora_rank", "trainable_params", "vocab_size")
GIB = 1024.0
_TABLE_KEYS = ("source", "rows", "within_50pct", "underestimate_rate", "mean_overreserve_ratio", "median_ratio",
               "prior_within_50pct", "note")


def _estimate(**fields) -> dict[str, float | str]:
    row = {"job_id": "j", "num_gpus": 1.0, "batch_size": 2.0, "seq_len": 2048.0, "grad_checkpointing": "full",
           "vocab_size": 128_256.0, "optimizer": "adamw", **fields}
    parts = analytic_memory(pd.DataFrame([row]))
    return {k: (round(float(v[0]) / GIB, 1) if k in ("states", "total", "upper") else v[0])
            for k, v in parts.items() if k in ("states", "total", "upper", "assumed")}


def hardware_tiers() -> dict:
    """The article's tiers as the shipped estimate answers them (GiB per GPU)."""
    a100, h100 = GPU_MEMORY_MIB["A100-80GB"] / GIB, GPU_MEMORY_MIB["H100-80GB"] / GIB
    peft = {f"{method} {int(params / 1e9)}B": _estimate(model_params=params, finetune_method=method,
                                                          precision_mode="bf16-true", lora_rank=16.0)
            for method in ("lora", "qlora") for params in (8e9, 13e9)}
    full70 = {
        "states_bytes_per_param": {mode: round(_estimate(model_params=70e9, finetune_method="full", precision_mode=mode,
                                                         parallel_strategy="ddp")["states"] * GIB * 2**20 / 70e9, 2)
                                   for mode in ("bf16-true", "bf16-mixed")},
        "article_gb": 840, "article_bytes_per_param": 12,
        **{f"zero3 over {n} GPUs": _estimate(model_params=70e9, finetune_method="full", precision="bf16",
                                             num_gpus=float(n), parallel_strategy="zero3") for n in (8, 32, 64)},
    }
    lora405 = _estimate(model_params=405e9, finetune_method="lora", precision_mode="bf16-true", quantization="fp8",
                        num_gpus=8.0, tensor_parallel_size=8.0, parallel_strategy="ddp", batch_size=1.0,
                        lora_rank=16.0, gpu_type="H100-80GB")
    full405 = _estimate(model_params=405e9, finetune_method="full", precision_mode="fp8", num_gpus=8.0,
                        parallel_strategy="fsdp", batch_size=1.0)
    return {
        "peft_8b_13b_on_one_a100_80gb": {"gpu_gib": round(a100, 1), **peft,
                                         "all_fit": all(p["upper"] <= a100 for p in peft.values())},
        "full_70b": {**full70, "one_node_fits": full70["zero3 over 8 GPUs"]["total"] <= h100},
        "fp8_405b_on_8x_h100": {"gpu_gib": round(h100, 1), "lora_tp8": lora405,
                                "node_states_gb": round(lora405["states"] * 8 * GIB * 2**20 / 1e9),
                                "fits": lora405["upper"] <= h100, "full_fsdp8": full405},
    }


#: Sources whose runs are pretraining, not fine-tuning.
PRETRAINING_SOURCES = ("torchtitan",)


def _scores(preds: pd.DataFrame) -> dict:
    a = preds["measured_mib"].to_numpy()
    m = {**point_metrics(preds["point_mib"].to_numpy(), a), **reservation_metrics(preds["upper_mib"].to_numpy(), a)}
    return {"n": int(len(preds)), **{k: m[k] for k in ("within_50pct", "underestimate_rate", "mean_overreserve_ratio")},
            "median_ratio": float((preds["point_mib"] / preds["measured_mib"]).median())}


def llm_finetuning(jobs: pd.DataFrame, preds: pd.DataFrame) -> dict:
    """Held-out metrics of the LLM fine-tuning rows (module docstring), pooled and per method."""
    rows = labelled_rows(jobs)[["job_id", "model_params", "seq_len", "finetune_method"]]
    p = preds.merge(rows, on="job_id", how="left")
    keep = (p["model_params"] >= 1e9) & (p["seq_len"] > 0) & ~p["source"].isin(PRETRAINING_SOURCES)
    p = p.loc[keep]
    method = p["finetune_method"].fillna("full").astype(str).str.lower()
    return {"pooled": _scores(p), **{m: _scores(p.loc[method == m]) for m in ("full", "lora", "qlora")},
            "per_source": {name: _scores(g) for name, g in p.groupby("source")}}


def memory_checks(folder: Path) -> dict:
    """Every memory figure of ``docs/benchmarks.md`` ("Peak GPU memory, leave one source out")."""
    jobs = read_measured_folder(folder)
    sources = sorted(set(jobs["source"].astype(str)))
    started = time.process_time()
    table, pooled, preds = leave_one_source_out(jobs, sources=sources)
    seconds = time.process_time() - started
    _, stripped, _ = leave_one_source_out(jobs, sources=sources, blank_for_prediction=MEMORY_DESCRIPTORS)
    shipped = asdict(shipped_calibration())
    return {
        "rows": int(len(jobs)), "measured_rows_with_size": int(pooled.get("n", 0)),
        "loso_cpu_seconds": round(seconds, 1),
        "leave_one_source_out": pooled,
        "llm_finetuning": llm_finetuning(jobs, preds),
        "per_source": [{k: v for k, v in row.items() if k in _TABLE_KEYS and v == v} for row in table.to_dict("records")],
        "descriptors_removed": stripped,
        "hardware_tiers": hardware_tiers(),
        "shipped": {k: v for k, v in shipped.items()
                    if k in FITTED or k in ("upper_margins", "upper_miss_rate", "upper_states_share")},
    }


def main() -> int:
    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "gpu-memory" / "measured"
    if not folder.is_dir():
        print(f"measured tables missing: {folder}", file=sys.stderr)
        return 2
    print(json.dumps(memory_checks(folder), indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
