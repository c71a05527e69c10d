import json
from pathlib import Path

import yaml

from predictor.cli import main

ROOT = Path(__file__).resolve().parents[3]
QUEUE = ROOT / "data" / "policy" / "example-queue.csv"
PREDICTIONS = ROOT / "data" / "policy" / "example-predictions.csv"
CLUSTER = ROOT / "data" / "inventory" / "example-cluster.yaml"


def test_show_prints_effective_policy_and_ranges(capsys):
    assert main(["policy", "show", "--preset", "fifo"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["policy"]["ordering"] == "fifo"
    assert doc["priority_ranges"]["slurm_priority"]["normal"] == [1, 2**31 - 1]
    assert doc["priority_ranges"]["kueue_workload_priority"]["normal"] == [0, 2**30 - 1]
    assert main(["policy", "show", "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert ours["priority_ranges"]["slurm_priority"]["starvation_guard"] == [2**31, 2**32 - 2]
    assert "sum(weight x factor)" in ours["priority_ranges"]["formula"]


def test_validate_ok_and_error(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text("teams:\n  nlp: {share: 2}\n")
    assert main(["policy", "validate", str(good)]) == 0
    assert "valid policy 'ours'" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("reservation:\n  depth: lots\n")
    assert main(["policy", "validate", str(bad)]) == 2
    assert "reservation.depth" in capsys.readouterr().err


def test_presets_and_size(capsys):
    assert main(["policy", "presets"]) == 0
    assert "sjf-oracle" in capsys.readouterr().out
    assert main(["policy", "size", "--cluster", str(CLUSTER), "--peak-mib", "30000", "--type", "A10"]) == 0
    out = capsys.readouterr().out
    assert "flavor: L40S x 1" in out and "OOM risk; moved to L40S" in out


def test_decide_on_the_example_queue(capsys):
    args = ["policy", "decide", "--jobs", str(QUEUE), "--predictions", str(PREDICTIONS), "--cluster", str(CLUSTER),
            "--now", "1735704000", "--json"]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["job_id"] for r in rows} == {"q-eval", "q-llm-70b", "q-lora-7b", "q-sweep-4", "q-debug", "q-share"}
    by_id = {r["job_id"]: r for r in rows}
    assert by_id["q-llm-70b"]["action"] == "reserve"  # the A100s are held by the running pretraining
    assert by_id["q-lora-7b"]["flavor"] != "A10"  # 29 GB upper bound + margin: moved off the 24 GB A10
    assert [r["priority"] for r in rows] == sorted((r["priority"] for r in rows), reverse=True)
    assert main(["policy", "decide", "--jobs", str(QUEUE), "--cluster", str(CLUSTER), "--preset", "fifo"]) == 0


def test_decide_missing_file_is_a_user_error(tmp_path, capsys):
    assert main(["policy", "decide", "--jobs", str(tmp_path / "none.csv"), "--cluster", "8"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_decide_honours_constraints_and_rejects_a_malformed_one(tmp_path, capsys):
    """Residency from the command line (docs/residency.md): the job table's constraints column."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("job_id,num_gpus,submit_ts,state,constraints,time_limit_s\n"
                    "us,8,100,PENDING,region=us-east,3600\n"
                    "secret,4,101,PENDING,label=sensitive,3600\n"
                    "mars,4,102,PENDING,region=mars,3600\n")
    regions = ROOT / "data" / "inventory" / "example-regions.yaml"
    assert main(["policy", "decide", "--jobs", str(jobs), "--cluster", str(regions), "--json"]) == 0
    by_id = {r["job_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert by_id["us"]["constraint"] == "region=us-east"
    assert {n for n, _ in by_id["us"]["placement"]["gpus_by_node"]} <= {"a10-00", "a10-01"}
    assert all(n.startswith("dgx-") for n, _ in by_id["secret"]["placement"]["gpus_by_node"])
    assert by_id["mars"]["action"] == "reject" and "region=mars" in by_id["mars"]["reason"]
    jobs.write_text("job_id,num_gpus,submit_ts,state,constraints\nbad,1,100,PENDING,region\n")
    assert main(["policy", "decide", "--jobs", str(jobs), "--cluster", str(regions)]) == 2
    assert "constraint term 'region' is not key=value" in capsys.readouterr().err
