import json

import pynvml
import pytest

from predictor.capacity.inventory import Node
from predictor.capacity.inventory_sources import inventory_from_mapping
from predictor.cli import main
from predictor.nodeinfo.records import load_topology
from tests.predictor.nodeinfo.topologies import RECORDED


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_without_a_driver_it_says_so_and_fails(capsys):
    if _driver_present():
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be taken")
    assert main(["node-info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no NVIDIA driver found (NVML: ")
    assert "--from FILE" in err


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_from_a_recorded_topology_prints_the_matrix(capsys, name):
    assert main(["node-info", "--from", str(RECORDED[name])]) == 0
    out = capsys.readouterr().out
    assert "CPU Affinity" in out and "NUMA Affinity" in out and "GPU7" in out or "GPU3" in out
    assert f"node {load_topology(RECORDED[name]).hostname}:" in out


def test_json_carries_an_inventory_node_and_reads_back(tmp_path, capsys):
    assert main(["node-info", "--from", str(RECORDED["dgx-a100"]), "--json", "--node-name", "gpu-a-01",
                 "--rack", "rack-3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fields = doc["inventory_node"]
    node = Node(**{k: tuple(map(tuple, v)) if k == "nvlink_islands" else tuple(v) if isinstance(v, list) else v
                   for k, v in fields.items()})
    assert (node.name, node.rack, node.num_gpus, node.gpu_type) == ("gpu-a-01", "rack-3", 8, "A100-80GB")
    assert doc["gpu_types"] == {"A100-80GB": 81920}
    assert doc["pinning"]["slurm"]["gres_conf"][0].startswith("NodeName=gpu-a-01 Name=gpu Type=a100-80gb")
    assert doc["pinning"]["kubelet"]["cpuManagerPolicy"] == "static"
    entry = doc["inventory_entry"]  # pasteable into an inventory YAML file
    inventory = inventory_from_mapping({"nodes": [entry]})
    assert inventory.nodes[0] == node
    saved = tmp_path / "node.json"
    saved.write_text(json.dumps(doc))
    assert load_topology(saved) == load_topology(RECORDED["dgx-a100"])  # --json output is a --from input


def test_pinning_and_out(tmp_path, capsys):
    out_file = tmp_path / "topo.yaml"
    assert main(["node-info", "--from", str(RECORDED["dual-socket-8gpu"]), "--pinning", "--reserve-cores", "1",
                 "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "NodeName=sys-4029gp-trt Name=gpu Type=v100m32 File=/dev/nvidia4 Cores=21-39" in out
    assert "--cpu-bind=map_cpu:" in out and "topologyManagerPolicy: restricted" in out
    assert load_topology(out_file) == load_topology(RECORDED["dual-socket-8gpu"])


def test_bad_file_is_a_one_line_input_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: []\nhost: {sockets: 1}\n")
    assert main(["node-info", "--from", str(bad)]) == 2
    assert "host.cores_per_socket: missing" in capsys.readouterr().err


def test_isolation_plan_as_text(capsys):
    assert main(["node-info", "--from", str(RECORDED["dgx-a100"]), "--isolation", "--node-name", "gpu-a-01"]) == 0
    out = capsys.readouterr().out
    assert "not measurements of this plan" in out  # the article's figures are its own
    assert "\nisolcpus=managed_irq,domain,1-15,17-31," in out and " irqaffinity=0,16,32,48,64,80,96,112,128," in out
    assert "\n[Manager]\nCPUAffinity=0,16,32,48,64,80,96,112,128,144,160,176,192,208,224,240\n" in out
    assert ("\nNodeName=gpu-a-01 Sockets=2 CoresPerSocket=64 ThreadsPerCore=2 Gres=gpu:a100-80gb:8 "
            "CpuSpecList=0-1,32-33,64-65,96-97,128-129,160-161,192-193,224-225\n") in out
    assert "\nreservedSystemCPUs: 0,16,32,48,64,80,96,112,128,144,160,176,192,208,224,240\n" in out
    assert "# production (SLA class gold): isolated cores" in out and "# research (no SLA class): no isolated" in out


def test_isolation_in_json(capsys):
    assert main(["node-info", "--from", str(RECORDED["dgx-h100"]), "--json", "--isolation", "--housekeeping-cores",
                 "2", "--isolcpus-flags", "managed_irq", "--isolated-tier", "research"]) == 0
    doc = json.loads(capsys.readouterr().out)["isolation"]
    assert doc["housekeeping_cpus"] == "0-1,56-57,112-113,168-169"
    assert doc["kernel_args"]["isolcpus"] == "managed_irq,2-55,58-111,114-167,170-223"
    assert doc["slurm"]["slurm_conf"][1].endswith("CpuSpecList=0-3,112-115")
    assert doc["kubelet"]["config"]["reservedSystemCPUs"] == "0-1,56-57,112-113,168-169"
    assert [t["tier"] for t in doc["tiers"] if t["isolated"]] == ["research"]


def test_isolation_tiers_come_from_the_policy_file(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("tiers:\n  interactive: {rank: 1.0, sla_class: interactive}\n  batch: {rank: 0.0}\n"
                      "default_tier: batch\ntier_aliases: {}\n")
    assert main(["node-info", "--from", str(RECORDED["pcie-4gpu"]), "--isolation", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "# interactive (SLA class interactive): isolated cores" in out and "# batch (no SLA class): no " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--housekeeping-cores", "2"], "--housekeeping-cores needs --isolation"),
        (["--isolation", "--housekeeping-cores", "0"], "must be at least 1"),
        (["--isolation", "--housekeeping-cores", "1", "--housekeeping-cpus", "0"], "not both"),
        (["--isolation", "--housekeeping-cpus", "0-x"], "--housekeeping-cpus: CPU list '0-x'"),
        (["--isolation", "--isolcpus-flags", "managed_irq,bogus"], "'bogus' is not one of"),
    ],
)
def test_impossible_isolation_requests_exit_2_with_one_line(capsys, args, message):
    assert main(["node-info", "--from", str(RECORDED["dgx-h100"]), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
