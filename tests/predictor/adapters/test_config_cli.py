"""`predictor kueue manifests` and `predictor slurm config` from a policy file with teams."""

from __future__ import annotations

import yaml

from predictor.cli import main

POLICY = """
name: site
teams:
  vision: {share: 2}
  nlp: {share: 1, nominal_gpus: 16, borrowing_limit_gpus: 8}
"""
INVENTORY = "data/inventory/example-cluster.yaml"


def test_kueue_manifests_are_written_and_validated(tmp_path, shared_data, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "kueue"
    assert main(["kueue", "manifests", "--policy", str(policy), "--inventory", INVENTORY, "--out", str(out),
                 "--crds", str(shared_data / "kueue-crds")]) == 0
    printed = capsys.readouterr().out
    assert "validated 13 objects against the CRDs" in printed  # 5 tiers, topology, 3 flavors, 2+2 queues
    names = sorted(p.name for p in out.iterdir())
    assert names == ["00-workloadpriorityclasses.yaml", "10-topology.yaml", "20-resourceflavors.yaml",
                     "30-clusterqueues.yaml", "40-localqueues.yaml", "kustomization.yaml", "label-nodes.sh"]
    queues = list(yaml.safe_load_all((out / "30-clusterqueues.yaml").read_text()))
    assert [q["metadata"]["name"] for q in queues] == ["nlp", "vision"]
    assert yaml.safe_load((out / "kustomization.yaml").read_text())["resources"][0] == "00-workloadpriorityclasses.yaml"
    assert "kubectl label node dgx-00 --overwrite predictor/gpu-type=A100-80GB" in (out / "label-nodes.sh").read_text()


def test_kueue_manifests_need_teams(tmp_path, capsys):
    assert main(["kueue", "manifests", "--inventory", INVENTORY, "--out", str(tmp_path / "k")]) == 2
    assert "lists no teams" in capsys.readouterr().err


def test_slurm_config_files(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "slurm"
    assert main(["slurm", "config", "--policy", str(policy), "--topology", "data/topologies/dgx-h100.yaml",
                 "--node-name", "gpu-h-01", "--out", str(out)]) == 0
    conf = (out / "slurm-priority.conf").read_text()
    assert "PriorityWeightQOS=30000" in conf and "NodeName=gpu-h-01 Sockets=2 CoresPerSocket=56" in conf
    assert "sacctmgr -i modify account where name=nlp set Fairshare=100 GrpTRES=gres/gpu=24" in (out / "sacctmgr.sh").read_text()
    assert (out / "gres.conf").read_text().splitlines()[0] == (
        "NodeName=gpu-h-01 Name=gpu Type=h100-80gb File=/dev/nvidia0 Cores=2-55")
