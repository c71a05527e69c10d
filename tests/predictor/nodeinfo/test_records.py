import json

import pytest
import yaml

from features.errors import InputError
from predictor.nodeinfo.records import (
    load_topology,
    topology_from_document,
    topology_to_document,
    write_topology,
)
from predictor.nodeinfo.topology import CpuThread, GpuDevice, HostCpus, MigInstance, NodeTopology
from tests.predictor.nodeinfo.topologies import RECORDED, recorded


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_write_then_load_round_trips(tmp_path, name, suffix):
    topo = recorded(name)
    path = write_topology(topo, tmp_path / f"t{suffix}")
    assert load_topology(path) == topo
    assert not list(tmp_path.glob(".*.tmp"))  # written through a temp file, renamed


def test_host_without_the_linux_layout_is_written_thread_by_thread():
    host = HostCpus(threads=(CpuThread(0, 0, 0, 0), CpuThread(1, 0, 0, 0), CpuThread(2, 0, 5, 0)))
    topo = NodeTopology(hostname="odd", gpus=(GpuDevice(0, "NVIDIA T4", 15360, numa_node=0),),
                        pcie=(("X",),), nvlink=((0,),), host=host)
    doc = topology_to_document(topo)
    assert doc["host"] == {"threads": [[0, 0, 0, 0], [1, 0, 0, 0], [2, 0, 5, 0]]}
    assert topology_from_document(doc) == topo


def test_mig_instances_survive_the_document():
    doc = topology_to_document(recorded("dgx-a100"))
    doc["gpus"][7]["mig"] = {"enabled": True, "instances": [{"profile": "3g.40gb", "memory_mib": 40192},
                                                            {"profile": "1g.10gb", "memory_mib": 9728}]}
    topo = topology_from_document(json.loads(json.dumps(doc)))
    assert topo.gpus[7].mig_enabled
    assert topo.gpus[7].mig_instances == (MigInstance("3g.40gb", 40192), MigInstance("1g.10gb", 9728))


def _doc(**changes):
    doc = topology_to_document(recorded("pcie-4gpu"))
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_doc(format="other/v9"), "format"),
        ({k: v for k, v in _doc().items() if k != "gpus"}, "gpus: missing"),
        (_doc(gpus="four"), "gpus: must be a list"),
        (_doc(pcie=None), "pcie: missing"),
        (_doc(pcie=[["X", "NODE", "SYS", "SYS"], ["NODE", "X", "SYS", "SYS"], ["SYS", "SYS", "X", "UPI"],
                    ["SYS", "SYS", "UPI", "X"]]), "expected one of"),
        (_doc(nvlink=[[0, "two"]]), "pcie/nvlink"),
        (_doc(host={"sockets": 2, "cores_per_socket": 32}), "host.numa_nodes: missing"),
        (_doc(host={"sockets": 1, "cores_per_socket": 2, "numa_nodes": {0: "0-x"}}), "host:"),
        ([1, 2], "mapping at the top level"),
    ],
    ids=["format", "no-gpus", "gpus-not-list", "no-pcie", "bad-class", "bad-nvlink", "no-numa", "bad-cpulist",
         "not-mapping"],
)
def test_bad_documents_name_the_field(doc, message):
    with pytest.raises(InputError, match=message):
        topology_from_document(doc)


def test_gpu_field_errors_name_the_gpu():
    doc = _doc()
    del doc["gpus"][2]["memory_mib"]
    with pytest.raises(InputError, match=r"^gpus\[2\]\.memory_mib: missing$"):
        topology_from_document(doc)


@pytest.mark.parametrize(
    ("text", "message"),
    [("gpus: [\n  - {index: 0", "not valid YAML"), ("just a string", "mapping")],
)
def test_bad_files_name_the_file(tmp_path, text, message):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"broken\.yaml: .*{message}"):
        load_topology(path)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="topology file .* does not exist"):
        load_topology(tmp_path / "absent.yaml")


def test_recorded_files_cite_their_source():
    for path in RECORDED.values():
        doc = yaml.safe_load(path.read_text())
        assert doc["source"] and doc["title"], path
