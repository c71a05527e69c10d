import pytest
import yaml

from features.errors import InputError
from predictor.policy.config import PolicyConfig
from predictor.policy.presets import default_policy_path, load_policy, policy_from_mapping, preset_names


def test_shipped_default_file_equals_the_model_defaults():
    assert load_policy() == PolicyConfig()
    assert yaml.safe_load(default_policy_path().read_text())["weights"] == PolicyConfig().weights


def test_presets_exist_and_set_their_ordering():
    assert set(preset_names()) == {"fifo", "sjf-oracle", "qssf", "qssf-sized", "las", "kueue", "ours"}
    orderings = {name: load_policy(preset=name).ordering for name in preset_names()}
    assert orderings == {"fifo": "fifo", "sjf-oracle": "sjf", "qssf": "qssf", "qssf-sized": "qssf", "las": "las",
                         "kueue": "kueue", "ours": "multifactor"}


def test_qssf_sized_is_qssf_with_the_sites_sizing(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("sizing: {margin_fraction: 0.3}\n")
    plain, sized = load_policy(site, preset="qssf"), load_policy(site, preset="qssf-sized")
    assert not plain.sizing.use_predictions and sized.sizing.use_predictions
    assert sized.sizing.margin_fraction == 0.3  # the base policy's sizing, as ``ours`` would size
    same = {"ordering", "queueing", "reservation", "placement", "preemption", "time_limit", "aging"}
    assert {k: getattr(sized, k) for k in same} == {k: getattr(plain, k) for k in same}


def test_preset_overlays_behaviour_but_keeps_the_sites_teams(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("teams:\n  vision: {share: 3}\n  nlp: {share: 1}\nreservation: {depth: 2}\n")
    fifo = load_policy(site, preset="fifo")
    assert fifo.teams["vision"].share == 3 and fifo.reservation.depth == 0
    assert fifo.queueing.strategy == "strict" and not fifo.preemption.enabled
    assert load_policy(site).reservation.depth == 2


@pytest.mark.parametrize(
    "data, message",
    [
        ({"weights": {"age": -1}}, "weights: weight of age must be a finite number >= 0"),
        ({"weights": {"luck": 1}}, "unknown factor(s) luck"),
        ({"wieghts": {}}, "wieghts: unknown field"),
        ({"ordering": "random"}, "unknown ordering 'random'"),
        ({"default_tier": "vip"}, "default_tier 'vip' is not one of the tiers"),
        ({"tiers": {"a": {"rank": 2}}, "default_tier": "a"}, "tiers.a.rank: Input should be less than or equal to 1"),
        ({"tiers": {"a": {"rank": 1, "can_preempt": ["b"]}}, "default_tier": "a"}, "can_preempt names unknown tier 'b'"),
        ({"tiers": {"a": {"rank": 1, "sla_class": "x"}}, "default_tier": "a"}, "unknown SLA class 'x'"),
        ({"tier_aliases": {"LS": "vip"}}, "tier_aliases.LS points to unknown tier 'vip'"),
        ({"factors": {"age": {"cap_s": 0}}}, "factors.age.cap_s: Input should be greater than 0"),
        ({"factors": {"shortness": {"short_gpu_s": 10, "long_gpu_s": 5}}}, "long_gpu_s must be greater"),
        ({"reservation": {"depth": -1}}, "reservation.depth: Input should be greater than or equal to 0"),
        ({"reservation": {"backfill": "yes"}}, "reservation.backfill: Input should be 'p90' or 'none'"),
        ({"preemption": {"signal": "TERM"}}, "preemption.signal: String should match pattern"),
        ({"las": {"thresholds_gpu_s": [10, 5]}}, "las.thresholds_gpu_s: must be positive and strictly increasing (got [10, 5])"),
        ({"weights": {k: 0 for k in PolicyConfig().weights}}, "needs at least one positive weight"),
        ({"teams": {"x": {"share": 0}}}, "teams.x.share: Input should be greater than 0"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_errors_name_the_field(data, message):
    with pytest.raises(InputError) as err:
        policy_from_mapping(data, origin="p.yaml")
    text = str(err.value)
    assert text.startswith("p.yaml: ")
    assert message in text


def test_yaml_syntax_error_reports_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("weights:\n  age: [1\n")
    with pytest.raises(InputError, match=r"bad.yaml: line 3, column 1: not valid YAML"):
        load_policy(p)


@pytest.mark.parametrize("text, message", [("- 1\n- 2\n", "expected a mapping"), ("", None)])
def test_top_level_shape(tmp_path, text, message):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    if message:
        with pytest.raises(InputError, match=message):
            load_policy(p)
    else:
        assert load_policy(p) == PolicyConfig()  # an empty file is the default policy


def test_missing_file_and_unknown_preset(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_policy(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="unknown policy preset 'lifo'"):
        load_policy(preset="lifo")


def test_tier_resolution_and_shares():
    p = policy_from_mapping({"tier_aliases": {"LS": "production"}, "teams": {"vision": {"share": 3}}})
    assert p.tier_of("LS") == "production" and p.tier_of("sla") == "sla"
    assert p.tier_of("unknown") == p.tier_of(None) == "research"
    assert p.share_of("vision") == 3 and p.share_of("other") == 1.0
