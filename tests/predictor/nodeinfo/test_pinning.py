import pytest

from features.errors import InputError
from predictor.nodeinfo.cpulist import cpus_from_mask_words, parse_cpulist
from predictor.nodeinfo.pinning import plan_pinning, slurm_gpu_type
from tests.predictor.nodeinfo.topologies import RECORDED, recorded


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        # NUMA nodes 0 and 4 host no GPU on a DGX A100: the reserved cores come from there
        ("dgx-a100", "0-1,64-65,128-129,192-193"),
        ("dgx-h100", "0-1,56-57,112-113,168-169"),
        ("dual-socket-8gpu", "0-1,20-21,40-41,60-61"),
    ],
)
def test_reserved_cores_per_socket(name, reserved):
    assert plan_pinning(recorded(name)).reserved_cpus == parse_cpulist(reserved)


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("reserve", [0, 1, 4])
def test_plan_invariants(name, reserve):
    topo = recorded(name)
    plan = plan_pinning(topo, reserve)
    assert len(plan.reserved_cpus) == reserve * len(topo.host.sockets) * topo.host.threads_per_core
    reserved = set(plan.reserved_cpus)
    by_local = {}
    for g, pin in zip(topo.gpus, plan.gpus, strict=True):
        local = set(pin.local_cpus)
        assert local and not local & reserved
        assert local <= set(topo.host.cpus_of_numa(g.numa_node))  # never off the GPU's NUMA node
        assert set(pin.rank_cpus) <= local
        by_local.setdefault(pin.local_cpus, []).append(set(pin.rank_cpus))
    for local, shares in by_local.items():
        union = set().union(*shares)
        assert union == set(local)  # the shares cover the node's usable CPUs ...
        assert sum(len(s) for s in shares) == len(union)  # ... without overlap


def test_gres_conf_lines_use_slurm_logical_cores():
    lines = plan_pinning(recorded("dual-socket-8gpu")).gres_conf_lines("gpu-07")
    assert lines[0] == "NodeName=gpu-07 Name=gpu Type=v100m32 File=/dev/nvidia0 Cores=2-19"
    # socket 1's first core is logical core 20 (its OS CPU id is 20 too here); 2 are reserved
    assert lines[7] == "NodeName=gpu-07 Name=gpu Type=v100m32 File=/dev/nvidia7 Cores=22-39"


def test_dgx_a100_gres_cores_follow_numa_affinity():
    lines = plan_pinning(recorded("dgx-a100")).gres_conf_lines()
    assert [line.rsplit("Cores=", 1)[1] for line in lines] == ["48-63", "48-63", "16-31", "16-31",
                                                               "112-127", "112-127", "80-95", "80-95"]


def test_slurm_node_line_and_cpu_spec_list():
    plan = plan_pinning(recorded("dgx-h100"))
    assert plan.slurm_node_line() == ("NodeName=dgx-h100 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
                                      "Gres=gpu:h100-80gb:8 CpuSpecList=0,2,112,114")


def test_cpu_bind_map_and_mask_agree_with_rank_shares():
    plan = plan_pinning(recorded("pcie-4gpu"))
    mapped = plan.srun_cpu_bind_map().split(":", 1)[1].split(",")
    masks = plan.srun_cpu_bind_mask().split(":", 1)[1].split(",")
    for pin, cpu, mask in zip(plan.gpus, mapped, masks, strict=True):
        assert int(cpu) == pin.rank_cpus[0]
        value = int(mask, 16)
        assert cpus_from_mask_words([(value >> (64 * w)) & (2**64 - 1) for w in range(4)]) == pin.rank_cpus


@pytest.mark.parametrize(
    ("name", "policy", "options"),
    [
        ("dgx-a100", "restricted", {"prefer-closest-numa-nodes": "true"}),
        ("pcie-4gpu", "restricted", None),
    ],
)
def test_kubelet_config(name, policy, options):
    cfg = plan_pinning(recorded(name)).kubelet_config()
    assert cfg["kind"] == "KubeletConfiguration"
    assert cfg["cpuManagerPolicy"] == "static"
    assert cfg["cpuManagerPolicyOptions"] == {"full-pcpus-only": "true"}
    assert cfg["topologyManagerPolicy"] == policy
    assert cfg.get("topologyManagerPolicyOptions") == options


def test_too_many_reserved_cores_is_an_input_error():
    with pytest.raises(InputError, match="socket 0 has 20"):
        plan_pinning(recorded("dual-socket-8gpu"), reserved_cores_per_socket=20)


@pytest.mark.parametrize(("gpu_type", "expected"), [("A100-80GB", "a100-80gb"), ("RTX A6000", "rtx_a6000")])
def test_slurm_gpu_type(gpu_type, expected):
    assert slurm_gpu_type(gpu_type) == expected
