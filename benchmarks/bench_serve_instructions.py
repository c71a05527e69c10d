"""Instructions per ``POST /v1/score`` request, counted by valgrind (cachegrind); prints JSON.

``bench_serve_cpu.py`` measures CPU time, which a shared host moves by 20-40 % from run to run (the
same tree gave 2.3 to 3.8 ms per single job within minutes on 2026-12-07), so a change worth 2 % is
invisible in it. An instruction count does not move with the neighbours: this script runs
``bench_serve_cpu.py`` of a tree (``--tree``, default this one) three times under ``valgrind
--tool=cachegrind`` (about 25x slower than native): with one single job and one batch, with
``--singles`` more single jobs, and with ``--batches`` more batches; each request is sent twice
(``bench_serve_cpu``'s warm-up pass and one timed pass), so the differences divided by twice the
extra requests are the instructions of one request, start-up and model loading cancelled out.

Instructions are not time (a cache miss costs more than an add), so use the count to compare two
trees, and time to state a figure. The boosters run in LightGBM here
(``PREDICTOR_COMPILE_BOOSTERS=false``): the compiled cache is keyed by the host CPU, which valgrind
presents differently, so it would compile every booster under valgrind first. The runs of one tree go
one after the other; run two trees at once on two cores to compare them.

Run: ``python benchmarks/bench_serve_instructions.py --bundle /tmp/bundle.pkl [--tree ../other-tree]``
(the bundle as ``bench_serve_cpu.py --bundle`` writes it; about 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def instructions(tree: Path, bundle: Path, singles: int, batches: int, tmp: Path) -> int:
    """Instructions valgrind counted for one ``bench_serve_cpu.py`` run of ``tree``."""
    out = tmp / f"cachegrind.{singles}.{batches}.out"
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", sys.executable,
           str(tree / "benchmarks" / "bench_serve_cpu.py"), "--bundle", str(bundle), "--singles", str(singles),
           "--batches", str(batches), "--repeat", "1"]
    env = {**os.environ, "PREDICTOR_COMPILE_BOOSTERS": "false"}
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"valgrind run failed (exit {run.returncode}): {run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="pickled bundle (bench_serve_cpu.py --bundle)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the project tree whose bench_serve_cpu.py runs")
    ap.add_argument("--singles", type=int, default=40, help="extra single-job requests (each sent twice)")
    ap.add_argument("--batches", type=int, default=8, help="extra batches of 100 (each sent twice)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not installed (apt-get install valgrind)")
    if not args.bundle.exists():
        ap.error(f"--bundle {args.bundle}: no such file (bench_serve_cpu.py --bundle writes it)")
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        base = instructions(args.tree, args.bundle, 1, 1, Path(tmp))
        single = instructions(args.tree, args.bundle, 1 + args.singles, 1, Path(tmp))
        batch = instructions(args.tree, args.bundle, 1, 1 + args.batches, Path(tmp))
    result = {"benchmark": "serve_instructions", "tree": str(args.tree.resolve()), "boosters": "lightgbm",
              "instructions_per_single_request": round((single - base) / (2 * args.singles)),
              "instructions_per_batch_of_100": round((batch - base) / (2 * args.batches)),
              "runs": {"base": base, "singles": single, "batches": batch}}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
