"""Job names the way people write them: a family stem plus dates, run counters or seeds.

A family's stem is ``<model>-<task>-<dataset>[-<tag>]`` (``llama3.1-8b-qlora-sft-alpaca-ema``);
its runs add one of five suffix habits chosen per family: ``-<YYYY-MM-DD>-run<k>``, ``-v<k>``,
``-seed<r>``, ``-<YYYYMMDD>-<HHMM>`` or nothing, where ``k`` counts the family's runs in
submission order. Stripping digits from a name therefore recovers the stem plus punctuation (model
slugs such as ``llama3.1-8b`` lose their digits too, consistently), which is what a family key
extractor does. One-off jobs are ``<scratch word>-<stem>-<number>``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from features.synth.memory_truth import METHODS
from features.synth.zoo import zoo_array

__all__ = ["family_stems", "job_names"]

_TASKS = {
    ("clm", "full"): ("pretrain", "sft", "ft", "distill", "dpo", "cpt"),
    ("mlm", "full"): ("mlm", "ft", "cls", "ner"),
    ("seq2seq", "full"): ("ft", "sum", "mt"),
    ("vision", "full"): ("cls", "mae", "ft", "det"),
}
_ADAPTER_TASKS = {"lora": ("lora-sft", "lora", "lora-dpo"), "qlora": ("qlora", "qlora-sft")}
_DATASETS = ("alpaca", "oasst", "wiki", "c4", "pile", "redpajama", "gsm", "mmlu", "code", "slimpj", "ultrachat",
             "dolly", "squad", "glue", "openwebtext", "arxiv", "books", "news", "chat", "math", "tulu",
             "sharegpt", "lmsys", "fineweb", "dclm", "legal", "med", "finance", "support", "search")
_VISION_DATASETS = ("imagenet", "coco", "laion", "inat", "ade", "places", "openimages", "cityscapes")
_TAGS = ("base", "long", "lowlr", "warmup", "ablate", "sweep", "baseline", "new", "exp", "final", "fix", "bigbatch",
         "cosine", "ema", "mix", "clean", "dedup", "filtered", "packed", "curriculum")
_SCRATCH = ("tmp", "test", "try", "debug", "check", "scratch", "quick", "repro")
#: Suffix habits and how common each is among families.
TEMPLATES = ("date_run", "version", "seed", "timestamp", "plain")
_TEMPLATE_WEIGHTS = np.array([0.35, 0.2, 0.15, 0.2, 0.1])


def _pick(rng: np.random.Generator, options: tuple[str, ...], n: int) -> np.ndarray:
    return np.array(options, dtype=object)[rng.integers(0, len(options), n)]


def family_stems(rng: np.random.Generator, model: np.ndarray, finetune: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Name stem and suffix template (index into :data:`TEMPLATES`) for each family.

    ``finetune`` holds codes into :data:`features.synth.memory_truth.METHODS`.
    """
    n = len(model)
    kind = zoo_array("kind")[model]
    task = np.empty(n, dtype=object)
    for (k, method), options in _TASKS.items():
        m = (kind == k) & (finetune == METHODS.index(method))
        task[m] = _pick(rng, options, int(m.sum()))
    for method, options in _ADAPTER_TASKS.items():
        m = finetune == METHODS.index(method)
        task[m] = _pick(rng, options, int(m.sum()))
    data = np.where(kind == "vision", _pick(rng, _VISION_DATASETS, n), _pick(rng, _DATASETS, n))
    tag = np.where(rng.random(n) < 0.5, "-" + _pick(rng, _TAGS, n), "")
    stems = pd.Series(zoo_array("slug")[model], dtype="string") + "-" + pd.Series(task, dtype="string") + "-" \
        + pd.Series(data, dtype="string") + pd.Series(tag, dtype="string")
    template = rng.choice(len(TEMPLATES), n, p=_TEMPLATE_WEIGHTS)
    return stems.to_numpy(dtype=object), template


def _run_index(fam_of_job: np.ndarray, submit_ts: np.ndarray) -> np.ndarray:
    """1-based position of each job among its family's jobs in submission order."""
    order = np.lexsort((submit_ts, fam_of_job))
    fam_sorted = fam_of_job[order]
    first = np.r_[True, fam_sorted[1:] != fam_sorted[:-1]]
    start_pos = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    k = np.empty(len(order), dtype=np.int64)
    k[order] = np.arange(len(order)) - start_pos + 1
    return k


def _dictionary(codes: np.ndarray, words) -> pa.Array:
    """Decode integer codes through a small vocabulary into a string array (fast for 1M rows)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(list(words), pa.string())).cast(pa.string())


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def job_names(rng: np.random.Generator, stems: np.ndarray, template: np.ndarray, fam_of_job: np.ndarray,
              recurring: np.ndarray, submit_ts: np.ndarray) -> pa.Array:
    """Job name of each job, as a pyarrow string array in job order."""
    n = len(fam_of_job)
    k = pc.cast(pa.array(_run_index(fam_of_job, submit_ts)), pa.string())
    tmpl = np.where(recurring, template[fam_of_job], -1)
    stem = _dictionary(fam_of_job, stems)
    day_index = np.floor(submit_ts / 86400.0).astype(np.int64)
    days, day_of_job = np.unique(day_index, return_inverse=True)
    day_text = np.datetime_as_string(days.astype("datetime64[D]"))
    minute = ((submit_ts % 86400.0) // 60).astype(np.int64)
    hhmm = [f"{m // 60:02d}{m % 60:02d}" for m in range(1440)]
    parts: list[pa.Array] = []
    where: list[np.ndarray] = []
    for code in range(-1, len(TEMPLATES)):
        idx = np.flatnonzero(tmpl == code)
        if not len(idx):
            continue
        take = pa.array(idx)
        st = pc.take(stem, take)
        name = TEMPLATES[code] if code >= 0 else "oneoff"
        if name == "date_run":
            names = _join(st, "-", _dictionary(day_of_job[idx], day_text), "-run", pc.take(k, take))
        elif name == "version":
            names = _join(st, "-v", pc.take(k, take))
        elif name == "seed":
            names = _join(st, "-seed", _dictionary(rng.integers(0, 5, len(idx)), "01234"))
        elif name == "timestamp":
            compact = [d.replace("-", "") for d in day_text]
            names = _join(st, "-", _dictionary(day_of_job[idx], compact), "-", _dictionary(minute[idx], hhmm))
        elif name == "plain":
            names = st
        else:
            number = pc.cast(pa.array(rng.integers(100, 100_000, len(idx))), pa.string())
            names = _join(_dictionary(rng.integers(0, len(_SCRATCH), len(idx)), _SCRATCH), "-", st, "-", number)
        parts.append(names)
        where.append(idx)
    combined = pa.concat_arrays(parts)
    position = np.empty(n, dtype=np.int64)
    position[np.concatenate(where)] = np.arange(n)
    return pc.take(combined, pa.array(position))
