"""Published peak-memory tables (the ``gpu-memory/measured`` format) as canonical job rows.

Format: one CSV per source project, columns ``source_repo, source_path, model, params_b, method,
precision, quantization, optimizer, micro_batch, seq_len, grad_checkpointing, num_gpus, gpu_type,
parallelism, peak_mem_gib_per_gpu, notes``; the cells are the table author's words ("bf16 (AUTO on
A100)", "on (config default)", "FSDP FULL_SHARD + FSDP CPU offload"). A row counts as a measurement
only when its ``notes`` start with ``measured`` (any case); ``ESTIMATE`` and ``observed/approximate``
rows are read but flagged ``measured=False``.

How the words become descriptors (the parsing of each spelling is ``features.memory_descriptors``;
this module strips the authors' annotations first):

* ``params_b`` x 1e9, else a size token in the model name (``LFM2-8B-A1B`` -> 8e9, the total); the
  vocabulary from the model family (``features.memory_conventions.vocab_from_model_name``).
* method: ``qlora``/``q-lora`` -> qlora; any other adapter (LoRA and its variants, IA3, prompt and
  prefix tuning, BOFT, OFT ...) -> lora; ``full``, pretraining and training from scratch -> full.
  ``r=8``, ``rank32``, ``lora_rank=32`` -> ``lora_rank``.
* precision: ``mixed``/``AMP`` -> ``X-mixed``; ``use_amp=False`` in the notes or ``mixed_precision
  no`` -> ``bf16-true``; FSDP2 mixed precision (``fp32 reduce``) -> ``bf16-mixed``; ``Float8`` ->
  ``fp8``; torchtune's recipes train in pure bf16 (``dtype: bf16``) -> ``bf16-true``; otherwise a
  bare ``bf16``/``fp16`` leaves the mode unknown, as a job log would.
* quantisation: bitsandbytes 4-bit / NF4 -> nf4, GPTQ / AWQ / ChatGLM 4-bit -> int4, 8-bit -> int8,
  NVFP4 -> fp4, AQLM 2-bit -> int4 (an overestimate).
* optimizer: 8-bit AdamW variants -> ``adamw_8bit``, 4-bit -> ``adamw_4bit``, Adafactor, SGD, GaLore
  (ms-swift's ``full+galore`` tuners) -> ``galore_adamw``, else AdamW; ``paged_`` and ``_in_bwd``
  (torchtune's ``optimizer_in_bwd``) kept as prefix / suffix. LISA (a few sampled layers trained)
  counts as an adapter method.
* micro-batch and sequence length: the first number of the cell ("8192 (default)", "not stated
  (notebook default max_seq_length 2048 presumed)" -> 2048); image inputs ("224x224") and unstated
  lengths stay null; an image cell gives ``image_size`` (``224x224`` -> 224, COCO -> 1000).
* checkpointing: on/True/full AC -> full, selective AC -> selective, off/False -> off, unstated -> null.
* parallelism: FSDP / FULL_SHARD / FSDP2 -> fsdp (``fsdp-offload`` with CPU offload), NO_SHARD and
  DDP -> ddp, DeepSpeed ZeRO-n -> zeron(-offload), ``TP n`` / ``PP n`` -> the sizes, naive model
  parallel (``device_map`` split) -> pipeline size = GPUs; ``CP n`` / ``sequence_parallel_size=n`` ->
  context-parallel size; single GPU -> ddp; ambiguous -> null.
* loss: "chunked CE" in the notes -> ``chunked``, Cut Cross-Entropy / Liger -> ``fused``.
* peak: ``peak_mem_gib_per_gpu`` x 1024 MiB; ``peak_metric`` says what it measures (``allocated``:
  torch's peak active/allocated; ``reserved``: the caching allocator's peak; ``device``:
  nvidia-smi/NVML, and unstated ones), from the notes.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from features.errors import InputError
from features.memory_conventions import vocab_from_model_name
from features.memory_descriptors import parse_grad_checkpointing
from features.schema import conform

__all__ = ["MEASURED_COLUMNS", "read_measured_table", "read_measured_folder"]

MEASURED_COLUMNS = ("source_repo", "source_path", "model", "params_b", "method", "precision", "quantization",
                    "optimizer", "micro_batch", "seq_len", "grad_checkpointing", "num_gpus", "gpu_type", "parallelism",
                    "peak_mem_gib_per_gpu", "notes")
_ADAPTERS = ("lora", "dora", "loha", "lokr", "ia3", "prompt", "prefix", "p-tuning", "ptuning", "adaption", "boft",
             "oft", "fourierft", "ln_tuning", "vera", "bone", "miss", "c3a", "hra", "shira", "road", "deft", "frod",
             "hira", "lily", "osf", "peanut", "randlora", "trainable_tokens", "waveft", "vblora", "cpt", "glora",
             "gralora", "adamss", "delora", "peft", "adapter", "velora", "poly", "xlora", "lorafa", "corda", "pissa")
#: torchvision's detection references resize COCO images to 800 x 1333: about a 1000-pixel square.
COCO_IMAGE_SIZE = 1000.0
_GPU_TYPES = (("a100", "80", "A100-80GB"), ("a100", "40", "A100-40GB"), ("h100", "80", "H100-80GB"),
              ("h100", "96", "H100-94GB"), ("rtx 4090", "", "RTX4090"), ("rtx 3090", "", "RTX3090"),
              ("rtx a6000", "", "A6000"),
              ("h200", "", "H200"), ("l40s", "", "L40S"), ("a40", "", "A40"), ("t4", "", "T4"),
              ("v100", "32", "V100M32"), ("v100", "", "V100"), ("a10", "", "A10"))


def _number(text: object) -> float:
    match = re.search(r"(\d+(?:\.\d+)?)", str(text)) if isinstance(text, str) else None
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    return float(match.group(1)) if match else np.nan


def _params(row: pd.Series) -> float:
    if pd.notna(row["params_b"]):
        return float(row["params_b"]) * 1e9
    match = re.search(r"(?<![A-Za-z])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])", str(row["model"]))
    if not match:
        return np.nan
    return float(match.group(1)) * (1e9 if match.group(2) in "Bb" else 1e6)


def _method(text: str) -> str:
    s = text.lower()
    if "lisa" in s:  # LISA trains a few sampled layers of a frozen model: adapter-like memory
        return "lora"
    if "qlora" in s or "q-lora" in s:
        return "qlora"
    if any(a in s for a in _ADAPTERS) and "full_finetune" not in s and "full-finetuning" not in s:
        return "lora"
    return "full"


def _rank(text: str) -> float:
    match = re.search(r"(?:\br\s*=\s*|lora_rank\s*=\s*|\brank)(\d+)", text.lower())
    return float(match.group(1)) if match else np.nan


def _trainable(method: str, notes: str, params: float, vocab: float | None) -> float:
    """Trainable parameters where the table states them (``trainable=N``, ``trainable 17.9(0.2%)M``)."""
    if match := re.search(r"trainable=(\d+)", notes):
        return float(match.group(1))
    if match := re.search(r"trainable (\d+(?:\.\d+)?)\([\d.]+%\)M", method):
        return float(match.group(1)) * 1e6
    if "trainable wte & lm_head" in method and vocab and params > 0:  # Qwen's "LoRA (emb)": embeddings train
        hidden = np.cbrt(100.0 * params / 12.0)  # the estimate's own shape rule (models.memory_analytic)
        return 2.0 * vocab * hidden
    return np.nan


def _precision_mode(precision: str, notes: str, source: str) -> tuple[str | None, str | None]:
    p, n = precision.lower(), notes.lower()
    if "float8" in p:
        return "fp8", "fp8"
    if "fp32" in p and "reduce" not in p:
        return "fp32", "fp32"
    kind = "fp16" if "fp16" in p and "bf16" not in p else "bf16" if ("bf16" in p or "bfloat16" in p) else None
    if kind is None:
        return None, None
    if "mixed" in p or "amp" in p or "fp32 reduce" in p:
        return kind, f"{kind}-mixed"
    if "mixed_precision no" in p or "use_amp=false" in n or source == "torchtune":
        return kind, f"{kind}-true"
    return kind, None


def _quantization(text: str) -> str | None:
    s = text.lower()
    if s in ("none", ""):
        return "none"
    if "nvfp4" in s:
        return "fp4"
    if "8-bit" in s or "int8" in s or "8bit" in s:
        return "int8"
    if "gptq" in s or "awq" in s or "chatglm" in s or "aqlm" in s:
        return "int4"
    if "4-bit" in s or "4bit" in s or "nf4" in s or "int4" in s:
        return "nf4"
    return None


def _optimizer(text: str, method: str) -> str:
    s = text.lower()
    if "galore" in method.lower():
        name = "galore_adamw"
    elif "4bit" in s or "4-bit" in s:
        name = "adamw_4bit"
    elif "8bit" in s or "8-bit" in s:
        name = "adamw_8bit"
    elif "adafactor" in s:
        name = "adafactor"
    elif s.startswith("sgd"):
        name = "sgd"
    else:
        name = "adamw"
    if "paged" in s:
        name = "paged_" + name
    return name + ("_in_bwd" if "optimizer_in_bwd" in s else "")


def _checkpointing(text: object) -> str | None:
    if not isinstance(text, str) and not isinstance(text, bool):
        return None
    s = str(text).lower().strip()
    if s.startswith(("unstated", "not stated")):
        return None
    if s.startswith("selective"):
        return "selective"
    if s.startswith(("full ac", "offload")):
        return "full"
    try:
        return parse_grad_checkpointing(s.split(" ")[0])
    except ValueError:
        return None


def _parallelism(text: str, gpus: float) -> tuple[str | None, float, float, float]:
    s = text.lower()
    tp = float(m.group(1)) if (m := re.search(r"\btp\s*(\d+)", s)) else 1.0
    pp = float(m.group(1)) if (m := re.search(r"\bpp\s*(\d+)", s)) else 1.0
    cp = float(m.group(1)) if (m := re.search(r"\bcp\s*(\d+)|sequence_parallel_size=(\d+)", s)) and m.group(1) else \
        float(m.group(2)) if m else 1.0
    offload = ("offload" in s and "offload_params=false" not in s and "no offload" not in s
               and "no cpu offload" not in s)
    if "naive model parallel" in s or "device_map" in s:
        return "ddp", 1.0, gpus, 1.0
    if "zero-3" in s or "zero3" in s:
        return ("zero3-offload" if offload else "zero3"), tp, pp, cp
    if "zero-2" in s or "zero2" in s:
        return ("zero2-offload" if offload else "zero2"), tp, pp, cp
    if "no_shard" in s:
        return "ddp", tp, pp, cp
    if "fsdp" in s or "full_shard" in s:
        return ("fsdp-offload" if offload else "fsdp"), tp, pp, cp
    if "ddp / deepspeed" in s:
        return None, tp, pp, cp
    if "ddp" in s or "dataparallel" in s or "single" in s or gpus == 1 or "sequence_parallel" in s:
        return "ddp", tp, pp, cp
    return None, tp, pp, cp


def _image_size(text: str) -> float:
    s = text.lower()
    if "coco" in s:
        return COCO_IMAGE_SIZE
    match = re.search(r"(\d+)\s*x\s*(\d+)|(\d+)\s*px", s)
    if not match:
        return np.nan
    return float(max(int(g) for g in match.groups() if g))


def _loss(notes: str) -> str | None:
    n = notes.lower()
    if "chunked ce" in n or "chunkedce" in n or "cewithchunkedoutputloss" in n:
        return "chunked"
    if "cut_cross_entropy" in n or "liger" in n:
        return "fused"
    return None


def _peak_metric(notes: str) -> str:
    """What the peak measures: ``allocated`` (torch's peak allocated/active), ``reserved`` (the
    caching allocator's peak), ``device`` (nvidia-smi / NVML: the process's whole use; also unknown)."""
    n = notes.lower()
    if "nvidia-smi" in n or "pynvml" in n:
        return "device"
    if "peak memory active" in n or "max_memory_allocated" in n or "tracemalloc" in n:
        return "allocated"
    if "reserved" in n:
        return "reserved"
    return "device"


def _gpu_type(text: object) -> str | None:
    s = str(text).lower()
    for name, size, canonical in _GPU_TYPES:
        if re.search(rf"\b{name}\b", s.replace("-", " ")) and size in s:
            return canonical
    return None


def read_measured_table(path: Path) -> pd.DataFrame:
    """One source's CSV as canonical rows plus ``model_name``, ``source_repo``, ``measured``,
    ``peak_metric`` and ``source`` (the file's stem).

    Raises
    ------
    InputError
        When the file lacks the format's columns.
    """
    path = Path(path)
    try:
        raw = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    missing = [c for c in MEASURED_COLUMNS if c not in raw.columns]
    if missing:
        raise InputError(f"{path}: not a measured-peak table: missing column(s) {', '.join(missing)}")
    source = path.stem
    rows = []
    for i, row in raw.iterrows():
        notes = str(row["notes"]) if pd.notna(row["notes"]) else ""
        precision, mode = _precision_mode(str(row["precision"]), notes, source)
        gpus = _number(row["num_gpus"])
        strategy, tp, pp, cp = _parallelism(str(row["parallelism"]), gpus)
        method = _method(str(row["method"]))
        quant = _quantization(str(row["quantization"]))
        if method == "lora" and quant in ("nf4", "fp4", "int4"):
            method = "qlora"
        seq_text = str(row["seq_len"])
        image = bool(re.search(r"\d+x\d+|px|image", seq_text, flags=re.I))
        rows.append({
            "job_id": f"{source}-{i}", "source": source, "model_name": str(row["model"]),
            "source_repo": str(row["source_repo"]),
            "measured": notes.lower().startswith("measured"), "submit_ts": float(i), "state": "COMPLETED",
            "model_params": _params(row), "finetune_method": method,
            "vocab_size": vocab_from_model_name(str(row["model"])),
            "lora_rank": _rank(str(row["method"])) if method != "full" else np.nan,
            "trainable_params": _trainable(str(row["method"]), notes, _params(row),
                                           vocab_from_model_name(str(row["model"]))),
            "precision": precision, "precision_mode": mode, "quantization": quant,
            "optimizer": _optimizer(str(row["optimizer"]), str(row["method"])),
            "batch_size": _number(row["micro_batch"]),
            "seq_len": np.nan if image else _number(seq_text),
            "image_size": _image_size(seq_text),
            "grad_checkpointing": _checkpointing(row["grad_checkpointing"]),
            "loss_implementation": _loss(notes), "peak_metric": _peak_metric(notes),
            "num_gpus": gpus, "gpu_type": _gpu_type(row["gpu_type"]),
            "parallel_strategy": strategy, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
            "context_parallel_size": cp,
            "peak_vram_mib": float(row["peak_mem_gib_per_gpu"]) * 1024.0,
        })
    return conform(pd.DataFrame(rows))


def read_measured_folder(folder: Path) -> pd.DataFrame:
    """Every ``*.csv`` of a folder (one source each), concatenated in file-name order."""
    paths = sorted(Path(folder).glob("*.csv"))
    if not paths:
        raise InputError(f"no measured-peak tables (*.csv) in {folder}")
    return pd.concat([read_measured_table(p) for p in paths], ignore_index=True)
