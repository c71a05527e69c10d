"""CPU isolation plans on every recorded topology and on generated layouts; the rendered settings are
read back with the parsers that apply them where those run here (slurmctld, systemd-analyze)."""

from __future__ import annotations

import configparser
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.errors import InputError
from predictor.nodeinfo.cpulist import cpus_from_mask_words, format_cpulist, parse_cpulist
from predictor.nodeinfo.isolation import IsolationOptions, IsolationPlan, plan_isolation
from predictor.nodeinfo.topology import GpuDevice, HostCpus, NodeTopology
from predictor.policy.presets import load_policy
from tests.predictor.nodeinfo.topologies import RECORDED, recorded

DEFAULT_TIERS = {name: tier.sla_class for name, tier in load_policy().tiers.items()}

#: KubeletConfiguration (kubelet.config.k8s.io/v1beta1) JSON names of the CPU, topology and reservation
#: fields, from kubernetes/kubelet config/v1beta1/types.go.
KUBELET_FIELDS = {"apiVersion", "kind", "cpuManagerPolicy", "cpuManagerPolicyOptions", "cpuManagerReconcilePeriod",
                  "memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope",
                  "topologyManagerPolicyOptions", "systemReserved", "kubeReserved", "reservedSystemCPUs",
                  "reservedMemory"}
#: Options of the static CPU manager policy (Kubernetes "Control CPU Management Policies on the Node").
STATIC_POLICY_OPTIONS = {"full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket",
                         "distribute-cpus-across-cores", "strict-cpu-reservation",
                         "prefer-align-cpus-by-uncorecache"}
SLURM_NODE_KEYS = {"NodeName", "Sockets", "CoresPerSocket", "ThreadsPerCore", "Gres", "CpuSpecList"}


def _cores(host: HostCpus) -> list[tuple[int, ...]]:
    return [host.cpus_of_core(*core) for core in host.cores()]


def check_invariants(plan: IsolationPlan) -> None:
    """What must hold for every plan, whatever the node and the options."""
    host = plan.host
    every = {t.cpu for t in host.threads}
    hk, iso = set(plan.housekeeping_cpus), set(plan.isolated_cpus)
    assert hk | iso == every and not hk & iso and iso  # a partition, never everything isolated
    assert min(every) in hk  # the boot CPU keeps timekeeping
    for cpus in _cores(host):  # SMT siblings stay on one side
        assert set(cpus) <= hk or set(cpus) <= iso
    for numa in plan.numa:
        cpus = set(host.cpus_of_numa(numa.numa_node))
        assert hk & cpus and set(numa.housekeeping_cpus) == hk & cpus and set(numa.isolated_cpus) == iso & cpus
    shares: dict[tuple[int, ...], list[set[int]]] = {}
    for gpu, g in zip(plan.topology.gpus, plan.gpus, strict=True):
        assert g.rank_cpus and set(g.rank_cpus) <= set(g.local_cpus) <= iso
        if gpu.numa_node is not None:
            assert set(g.local_cpus) <= set(host.cpus_of_numa(gpu.numa_node))  # kept near its GPU
        shares.setdefault(g.local_cpus, []).append(set(g.rank_cpus))
    for local, parts in shares.items():
        assert set().union(*parts) == set(local) and sum(map(len, parts)) == len(local)  # disjoint cover
        for part in parts:  # whole cores
            assert all(set(cpus) <= part or not set(cpus) & part for cpus in _cores(host))


def check_rendered(plan: IsolationPlan) -> None:
    """The rendered settings parse back to the plan's CPU sets."""
    hk, iso = plan.housekeeping_cpus, plan.isolated_cpus
    args = dict(part.split("=", 1) for part in plan.kernel_cmdline().split(" "))
    assert list(args) == ["isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"]
    parts = args["isolcpus"].split(",")
    first_cpu = next(i for i, part in enumerate(parts) if part[0].isdigit())  # flags, then the CPU list
    assert tuple(parts[:first_cpu]) == plan.options.isolcpus_flags
    listed = ",".join(parts[first_cpu:])
    for value, cpus in ((listed, iso), (args["nohz_full"], iso), (args["rcu_nocbs"], iso), (args["irqaffinity"], hk)):
        assert parse_cpulist(value) == cpus and format_cpulist(parse_cpulist(value)) == value
    assert parse_cpulist(plan.irqbalance_line().removeprefix("IRQBALANCE_BANNED_CPULIST=")) == iso

    systemd = configparser.ConfigParser()
    systemd.optionxform = str
    systemd.read_string(plan.systemd_dropin())
    assert systemd.sections() == ["Manager"] and list(systemd["Manager"]) == ["CPUAffinity"]
    assert parse_cpulist(systemd["Manager"]["CPUAffinity"]) == hk

    task, node = plan.slurm_conf_lines("n1")
    assert task == "TaskPlugin=task/affinity,task/cgroup" and plan.cgroup_conf_lines() == ["ConstrainCores=yes"]
    fields = dict(item.split("=", 1) for item in node.split(" "))
    assert set(fields) <= SLURM_NODE_KEYS and fields["NodeName"] == "n1"
    host = plan.host
    tpc = int(fields["ThreadsPerCore"])
    assert int(fields["Sockets"]) * int(fields["CoresPerSocket"]) * tpc == len(host.threads)
    abstract = {k * tpc + j: cpu for k, cpus in enumerate(_cores(host)) for j, cpu in enumerate(cpus)}
    assert tuple(sorted(abstract[i] for i in parse_cpulist(fields["CpuSpecList"]))) == hk

    text = yaml.safe_dump(plan.kubelet_config(), sort_keys=False)
    kubelet = yaml.safe_load(text)
    assert set(kubelet) <= KUBELET_FIELDS
    assert (kubelet["apiVersion"], kubelet["kind"]) == ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
    assert kubelet["cpuManagerPolicy"] == "static"
    assert isinstance(kubelet["reservedSystemCPUs"], str) and parse_cpulist(kubelet["reservedSystemCPUs"]) == hk
    options = kubelet["cpuManagerPolicyOptions"]
    assert set(options) <= STATIC_POLICY_OPTIONS and all(v == "true" for v in options.values())
    assert ("full-pcpus-only" in options) == (host.threads_per_core > 1)

    bind = plan.srun_cpu_bind_mask()
    masks = bind.removeprefix("--cpu-bind=mask_cpu:").split(",") if plan.gpus else []
    assert bool(bind) == bool(plan.gpus)
    for g, mask in zip(plan.gpus, masks, strict=True):
        value = int(mask, 16)
        assert cpus_from_mask_words([(value >> (64 * w)) & (2**64 - 1) for w in range(8)]) == g.rank_cpus
    assert set(plan.to_document()) >= {"kernel_cmdline", "systemd", "slurm", "kubelet", "tiers", "notes", "purpose"}


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("housekeeping", [1, 2, 4])
def test_every_recorded_topology(name, housekeeping):
    plan = plan_isolation(recorded(name), IsolationOptions(housekeeping_cores=housekeeping), DEFAULT_TIERS)
    check_invariants(plan)
    check_rendered(plan)
    tpc = plan.host.threads_per_core
    assert len(plan.housekeeping_cpus) == housekeeping * len(plan.numa) * tpc


def test_dgx_a100_keeps_the_first_core_of_each_numa_node():
    plan = plan_isolation(recorded("dgx-a100"))
    assert format_cpulist(plan.housekeeping_cpus) == "0,16,32,48,64,80,96,112,128,144,160,176,192,208,224,240"
    # abstract ids: NUMA node k's first core is Slurm core 16k, threads 32k and 32k+1 (slurmctld agrees)
    assert plan.cpu_spec_list() == "0-1,32-33,64-65,96-97,128-129,160-161,192-193,224-225"
    gpu0, gpu1 = plan.gpus[0], plan.gpus[1]  # both on NUMA node 3: 15 isolated cores split 8 + 7
    assert (format_cpulist(gpu0.rank_cpus), format_cpulist(gpu1.rank_cpus)) == ("49-56,177-184", "57-63,185-191")
    assert [n.gpus for n in plan.numa] == [(), (2, 3), (), (0, 1), (), (6, 7), (), (4, 5)]


def test_dgx_h100_kernel_command_line():
    plan = plan_isolation(recorded("dgx-h100"), IsolationOptions(housekeeping_cores=2))
    assert plan.kernel_cmdline() == ("isolcpus=managed_irq,domain,2-55,58-111,114-167,170-223 "
                                     "nohz_full=2-55,58-111,114-167,170-223 rcu_nocbs=2-55,58-111,114-167,170-223 "
                                     "irqaffinity=0-1,56-57,112-113,168-169")
    assert plan.slurm_conf_lines()[1] == ("NodeName=dgx-h100 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 "
                                          "Gres=gpu:h100-80gb:8 CpuSpecList=0-3,112-115")


def test_explicit_housekeeping_cpus_are_widened_to_whole_cores():
    plan = plan_isolation(recorded("dual-socket-8gpu"), IsolationOptions(housekeeping_cpus=(0, 20, 61)))
    assert format_cpulist(plan.housekeeping_cpus) == "0,20-21,40,60-61"
    check_invariants(plan)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("dgx-h100", IsolationOptions(housekeeping_cores=0), "must be at least 1"),
        ("dgx-a100", IsolationOptions(housekeeping_cores=16), "NUMA node 0 has 16"),
        ("dual-socket-8gpu", IsolationOptions(housekeeping_cores=17), "GPUs 0,1,2,3 share 3 isolated core"),
        ("dgx-a100", IsolationOptions(housekeeping_cpus=(0, 64)), "leave NUMA node 1 without"),
        ("dgx-h100", IsolationOptions(housekeeping_cpus=(1, 56)), "must include CPU 0"),
        ("dgx-h100", IsolationOptions(housekeeping_cpus=(0, 56, 300)), "CPU 300 does not exist"),
        ("pcie-4gpu", IsolationOptions(isolcpus_flags=("managed_irq", "nohz_full")), "'nohz_full' is not one of"),
        ("pcie-4gpu", IsolationOptions(isolcpus_flags=("domain", "domain")), "must be distinct"),
        ("pcie-4gpu", IsolationOptions(isolated_tiers=("gold",)), "isolated tier 'gold' is not a tier"),
    ],
)
def test_impossible_requests_are_one_line_input_errors(name, options, message):
    with pytest.raises(InputError, match=message) as info:
        plan_isolation(recorded(name), options, DEFAULT_TIERS)
    assert "\n" not in str(info.value)


def test_housekeeping_covering_every_cpu_is_refused():
    host = HostCpus.from_layout(1, 2, 1, {0: (0,), 1: (1,)})  # one core per NUMA node
    topo = NodeTopology(hostname="tiny", gpus=(), pcie=(), nvlink=(), host=host)
    with pytest.raises(InputError, match="nothing would be isolated"):
        plan_isolation(topo, IsolationOptions(housekeeping_cpus=(0, 1)))
    with pytest.raises(InputError, match="NUMA node 0 has 1"):
        plan_isolation(topo)


def test_without_host_cpus_there_is_no_plan():
    topo = dataclasses.replace(recorded("dgx-h100"), host=None)
    with pytest.raises(InputError, match="no host CPU information"):
        plan_isolation(topo)


def test_a_gpu_of_unknown_numa_node_uses_its_cpu_affinity():
    topo = recorded("pcie-4gpu")
    gpus = list(topo.gpus)
    gpus[3] = dataclasses.replace(gpus[3], numa_node=None)  # affinity 32-63,96-127 stays
    plan = plan_isolation(dataclasses.replace(topo, gpus=tuple(gpus)))
    check_invariants(plan)
    assert plan.gpus[3].local_cpus == plan.gpus[2].local_cpus and plan.numa[1].gpus == (2,)
    gpus[3] = dataclasses.replace(gpus[3], cpu_affinity=())
    with pytest.raises(InputError, match="GPU3: no isolated CPU near it"):
        plan_isolation(dataclasses.replace(topo, gpus=tuple(gpus)))


def test_tiers_with_an_sla_class_get_the_isolated_cores():
    plan = plan_isolation(recorded("dgx-h100"), tiers=DEFAULT_TIERS)
    assert {t.tier: t.isolated for t in plan.tiers} == {"production": True, "debug": True, "sla": True,
                                                        "research": False, "best_effort": False}
    assert "keep research, best_effort on nodes without this plan" in plan.notes()[0]
    chosen = plan_isolation(recorded("dgx-h100"), IsolationOptions(isolated_tiers=("research",)), DEFAULT_TIERS)
    assert [t.tier for t in chosen.tiers if t.isolated] == ["research"]


def test_without_domain_there_is_no_balancing_note():
    plan = plan_isolation(recorded("dgx-h100"), IsolationOptions(isolcpus_flags=("managed_irq",)), DEFAULT_TIERS)
    assert plan.kernel_args()["isolcpus"].startswith("managed_irq,1-55,57-111,")
    assert not any("domain" in note for note in plan.notes())
    check_rendered(plan)


# -- generated layouts -----------------------------------------------------------------------------


@st.composite
def layouts(draw):
    sockets = draw(st.integers(1, 2))
    numa_per_socket = draw(st.sampled_from([1, 2, 4]))
    cores_per_numa = draw(st.integers(1, 6))
    tpc = draw(st.integers(1, 2))
    cps = numa_per_socket * cores_per_numa
    total = sockets * cps
    numa_cpus: dict[int, list[int]] = {}
    for cpu in range(total * tpc):
        flat = cpu % total
        node = (flat // cps) * numa_per_socket + (flat % cps) // cores_per_numa
        numa_cpus.setdefault(node, []).append(cpu)
    host = HostCpus.from_layout(sockets, cps, tpc, numa_cpus)
    gpus_per_numa = draw(st.lists(st.integers(0, 3), min_size=len(numa_cpus), max_size=len(numa_cpus)))
    gpus = []
    for node, count in enumerate(gpus_per_numa):
        for _ in range(count):
            gpus.append(GpuDevice(index=len(gpus), name="NVIDIA A10", memory_mib=24_000, numa_node=node,
                                  cpu_affinity=tuple(numa_cpus[node])))
    n = len(gpus)
    pcie = tuple(tuple("X" if i == j else "SYS" for j in range(n)) for i in range(n))
    topo = NodeTopology(hostname="gen", gpus=tuple(gpus), pcie=pcie, nvlink=tuple((0,) * n for _ in range(n)),
                        host=host)
    return topo, cores_per_numa, max(gpus_per_numa)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.integers(0, 4))
def test_generated_layouts_plan_or_say_why(layout, housekeeping):
    topo, cores_per_numa, most_gpus = layout
    possible = 1 <= housekeeping < cores_per_numa and most_gpus <= cores_per_numa - housekeeping
    if not possible:
        with pytest.raises(InputError):
            plan_isolation(topo, IsolationOptions(housekeeping_cores=housekeeping), DEFAULT_TIERS)
        return
    plan = plan_isolation(topo, IsolationOptions(housekeeping_cores=housekeeping), DEFAULT_TIERS)
    check_invariants(plan)
    check_rendered(plan)


# -- the real parsers ------------------------------------------------------------------------------


def _require(request: pytest.FixtureRequest, condition: bool, what: str) -> None:
    root_conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).resolve().parents[2] / "conftest.py"))
    root_conftest.require(condition, what)


def _binary(*names: str) -> str | None:
    for name in names:
        for folder in (None, "/usr/sbin", "/usr/bin"):
            found = shutil.which(name, path=folder)
            if found:
                return found
    return None


@pytest.mark.slurm
def test_slurmctld_reads_the_node_lines_back(tmp_path, request):
    """slurmctld parses each rendered node line and reports the specialized cores we planned."""
    from tests.integration.slurm_cluster import _free_ports

    slurmctld, scontrol = _binary("slurmctld", "slurmctld-wlm"), _binary("scontrol")
    _require(request, bool(slurmctld and scontrol) and os.geteuid() == 0, "slurmctld and scontrol, run as root")
    plans = {f"{name}-hk{k}": plan_isolation(recorded(name), IsolationOptions(housekeeping_cores=k))
             for name in sorted(RECORDED) for k in (1, 3)}
    (tmp_path / "state").mkdir()
    port = _free_ports(1)[0]
    nodes = [f"{plan.slurm_conf_lines(name)[1]} NodeAddr=127.0.0.1 State=UNKNOWN" for name, plan in plans.items()]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=isolation", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={port}",
        "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root", f"StateSaveLocation={tmp_path}/state",
        f"SlurmctldPidFile={tmp_path}/slurmctld.pid", f"SlurmctldLogFile={tmp_path}/slurmctld.log",
        "ProctrackType=proctrack/linuxproc", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "GresTypes=gpu", "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "MpiDefault=none", next(iter(plans.values())).slurm_conf_lines()[0], *nodes,
        "PartitionName=gpu Nodes=ALL Default=YES State=UP", ""]))
    (tmp_path / "cgroup.conf").write_text("\n".join(next(iter(plans.values())).cgroup_conf_lines()) + "\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    with open(tmp_path / "slurmctld.out", "wb") as log:
        proc = subprocess.Popen([slurmctld, "-D", "-i", "-f", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    try:
        deadline, shown = time.monotonic() + 30, None
        while time.monotonic() < deadline and proc.poll() is None:
            shown = subprocess.run([scontrol, "show", "node", "-o"], env=env, capture_output=True, text=True)
            if shown.returncode == 0:
                break
            time.sleep(0.2)
        assert shown is not None and shown.returncode == 0, (tmp_path / "slurmctld.out").read_text()[-2000:]
        seen = {}
        for line in shown.stdout.splitlines():
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            seen[fields["NodeName"]] = fields
        for name, plan in plans.items():
            assert seen[name]["CPUSpecList"] == plan.cpu_spec_list()  # already whole cores: nothing widened
            assert int(seen[name]["CoreSpecCount"]) == plan.housekeeping_core_count
            assert int(seen[name]["CPUTot"]) == len(plan.host.threads)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_systemd_parses_the_cpu_affinity(tmp_path, request):
    """systemd's own CPU-set parser (the one behind system.conf's CPUAffinity=) accepts the value."""
    analyze = _binary("systemd-analyze")
    _require(request, analyze is not None, "systemd-analyze")

    def complaints(value: str) -> str:
        unit = tmp_path / "affinity-check.service"
        unit.write_text(f"[Unit]\nDescription=check\n[Service]\nExecStart=/bin/true\nCPUAffinity={value}\n")
        res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
        return res.stdout + res.stderr

    assert "Failed to parse CPU affinity" in complaints("0-1,x")  # the check can fail
    for name in sorted(RECORDED):
        value = plan_isolation(recorded(name)).systemd_dropin().split("CPUAffinity=", 1)[1].strip()
        assert "Failed to parse" not in complaints(value), name
