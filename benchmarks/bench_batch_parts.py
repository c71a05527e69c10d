"""CPU of the per-job parts of a scored batch of 100, each alone; prints JSON.

The parts of ``POST /v1/score`` that grow with the jobs of a batch and do not depend on the model
(issue 17, batches of 100): writing the candidates' Decisions with their readable reasons
(``DecisionWriter.write_rows``, which calls ``factor_rows``: each factor's phrase per job) and turning
the request's records into canonical columns (``canonical_columns``). A whole request through the app
(``bench_serve_cpu.py``) moves by 20-30 % from run to run on a shared host, more than these parts
weigh; timed alone, min of ``--passes`` passes of ``--loops`` calls each, two trees run one after
the other are comparable.

1. A snapshot of 100 pending jobs (1-8 GPUs, five tiers, three teams, a deadline on every fourth) on
   the 16-GPU inventory of the scheduler's property tests, decided by the ``ours`` preset with
   ``explain=True``.
2. Times ``write_rows`` of all 100 rows with their outcomes, ``factor_rows`` of the same rows,
   ``canonical_columns`` of 100 records shaped as a batch's job specs, and ``decision_doc`` of the
   100 Decisions (what the response encodes).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_batch_parts.py [--passes 5 --loops 200]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

from predictor.engine.queue_picture import canonical_columns
from predictor.policy.plan import Outcome
from predictor.policy.presets import load_policy
from predictor.policy.scheduler import decide
from predictor.store.codec import decision_doc
from tests.builders import SnapshotBuilder, make_job
from tests.predictor.policy.test_scheduler_properties import INV, NOW, TEAMS, TIERS

N = 100


def _best_ms(f: Callable[[], object], passes: int, loops: int) -> float:
    """Least CPU milliseconds per call over ``passes`` passes of ``loops`` calls."""
    best = float("inf")
    for _ in range(passes):
        t = time.process_time()
        for _ in range(loops):
            f()
        best = min(best, (time.process_time() - t) / loops * 1e3)
    return round(best, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--loops", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    pending = []
    for k in range(N):
        spec = (make_job(f"p{k}").predict(float(rng.uniform(60, 9000)), 20_000.0)
                .submitted(NOW - float(rng.uniform(0, 5e4))).tier(TIERS[k % len(TIERS)])
                .team(TEAMS[k % len(TEAMS)]).gpus(int(rng.integers(1, 9))))
        if k % 4 == 0:
            spec.deadline(NOW + float(rng.uniform(0, 3e4)))
        pending.append(spec)
    plan = decide(SnapshotBuilder(INV).pending(*pending).build(NOW), load_policy(preset="ours"), explain=True)
    writer, rows = plan._writer, list(range(N))
    outcomes = [plan._outcomes.get(i, Outcome("wait")) for i in rows]
    decisions = writer.write_rows(rows, outcomes, None)
    records = [{"job_id": f"j{i}", "user": f"u{i % 7}", "team": "x", "queue": "q", "num_gpus": 2.0,
                "gpu_type": "A100-80GB", "model_name": "llama-7b", "job_name": f"train-{i}", "submit_ts": 1.7e9,
                "state": "PENDING", "time_limit_s": 3600.0, "tier": "research"} for i in range(N)]
    p, n = args.passes, args.loops
    print(json.dumps({
        "rows": N, "passes": p, "loops": n,
        "write_rows_ms": _best_ms(lambda: writer.write_rows(rows, outcomes, None), p, n),
        "factor_rows_ms": _best_ms(lambda: writer.factor_rows(rows), p, n),
        "canonical_columns_ms": _best_ms(lambda: canonical_columns(records), p, n),
        "decision_docs_ms": _best_ms(lambda: [decision_doc(d) for d in decisions], p, n),
    }, indent=2))


if __name__ == "__main__":
    main()
