"""Reading published peak-memory tables: the authors' words become canonical descriptors."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features.errors import InputError
from models.memory_measured import MEASURED_COLUMNS, read_measured_folder, read_measured_table

ROWS = [
    # model, params_b, method, precision, quantization, optimizer, micro_batch, seq_len, ckpt, gpus, gpu, parallelism,
    # peak GiB, notes
    ("meta-llama/Llama-2-7b-hf", "6.74", "QLoRA r=64 alpha=16 targets=all linear", "bf16 (train.py default)",
     "bitsandbytes 4-bit NF4", "AdamW (torch)", "4", "2048", "on (reentrant=True)", "2", "RTX 3090 24GB",
     "FSDP FULL_SHARD + FSDP CPU offload", "11.2", "MEASURED torch.cuda.max_memory_reserved per rank"),
    ("Qwen-7B", "", "full", "bf16 mixed", "none", "adamw_8bit (bitsandbytes)", "not stated (benchmark default 4)",
     "8192 (default)", "selective AC", "8", "A100 (80GB presumed)", "FSDP 4, CP 2 x TP 2", "40",
     "measured nvidia-smi"),
    ("LFM2-350M", "", "full", "bf16", "none", "adamw_torch_fused", "4", "224x224", "False", "1", "48GB GPU",
     "single GPU", "25", "observed/approximate ('about')"),
    ("Llama-3.2-3B", "3.21", "LoRA r=8 q,v", "bfloat16", "none", "AdamW + optimizer_in_bwd", "2", "4096",
     "unstated (config default on)", "2", "H100 80GB", "DDP / DeepSpeed per script", "9",
     "measured 'Peak Memory Active (GiB)'; chunked CE"),
]


def write_table(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(MEASURED_COLUMNS)
        for row in rows:
            writer.writerow(("org/repo", "README.md@abc", *row))
    return path


def test_the_authors_words_become_descriptors(tmp_path) -> None:
    jobs = read_measured_table(write_table(tmp_path / "example.csv", ROWS))
    a, b, c, d = (jobs.iloc[i] for i in range(4))
    assert (a["finetune_method"], a["quantization"], a["lora_rank"], a["parallel_strategy"]) == (
        "qlora", "nf4", 64.0, "fsdp-offload")
    assert (a["grad_checkpointing"], a["gpu_type"], a["peak_metric"], a["measured"]) == (
        "full", "RTX3090", "reserved", True)
    assert a["peak_vram_mib"] == pytest.approx(11.2 * 1024) and a["model_params"] == pytest.approx(6.74e9)
    assert a["vocab_size"] == 32_000.0 and a["source"] == "example"
    assert b["model_params"] == 7e9 and b["precision_mode"] == "bf16-mixed" and b["optimizer"] == "adamw_8bit"
    assert (b["batch_size"], b["seq_len"], b["grad_checkpointing"]) == (4.0, 8192.0, "selective")
    assert (b["tensor_parallel_size"], b["context_parallel_size"], b["parallel_strategy"]) == (2.0, 2.0, "fsdp")
    assert b["peak_metric"] == "device" and b["gpu_type"] == "A100-80GB" and b["vocab_size"] == 151_936.0
    assert not c["measured"] and np.isnan(c["seq_len"]) and c["image_size"] == 224.0
    assert c["model_params"] == 350e6 and c["grad_checkpointing"] == "off"
    assert d["precision"] == "bf16" and pd.isna(d["precision_mode"])  # "bfloat16" alone: the mode is unknown
    assert d["optimizer"] == "adamw_in_bwd" and d["loss_implementation"] == "chunked"
    assert d["peak_metric"] == "allocated" and pd.isna(d["parallel_strategy"]) and pd.isna(d["grad_checkpointing"])


def test_not_a_measured_table(tmp_path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="missing column"):
        read_measured_table(path)
    with pytest.raises(InputError, match="no measured-peak tables"):
        read_measured_folder(tmp_path / "empty")


def test_shared_tables(shared_file) -> None:
    measured = shared_file("gpu-memory/measured")
    jobs = read_measured_folder(measured)
    assert len(jobs) == 566 and jobs["source"].nunique() == 12
    assert int(jobs["measured"].sum()) == 502  # axolotl's approximate and torchtune's estimated rows are not
    assert int((jobs["measured"] & (jobs["model_params"] > 0)).sum()) == 460
    assert not jobs.loc[jobs["source"] == "axolotl", "measured"].any()
