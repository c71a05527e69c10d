"""Ingest throughput and peak memory on 1,000,000-row SWF and sacct logs built from real rows.

Inputs (generated into a temporary folder, not timed):

- SWF: the HPC2N 2002 log's 202,876 records repeated until 1,000,000 rows, each copy with shifted
  job numbers and submit times (so ids stay unique), plain text with the original header.
- sacct: the NREL Eagle sample's 1,000 jobs repeated to 1,000,000 jobs rendered as ``sacct -P``
  text with their steps (``.batch`` and ``.extern`` for every job, plus a ``.0`` step with a
  ``gres/gpumem`` peak for GPU jobs), each copy with new job ids and times shifted by a week.

Measurement: each ingest runs in a fresh child Python process; ``seconds`` is the wall time of
``features.ingest.ingest`` there (reading, validating, writing Parquet and rejects) and
``cpu_seconds`` its user+system CPU time (a fairer figure on a shared machine; the load average is
printed too), ``rows`` are canonical rows produced (kept + rejected; for sacct, jobs, each of which
is 3-4 input lines), ``peak_rss_mib`` is the child's
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (whole process: interpreter, imports and data), and
``baseline_rss_mib`` the same figure right after the imports.

Usage: ``python benchmarks/bench_ingest.py [--rows N]``; prints one JSON object.
Reads ../shared/data (HPC2N SWF and the Eagle sample); exits 2 naming the file when absent.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PREDICTOR_SHARED_DATA", ROOT.parent / "shared" / "data"))
HPC2N = SHARED / "swf" / "HPC2N-2002-2.1-cln.swf.gz"
EAGLE = SHARED / "eagle-sample" / "sample_eagle_data.csv"
TARGET_ROWS_PER_S = 200_000
TARGET_PEAK_MIB = 1024

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from features.ingest import ingest
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fmt, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
cpu0, started = cpu(), time.perf_counter()
summary = ingest(fmt, [src], out)
seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": summary.rows_read, "kept": summary.rows_kept, "rejected": summary.rows_rejected,
                  "seconds": seconds, "cpu_seconds": cpu_seconds, "peak_kib": peak, "baseline_kib": baseline}))
"""


def make_swf(rows: int, dest: Path) -> int:
    """Repeat HPC2N records with shifted ids/submit times until ``rows``; returns bytes written."""
    text = gzip.decompress(HPC2N.read_bytes()).decode()
    header = [line for line in text.splitlines() if line.startswith(";")]
    records = [line.split() for line in text.splitlines() if line.strip() and not line.startswith(";")]
    span = max(int(float(r[1])) for r in records) + 86400
    with dest.open("w") as out:
        out.write("\n".join(header) + "\n")
        written, copy = 0, 0
        while written < rows:
            shift_id, shift_t = copy * 1_000_000, copy * span
            for r in records[: rows - written]:
                out.write(f"{int(r[0]) + shift_id} {int(float(r[1])) + shift_t} {' '.join(r[2:])}\n")
            written += min(len(records), rows - written)
            copy += 1
    return dest.stat().st_size


def make_sacct(jobs: int, dest: Path) -> tuple[int, int]:
    """Render Eagle jobs as sacct -P text with steps; returns (lines, bytes)."""
    import pandas as pd

    eagle = pd.read_csv(EAGLE)
    times = {c: pd.to_datetime(eagle[c]) for c in ("submit_time", "start_time", "end_time")}
    week = pd.Timedelta(days=7)
    header = ("JobID|JobName|User|Account|Partition|QOS|Submit|Start|End|Elapsed|Timelimit|State|ReqTRES|AllocTRES"
              "|NNodes|NTasks|TRESUsageInMax\n")
    lines = 1
    with dest.open("w") as out:
        out.write(header)
        copy, job_id = 0, 1_000_000
        while job_id - 1_000_000 < jobs:
            fmt = {c: (t + copy * week).dt.strftime("%Y-%m-%dT%H:%M:%S").tolist() for c, t in times.items()}
            chunk = []
            for i, row in enumerate(eagle.itertuples(index=False)):
                if job_id - 1_000_000 >= jobs:
                    break
                gpus = int(row.gpus_req)
                mem = f",mem={int(row.mem_req)}M" if row.mem_req > 0 else ""
                gres = f",gres/gpu:v100={gpus},gres/gpu={gpus}" if gpus else ""
                tres = f"billing={row.processors_req},cpu={row.processors_req}{gres}{mem},node={row.nodes_req}"
                elapsed, limit = _span(row.run_time), _span(row.wallclock_req)
                s, b, e = fmt["submit_time"][i], fmt["start_time"][i], fmt["end_time"][i]
                chunk.append(f"{job_id}|{row.name}|{row.user}|{row.account}|{row.partition}|{row.qos}|{s}|{b}|{e}|"
                             f"{elapsed}|{limit}|{row.state}|{tres}|{tres}|{row.nodes_req}||\n")
                chunk.append(f"{job_id}.batch|batch||{row.account}|||{b}|{b}|{e}|{elapsed}||{row.state}||"
                             f"cpu={row.processors_req},node=1|1|1|cpu=00:01:00,mem=2048M,pages=0,vmem=4096M\n")
                chunk.append(f"{job_id}.extern|extern||{row.account}|||{b}|{b}|{e}|{elapsed}||COMPLETED||"
                             f"{tres}|{row.nodes_req}|{row.nodes_req}|cpu=00:00:00,mem=0,pages=0,vmem=0\n")
                if gpus:
                    chunk.append(f"{job_id}.0|python||{row.account}|||{b}|{b}|{e}|{elapsed}||COMPLETED||{tres}|"
                                 f"{row.nodes_req}|{row.nodes_req}|gres/gpumem={20000 + 97 * (i % 500)}M,mem=10G\n")
                job_id += 1
            out.writelines(chunk)
            lines += len(chunk)
            copy += 1
    return lines, dest.stat().st_size


def _span(seconds: float) -> str:
    secs = int(seconds)
    days, rest = divmod(secs, 86400)
    hms = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{hms}" if days else hms


def measure(fmt: str, src: Path, workdir: Path) -> dict:
    out = workdir / f"{fmt}.parquet"
    proc = subprocess.run([sys.executable, "-c", CHILD, fmt, str(src), str(out)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"ingest of {src} failed:\n{proc.stderr}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "rows": got["rows"], "kept": got["kept"], "rejected": got["rejected"],
        "seconds": round(got["seconds"], 2),
        "rows_per_s": round(got["rows"] / got["seconds"]),
        "cpu_seconds": round(got["cpu_seconds"], 2),
        "rows_per_cpu_s": round(got["rows"] / got["cpu_seconds"]),
        "input_mib": round(src.stat().st_size / 2**20, 1),
        "peak_rss_mib": round(got["peak_kib"] / 1024),
        "baseline_rss_mib": round(got["baseline_kib"] / 1024),
        "output_mib": round(out.stat().st_size / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per generated log (default 1,000,000)")
    args = parser.parse_args()
    for path in (HPC2N, EAGLE):
        if not path.exists():
            print(f"missing shared data file {path} (see ../shared/data/README.md)", file=sys.stderr)
            return 2
    results: dict[str, object] = {"rows_target_per_s": TARGET_ROWS_PER_S, "peak_target_mib": TARGET_PEAK_MIB,
                                  "cpus": os.cpu_count(), "load_avg_1m_before": os.getloadavg()[0],
                                  "memory": "ru_maxrss of the child process (whole process)"}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        work = Path(tmp)
        swf = work / "hpc2n-x5.swf"
        make_swf(args.rows, swf)
        results["swf"] = measure("swf", swf, work)
        sacct = work / "eagle-x1000.sacct.txt"
        lines, _ = make_sacct(args.rows, sacct)
        entry = measure("sacct", sacct, work)
        # sacct rows are jobs; each is 3-4 input lines (job line + .batch, .extern, .0 steps)
        entry.update(input_lines=lines, lines_per_s=round(lines / entry["seconds"]))
        results["sacct"] = entry
    results["load_avg_1m_after"] = os.getloadavg()[0]
    for name in ("swf", "sacct"):
        entry = results[name]
        entry["meets_targets"] = entry["rows_per_s"] >= TARGET_ROWS_PER_S and entry["peak_rss_mib"] < TARGET_PEAK_MIB
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
