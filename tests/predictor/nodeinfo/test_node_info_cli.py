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
