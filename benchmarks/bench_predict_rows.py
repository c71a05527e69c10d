"""CPU per ``JobPredictorBundle.predict_columns`` call on 1 and 100 rows, old tree vs new; prints JSON.

The model-bundle share of a ``POST /v1/score`` (issue 17) without the API around it: the serving
call (``columns=`` typed arrays from ``predictor.engine.queue_picture.canonical_columns``, the
bundle's history store) on synthetic job documents (``bench_api.job_specs``), boosters compiled
(``models.compiled``) as in serving. Each tree given with ``--tree`` runs in its own subprocess
(``PYTHONPATH`` = that tree; the bundle pickle unpickles with that tree's classes), alternating
``--repeat`` times; the median pass per tree is reported, with the ratio of the first tree to each
other one. ``--dump DIR`` also writes every tree's predictions on the varied inputs (``.npz``) and
reports whether they agree exactly (relative 1e-12 for floats). Each step of the call is also timed
in place (``_stages``): ``*_path_us`` is everything but the analytic memory estimate (features,
duration, topology, glue), ``*_trees_us`` the compiled boosters within it.

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

    specs = [
        {**s, "submit_ts": NOW} for s in job_specs(synthetic_jobs(2000, seed=11), n_specs)
    ]  # as serving sets it
    sparse = [
        {"job_id": "bare-0"},
        {"job_id": "bare-1", "num_gpus": 0},
        {"job_id": "bare-2", "num_gpus": 8},
        {"job_id": "bare-3", "user": "nobody-seen", "time_limit_s": 3600.0, "num_gpus": 2},
    ]
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
    for label, (frame, cols), reps in (
        ("one_row", calls[0], args.calls),
        ("hundred_rows", calls[1], max(1, args.calls // 10)),
    ):
        t0 = time.process_time()
        for _ in range(reps):
            bundle.predict_columns(frame, history, now, columns=cols)
        out[f"{label}_us"] = (time.process_time() - t0) / reps * 1e6
        for stage, cpu in _stages(bundle, frame, cols, history, now, reps).items():
            out[f"{label}_{stage}_us"] = cpu
    if args.dump_file:
        arrays = {}
        for k, (frame, cols) in enumerate(calls):
            for name, value in bundle.predict_columns(frame, history, now, columns=cols).items():
                arrays[f"{k}/{name}"] = np.asarray(value)
            for name, value in bundle.predict_columns(frame, history, now).items():  # the frame path
                arrays[f"{k}/frame/{name}"] = np.asarray(value)
        np.savez(
            args.dump_file, **{k: (v.astype(str) if v.dtype == object else v) for k, v in arrays.items()}
        )
    print(json.dumps(out))


def _stages(bundle, frame, cols, history, now: float, reps: int) -> dict[str, float]:  # noqa: ANN001
    """CPU (us per call) of each step of ``JobPredictorBundle._predict``, timed in place (the steps run
    in order on a fresh view, as in a request, so caches are as cold as there). ``memory`` is the
    analytic estimate and its correction (``models.memory_*``: not this path); ``path`` the sum of the
    rest; ``trees`` the compiled boosters' share of it (``CompiledBooster.predict``: the same native
    code in both trees; on one row mostly cache misses on that code); ``path_without_trees``."""
    import time

    import numpy as np

    from models.bundle import assemble_columns, duration_offset, job_view
    from models.compiled import CompiledBooster
    from models.memory_analytic import analytic_memory

    spent = dict.fromkeys(
        ("view", "history", "features", "duration", "memory", "topology", "assemble", "trees"), 0.0
    )
    plain = CompiledBooster.predict

    def timed(self, X, plain=plain):  # noqa: ANN001, ANN202
        t0 = time.process_time()
        try:
            return plain(self, X)
        finally:
            spent["trees"] += time.process_time() - t0

    def step(name, f):  # noqa: ANN001, ANN202
        t0 = time.process_time()
        r = f()
        spent[name] += time.process_time() - t0
        return r

    table = bundle.gpu_memory_mib
    CompiledBooster.predict = timed
    try:
        for _ in range(reps):
            v = step("view", lambda: job_view(frame, now, cols))
            state = step("history", lambda v=v: history.state_for(v))
            X = step("features", lambda v=v, state=state: bundle.builder.transform_array(v, state))
            q = step(
                "duration",
                lambda v=v, X=X: np.exp(
                    bundle.duration.predict_log(X) + duration_offset(v, bundle.global_median_s)[:, None]
                ),
            )
            point, upper = step(
                "memory", lambda v=v, X=X: bundle.predict_memory(v, X, analytic_memory(v, table), table)
            )
            slow = step("topology", lambda v=v: bundle.topology.predict(v))
            step(
                "assemble",
                lambda v=v, q=q, point=point, upper=upper, slow=slow: assemble_columns(
                    v,
                    q,
                    point,
                    upper,
                    slow,
                    table,
                    model_version=bundle.version,
                    fallback=False,
                    fallback_reason=None,
                ),
            )
    finally:
        CompiledBooster.predict = plain
    out = {k: v / reps * 1e6 for k, v in spent.items()}
    out["path"] = sum(v for k, v in out.items() if k not in ("memory", "trees"))
    out["path_without_trees"] = out["path"] - out["trees"]
    return out


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
    p.add_argument(
        "--tree", action="append", default=[], help="a source tree (PYTHONPATH), first = reference"
    )
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
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--bundle",
                args.bundle,
                "--calls",
                str(args.calls),
            ]
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
