"""CPU per ``analytic_memory`` call, the frozen vectorised reference against the code now; prints JSON.

Issue 17: the serving path's analytic memory estimate. For each row set -- synthetic jobs
(``features.synth``, every memory descriptor missing, as most cluster logs), the measured tables'
rows (``models.memory_measured``, descriptors mostly known) and random combinations of every
descriptor (``tests/models/memory_rows.py``) -- times calls of 1 row and of 100 rows, the reference
(``tests/models/reference_memory_analytic.py``, the code before the fast paths) and the current
``models.memory_analytic.analytic_memory`` back to back in each repeat, with ``time.process_time``;
reports the median over repeats of CPU microseconds per call and their ratio. The jobs come as
``JobColumns`` whose columns were read once before timing (as in serving, where the features read
them first).

Also checks that both give identical ``MemoryParts`` on every measured row (one call on the whole
table, and row by row), with and without the memory descriptors (what ``memory_checks.py``'s
numbers are computed from).

Run: ``PYTHONPATH=. python benchmarks/bench_memory_analytic.py [--repeat 7]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import numpy as np
import pandas as pd

from features.job_keys import JobColumns
from models import memory_analytic as ma
from tests.models import reference_memory_analytic as ref
from tests.models.memory_rows import POOLS, measured_rows, random_rows, synthetic_rows

DESCRIPTORS = ("precision_mode", "quantization", "parallel_strategy", "tensor_parallel_size", "pipeline_parallel_size",
               "context_parallel_size", "grad_checkpointing", "loss_implementation", "lora_rank", "trainable_params",
               "vocab_size")


def batches(frame: pd.DataFrame, size: int, count: int) -> list[JobColumns]:
    """``count`` batches of ``size`` consecutive rows, as ``JobColumns`` with their columns already read."""
    out = []
    for start in range(0, min(len(frame), size * count), size):
        jobs = JobColumns(frame.iloc[start:start + size].reset_index(drop=True))
        ref.analytic_memory(jobs)  # reads (and caches) the columns
        out.append(jobs)
    return out


def cpu_us(fn, jobs: list[JobColumns]) -> float:  # noqa: ANN001
    start = time.process_time()
    for j in jobs:
        fn(j)
    return (time.process_time() - start) / len(jobs) * 1e6


def identical(a: ma.MemoryParts, b: ma.MemoryParts) -> bool:
    for key in b:
        x, y = a[key], b[key]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if y.dtype == object:
            if x.tolist() != y.tolist():
                return False
        elif not np.array_equal(x, y, equal_nan=True):
            return False
    return list(a) == list(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--single-calls", type=int, default=200, help="1-row calls per repeat and row set")
    parser.add_argument("--batch-calls", type=int, default=10, help="100-row calls per repeat and row set")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    measured = measured_rows()
    sets = {"synthetic": synthetic_rows(2_000, seed=7)[list(POOLS)], "random": random_rows(2_000, seed=3)}
    if measured is not None:
        sets["measured"] = measured[list(POOLS)].sample(frac=1.0, random_state=0).reset_index(drop=True)
    result: dict = {"repeat": args.repeat, "scalar_rows": ma.SCALAR_ROWS, "cpu_us_per_call": {}}
    for name, frame in sets.items():
        for size, count in ((1, args.single_calls), (100, args.batch_calls)):
            jobs = batches(frame, size, count)
            old, new = [], []
            for _ in range(args.repeat):
                old.append(cpu_us(ref.analytic_memory, jobs))
                new.append(cpu_us(ma.analytic_memory, jobs))
            o, n = statistics.median(old), statistics.median(new)
            result["cpu_us_per_call"][f"{name}/{size}"] = {"reference": round(o, 1), "new": round(n, 1),
                                                           "speedup": round(o / n, 2)}
    if measured is not None:
        bare = measured.assign(**{c: None for c in DESCRIPTORS})
        checks = []
        for table in (measured, bare):
            checks.append(identical(ma.analytic_memory(table), ref.analytic_memory(table)))
            checks += [identical(ma.analytic_memory(table.iloc[i:i + 1]), ref.analytic_memory(table.iloc[i:i + 1]))
                       for i in range(len(table))]
        result["measured_rows_identical"] = {"rows": len(measured), "calls": len(checks), "all": all(checks)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
