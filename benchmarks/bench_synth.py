"""Benchmark of the synthetic workload generator: 1,000,000 jobs, generated and validated.

Target (issue #2, for the 1M-job training table): well under a minute on one core. Reports wall
time of ``features.synth.generate`` per phase, of ``features.schema.validate`` on its output, of
writing Parquet, and the process's peak resident memory. Prints one JSON document.

Run: ``.venv/bin/python benchmarks/bench_synth.py [--jobs N] [--profile philly]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import tempfile
import time
from pathlib import Path

from features.schema import validate
from features.synth import calibration_report, generate, get_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default="philly")
    args = parser.parse_args()

    phases: dict[str, float] = {}
    last = [time.perf_counter(), None]

    def on_phase(name: str) -> None:
        now = time.perf_counter()
        if last[1] is not None:
            phases[last[1]] = round(now - last[0], 3)
        last[:] = [now, name]

    began = time.perf_counter()
    df = generate(args.jobs, args.seed, profile=args.profile, on_phase=on_phase)
    generate_s = time.perf_counter() - began
    phases[last[1]] = round(time.perf_counter() - last[0], 3)

    t = time.perf_counter()
    rejects = len(validate(df).rejects)
    validate_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        path = Path(tmp) / "jobs.parquet"
        df.to_parquet(path, index=False)
        write_s = time.perf_counter() - t
        size_mib = path.stat().st_size / 2**20
    report = calibration_report(df, get_profile(args.profile).cluster)
    print(json.dumps({
        "benchmark": "synth",
        "jobs": args.jobs,
        "profile": args.profile,
        "generate_s": round(generate_s, 2),
        "jobs_per_s": round(args.jobs / generate_s),
        "phases_s": phases,
        "validate_s": round(validate_s, 2),
        "rejects": rejects,
        "write_parquet_s": round(write_s, 2),
        "parquet_mib": round(size_mib, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "calibration_ok": report["ok"],
        "calibration": {m["name"]: {"ours": round(m["ours"], 3), "published": m["published"]}
                        for m in report["metrics"]},
        "python": platform.python_version(),
        "machine": platform.machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
