from pathlib import Path

import pytest

from features.errors import InputError
from predictor.capacity.inventory_sources import (
    inventory_from_crux,
    inventory_from_mapping,
    inventory_from_openb,
    inventory_from_pai,
    load_inventory,
)
from predictor.capacity.layout import ClusterLayout

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "data" / "inventory" / "example-cluster.yaml"


def test_example_cluster_yaml():
    inv = load_inventory(EXAMPLE)
    assert inv.gpus_by_type() == {"A100-80GB": 32, "L40S": 16, "A10": 16}
    dgx = inv.nodes[0]
    assert dgx.name == "dgx-00" and dgx.nvlink_islands == (tuple(range(8)),) and dgx.rack == "rack-a"
    assert ClusterLayout.of(inv).max_gang_per_class()[0].tolist() == [1, 4, 8, 16, 16]  # A10, cheapest


def test_gpu_count_means_homogeneous_dgx_nodes():
    inv = load_inventory("24")
    assert len(inv.nodes) == 3 and inv.total_gpus == 24


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nodes": []}, "nodes: List should have at least 1 item"),
        ({"nodes": [{"name": "x", "gpus": 2}]}, "has 2 GPUs but no gpu_type"),
        ({"nodes": [{"name": "x", "gpus": 2, "gpu_type": "Mystery"}]}, "'Mystery' has no memory size"),
        ({"nodes": [{"name": "x", "gpus": 2, "gpu_type": "T4", "nvlink_islands": [[0, 5]]}]}, "names GPU 5"),
        ({"nodes": [{"name": "x", "gpus": 2, "gpu_type": "T4", "numa_of_gpu": [0]}]}, "1 entries for 2 GPUs"),
        ({"nodes": [{"name": "x", "count": 2, "gpus": 1, "gpu_type": "T4"}]}, "needs a name pattern"),
        ({"nodes": [{"name": "x", "gpus": 1, "gpu_type": "T4", "colour": "red"}]}, "nodes.0.colour: Extra inputs"),
        ({"nodes": [{"name": "x", "gpus": 1, "gpu_type": "T4"}] * 2}, "duplicate node names: x"),
        ({"nodes": [{"name": "x", "gpus": 1, "gpu_type": "T4", "nvlink_islands": "some"}]}, "'all' or 'none'"),
    ],
    ids=["no nodes", "gpus without type", "unknown type", "island out of range", "numa length", "count pattern",
         "unknown field", "duplicates", "islands keyword"],
)
def test_yaml_errors_name_the_problem(data, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        inventory_from_mapping(data, origin="t.yaml")


def test_bad_yaml_reports_line(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: x\n    gpus: [1\n")
    with pytest.raises(InputError, match=r"inv.yaml: line \d+"):
        load_inventory(p)


def test_unknown_inventory_spec(tmp_path):
    with pytest.raises(InputError, match="neither a GPU count nor an existing file"):
        load_inventory(tmp_path / "missing.yaml")
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="unknown format"):
        load_inventory(odd)


@pytest.mark.shared_data
def test_openb_node_list(shared_file):
    inv = inventory_from_openb(shared_file("openb-2023/openb_node_list_gpu_node.csv"))
    assert len(inv.nodes) == 1213 and inv.total_gpus == 6212
    assert inv.gpus_by_type()["G2"] == 4392 and inv.gpu_types["V100M16"].memory_mib == 16384
    everything = inventory_from_openb(shared_file("openb-2023/openb_node_list_all_node.csv"), include_cpu_nodes=True)
    assert len(everything.nodes) == 1523 and everything.total_gpus == 6212


@pytest.mark.shared_data
def test_pai_machine_spec(shared_file):
    inv = inventory_from_pai(shared_file("inventory/pai_machine_spec.csv"))
    assert inv.gpus_by_type() == {"T4": 994, "MISC": 2240, "P100": 1596, "V100": 832, "V100M32": 1080}
    assert inv.gpu_types["MISC"].memory_mib == 15360  # the smallest known type (T4): never over-promises
    assert load_inventory(shared_file("inventory/pai_machine_spec.csv")).total_gpus == inv.total_gpus


@pytest.mark.shared_data
def test_crux_topology(shared_file):
    inv = inventory_from_crux(shared_file("inventory/crux_topo.csv"), gpus_per_host=8, gpu_type="H100-80GB")
    assert len(inv.nodes) == 847 and inv.total_gpus == 847 * 8
    lay = ClusterLayout.of(inv)
    assert len(lay.rack_names) > 1 and lay.max_gang_per_class()[0, 0] == 8
    with pytest.raises(InputError, match="gpus_per_host"):
        inventory_from_crux(shared_file("inventory/crux_topo.csv"), gpus_per_host=0)


def test_bad_openb_row(tmp_path):
    p = tmp_path / "nodes.csv"
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,10,two,T4\n")
    with pytest.raises(InputError, match=r"line 2: column 'gpu' is not a number"):
        inventory_from_openb(p)
