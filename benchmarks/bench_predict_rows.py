"""CPU per ``JobPredictorBundle.predict_columns`` call on 1 and 100 rows, old tree vs new; prints JSON.

The model-bundle share of a ``POST /v1/score`` (issue 17) without the API around it: the serving
call (``columns=`` typed arrays from ``predictor.engine.queue_picture.canonical_columns``, the
bundle's history store) on synthetic job documents (``bench_api.job_specs``), boosters compiled
(``models.compiled``) as in serving. Each tree given with ``--tree`` runs in its own subprocess
(``PYTHONPATH`` = that tree; the bundle pickle unpickles with that tree's classes), alternating
``--repeat`` times; the median pass per tree is reported, with the ratio of the first tree to each
other one. ``--dump DIR`` also writes every tree's predictions on the varied inputs (``.npz``) and
reports whether they agree exactly (relative 1e-12 for floats).

Run: ``.venv/bin/python benchmarks/bench_predict_rows.py --bundle /tmp/serve-bundle.pkl \
--tree /work/main --tree . [--dump /tmp/rows]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

NOW = 1.7e9


def _inputs(n_specs: int = 400) -> list[list[dict]]:
    """Job documents: one row, 100 rows, and varied edge cases (missing fields, unseen users)."""
    from benchmarks.bench_api import job_specs, synthetic_jobs

    specs = [{**s, "submit_ts": NOW} for s in job_specs(synthetic_jobs(2000, seed=11), n_specs)]  # as serving sets it
    sparse = [{"job_id": "bare-0"}, {"job_id": "bare-1", "num_gpus": 0}, {"job_id": "bare-2", "num_gpus": 8},
              {"job_id": "bare-3", "user": "nobody-seen", "time_limit_s": 3600.0, "num_gpus": 2}]
    for i, s in enumerate(specs[:40]):
        t = dict(s)
        if i % 4 == 0:
            t["user"] = f"unseen-user-{i}"
        if i % 4 == 1:
            t.pop("time_limit_s", None)
        if i % 4 == 2:
            for k in ("model_params", "batch_size", "seq_len", "precision", "gpu_type"):
                t.pop(k, None)
        if i % 4 == 3:
            t.pop("submit_ts", None)
        t["job_id"] = f"edge-{i}"
        sparse.append(t)
    return [specs[:1], specs[1:101], specs[101:102], sparse, sparse[:1], specs[:300]]


def _worker(args: argparse.Namespace) -> None:
    import pickle
    import time

    import numpy as np

    from models.compiled import compile_boosters
    from predictor.engine.queue_picture import canonical_columns, frame_of

    with open(args.bundle, "rb") as f:
        bundle = pickle.load(f)
    compile_boosters(bundle)
    now = NOW
    sets = _inputs()
    calls = []
    for docs in sets:
        cols = canonical_columns(docs)
        calls.append((frame_of(cols), cols))
    history = bundle.history
    for frame, cols in calls:  # warm-up (the store builds its state on first use)
        bundle.predict_columns(frame, history, now, columns=cols)
    out: dict[str, float] = {}
    for label, (frame, cols), reps in (("one_row_us", calls[0], args.calls), ("hundred_rows_us", calls[1],
                                                                                max(1, args.calls // 10))):
        t0 = time.process_time()
        for _ in range(reps):
            bundle.predict_columns(frame, history, now, columns=cols)
        out[label] = (time.process_time() - t0) / reps * 1e6
    if args.dump_file:
        arrays = {}
        for k, (frame, cols) in enumerate(calls):
            for name, value in bundle.predict_columns(frame, history, now, columns=cols).items():
                arrays[f"{k}/{name}"] = np.asarray(value)
            for name, value in bundle.predict_columns(frame, history, now).items():  # the frame path
                arrays[f"{k}/frame/{name}"] = np.asarray(value)
        np.savez(args.dump_file, **{k: (v.astype(str) if v.dtype == object else v) for k, v in arrays.items()})
    print(json.dumps(out))


def _compare(files: list[Path]) -> dict[str, object]:
    import numpy as np

    ref = np.load(files[0])
    report: dict[str, object] = {}
    for other in files[1:]:
        got = np.load(other)
        bad = []
        for key in ref.files:
            a, b = ref[key], got[key]
            if a.dtype.kind == "f":
                same = a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=0.0, equal_nan=True)
            else:
                same = a.shape == b.shape and bool(np.all(a == b))
            if not same:
                bad.append(key)
        exact = all(np.array_equal(ref[k], got[k], equal_nan=ref[k].dtype.kind == "f") for k in ref.files)
        report[str(other)] = {"arrays": len(ref.files), "mismatched": bad, "bitwise_equal": exact}
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", required=True)
    p.add_argument("--tree", action="append", default=[], help="a source tree (PYTHONPATH), first = reference")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000, help="one-row calls per pass (a tenth for 100 rows)")
    p.add_argument("--dump", help="folder for each tree's predictions (equality check)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dump-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
        return
    trees = [str(Path(t).resolve()) for t in (args.tree or ["."])]
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    dumps = []
    for rep in range(args.repeat):
        for i, tree in enumerate(trees):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--bundle", args.bundle,
                   "--calls", str(args.calls)]
            if args.dump and rep == 0:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                dumps.append(Path(args.dump) / f"tree{i}.npz")
                cmd += ["--dump-file", str(dumps[-1])]
            env = {**os.environ, "PYTHONPATH": tree}
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tree)
            runs[tree].append(json.loads(res.stdout.strip().splitlines()[-1]))
    report: dict[str, object] = {}
    for tree, passes in runs.items():
        report[tree] = {k: round(statistics.median(p[k] for p in passes), 1) for k in passes[0]}
    ref = report[trees[0]]
    for tree in trees[1:]:
        report[f"ratio {trees[0]} / {tree}"] = {k: round(ref[k] / report[tree][k], 2) for k in ref}
    if dumps:
        report["equality"] = _compare(dumps)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
