"""``predictor inventory --from-slurm`` and ``predictor init --target slurm`` on the suite's real Slurm
(``scontrol show nodes -o``, host lists expanded by ``scontrol show hostnames``, ``sacctmgr``), and the
parsing of the node lines and gres strings other Slurm sites print."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from features.errors import InputError
from predictor.adapters.slurm.discovery import parse_gpu_gres, parse_node_line
from predictor.capacity.inventory_sources import load_inventory
from predictor.cli import main
from tests.integration.slurm_cluster import GPU_TYPE, NODE_GPUS, SlurmCluster


@pytest.mark.parametrize(("gres", "expected"), [
    ("gpu:a10:4", ("a10", 4)),
    ("gpu:a100:8(S:0-1)", ("a100", 8)),
    ("gpu:h100:4(S:0),gpu:h100:4(S:1)", ("h100", 8)),
    ("gpu:2", (None, 2)),
    ("(null)", (None, 0)),
    ("mps:400,gpu:l40s:2(S:0,2)", ("l40s", 2)),
    ("", (None, 0)),
], ids=["typed", "sockets", "split-by-socket", "untyped", "null", "with-mps", "empty"])
def test_gpu_gres(gres: str, expected: tuple) -> None:
    assert parse_gpu_gres(gres, "n1") == expected


def test_two_gpu_types_on_one_node_are_refused() -> None:
    with pytest.raises(InputError, match="several GPU types"):
        parse_gpu_gres("gpu:a100:4,gpu:v100:2", "n1")


def test_node_line_values_with_blanks() -> None:
    line = ("NodeName=gpu-07 Arch=x86_64 CoresPerSocket=32 CPUTot=128 Gres=gpu:a100:8(S:0-1) "
            "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)  RealMemory=1031000 "
            "Reason=bad dimm [root@2024-03-01T10:00:00] State=DRAIN")
    f = parse_node_line(line)
    assert (f["NodeName"], f["CPUTot"], f["RealMemory"], f["State"]) == ("gpu-07", "128", "1031000", "DRAIN")
    assert f["OS"].startswith("Linux 6.1.0") and f["Reason"].startswith("bad dimm")


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


TOPOLOGIES = {
    "topology.conf": "# two racks under one spine\nSwitchName=tor1 Nodes=localhost\n"
                     "SwitchName=tor2 Nodes=gpu-b[01-02]\nSwitchName=spine Switches=tor[1-2]\n",
    "topology.yaml": yaml.safe_dump([
        {"topology": "fabric", "cluster_default": True, "tree": {"switches": [
            {"switch": "spine", "children": "tor[1-2]"}, {"switch": "tor1", "nodes": "localhost"},
            {"switch": "tor2", "nodes": "gpu-b[01-02]"}]}}]),
    "block.yaml": yaml.safe_dump([{"topology": "nvl", "block": {"block_sizes": [2], "blocks": [
        {"block": "nvl-1", "nodes": "localhost,gpu-b01"}]}}]),
}


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.parametrize("topology", [None, *TOPOLOGIES])
def test_inventory_from_slurm_is_accepted_by_policy_decide(cluster: SlurmCluster, tmp_path: Path,
                                                           topology: str | None) -> None:
    out = tmp_path / "inventory.yaml"
    args = ["inventory", "--from-slurm", "--out", str(out)]
    if topology:
        (tmp_path / topology).write_text(TOPOLOGIES[topology])
        args += ["--topology", str(tmp_path / topology)]
    assert main(args) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["gpu_types"] == {"A10": {"memory_mib": 24576, "cost_per_hour": 0.6}}  # gres type a10
    [node] = doc["nodes"]
    assert (node["name"], node["gpu_type"], node["gpus"], node["cpus"], node["mem_mib"]) == (
        "localhost", "A10", NODE_GPUS, cluster.cpus, cluster.memory_mib)
    expected = {None: (None, None), "topology.conf": ("tor1", "spine"), "topology.yaml": ("tor1", "spine"),
                "block.yaml": (None, "nvl-1")}[topology]
    assert (node.get("rack"), node.get("block")) == expected
    assert load_inventory(str(out)).total_gpus == NODE_GPUS
    jobs = tmp_path / "queue.csv"
    jobs.write_text("job_id,user,team,tier,num_gpus,gpu_type,submit_ts,state\n"
                    f"a,ana,nlp,research,2,{GPU_TYPE},1735680000,PENDING\n"
                    "b,bo,vision,production,4,,1735680100,PENDING\n")
    assert main(["policy", "decide", "--jobs", str(jobs), "--cluster", str(out), "--json"]) == 0


@pytest.mark.slow
@pytest.mark.slurm
def test_init_then_slurm_config_and_kueue_manifests_from_another_folder(cluster: SlurmCluster, tmp_path: Path,
                                                                         monkeypatch, capsys) -> None:
    cluster.run("sacctmgr", "-i", "add", "qos", "scavenger", "priority=0")
    cluster.run("sacctmgr", "-i", "add", "qos", "premium", "priority=5000")
    try:
        assert main(["init", "--target", "slurm", "--out", str(tmp_path / "site")]) == 0
    finally:
        cluster.run("sacctmgr", "-i", "delete", "qos", "scavenger,premium")
    policy = yaml.safe_load((tmp_path / "site" / "policy.yaml").read_text())
    assert set(policy["teams"]) == {"vision", "nlp", "research"}
    assert {k: policy["tier_aliases"][k] for k in ("normal", "scavenger", "premium")} == {
        "normal": "research", "scavenger": "best_effort", "premium": "production"}
    assert main(["init", "--target", "slurm", "--out", str(tmp_path / "site")]) == 2  # exists: not replaced
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["slurm", "config", "--policy", "../site/policy.yaml", "--out", "slurm"]) == 0
    script = (elsewhere / "slurm" / "sacctmgr.sh").read_text()
    assert "name=vision" in script and "name=research" in script
    assert main(["kueue", "manifests", "--policy", "../site/policy.yaml", "--inventory", "../site/inventory.yaml",
                 "--out", "kueue"]) == 0
    assert (elsewhere / "kueue" / "30-clusterqueues.yaml").is_file()
