from predictor.adapters.cluster_policy import ClusterPolicy, TeamSpec, TierSpec
from predictor.adapters.slurm.config import (
    account_commands,
    priority_weight_lines,
    qos_commands,
    render_commands,
)

POLICY = ClusterPolicy(
    tiers=(TierSpec("production", 1.0, 100_000, ("best_effort",), "prod"), TierSpec("best_effort", 0.0, 0)),
    teams=(TeamSpec("vision", 2.0, 8, 4), TeamSpec("nlp", 0.5), TeamSpec("infra", 1.0, 4, None)),
    weights={"tier": 3.0, "age": 2.0, "fairshare": 1.5, "shortness": 3.0, "sla": 0.0},
    age_cap_s=2 * 86_400 + 3_600, name="site")


def test_priority_weights_mirror_the_policy():
    lines = [line.split("  #")[0] for line in priority_weight_lines(POLICY)]
    assert "PriorityWeightQOS=30000" in lines and "PriorityWeightAge=20000" in lines
    assert "PriorityWeightFairshare=15000" in lines and "PriorityMaxAge=2-01:00:00" in lines
    assert "PreemptType=preempt/qos" in lines and "PreemptMode=REQUEUE" in lines
    assert any("No Slurm factor for: shortness;" in line for line in lines)  # sla has weight 0: not listed


def test_qos_are_created_before_they_are_named_in_preempt_lists():
    cmds = qos_commands(POLICY)
    assert [c[:4] for c in cmds[:2]] == [["sacctmgr", "-i", "add", "qos"]] * 2
    prod = cmds[2]
    assert "Priority=1000" in prod and "Preempt=best_effort" in prod and "GraceTime=120" in prod
    # best_effort preempts nobody: no "Preempt=" at all (on 22.05 an empty list makes a second run of the
    # script fail with "QOS Preemption loop detected")
    assert not any(a.startswith("Preempt=") for a in cmds[3])


def test_accounts_get_shares_and_gpu_caps():
    cmds = {c[5]: c[7:] for c in account_commands(POLICY)}
    assert cmds["name=vision"] == ["Fairshare=200", "GrpTRES=gres/gpu=12"]  # quota 8 + may borrow 4
    assert cmds["name=nlp"] == ["Fairshare=50"]
    assert cmds["name=infra"] == ["Fairshare=100"]  # may borrow without limit: no cap in Slurm


def test_rendered_script_tolerates_existing_qos():
    text = render_commands(qos_commands(POLICY))
    assert text.splitlines()[0] == "sacctmgr -i add qos production || true  # exits 1 when it already exists"
    assert "Description=prod " in text
