"""The declared search space: every row names a policy setting, both ends of its range validate."""

from __future__ import annotations

import pytest

from features.errors import InputError
from predictor.policy.config import PolicyConfig
from predictor.sim.rules import load_policy
from predictor.tune.space import (
    SEARCH_SPACE,
    Parameter,
    apply,
    check_space,
    distributions,
    policy_with,
    values_in,
)


def _at(doc: dict, path: str):
    for part in path.split("."):
        doc = doc[part]
    return doc


@pytest.mark.parametrize("param", SEARCH_SPACE, ids=[p.name for p in SEARCH_SPACE])
def test_each_parameter_is_a_policy_setting_whose_range_ends_validate(param: Parameter) -> None:
    base = load_policy("ours")
    for end in (param.low, param.high):
        policy = policy_with(base, {param.path: param.clip(end)})
        assert _at(policy.model_dump(mode="json"), param.path) == pytest.approx(param.clip(end))
    assert param.low < param.high
    assert not param.log or param.low > 0


def test_the_space_covers_the_issue_groups_and_names_each_setting_once() -> None:
    names = [p.name for p in SEARCH_SPACE]
    assert len(names) == len(set(names))
    for needed in ("weights.shortness", "factors.age.cap_s", "aging.guard_depth", "factors.shortness.short_gpu_s",
                   "preemption.trigger_wait_s", "preemption.max_loss_ratio", "queueing.scheduling_depth"):
        assert needed in names
    check_space(load_policy("ours"))


def test_apply_sets_values_at_their_paths_and_leaves_the_rest() -> None:
    base = load_policy("ours").model_dump(mode="json")
    doc = apply(base, {"weights.age": 4.5, "aging.guard_depth": 7})
    assert doc["weights"]["age"] == 4.5 and doc["aging"]["guard_depth"] == 7
    assert doc["weights"]["shortness"] == base["weights"]["shortness"]
    assert base["weights"]["age"] != 4.5  # the base document is not modified


def test_the_base_policy_values_are_clipped_into_the_space() -> None:
    base = load_policy("ours")
    values = values_in(base)
    assert values["weights.shortness"] == base.weights["shortness"]
    assert values["queueing.scheduling_depth"] == base.queueing.scheduling_depth
    no_guard = policy_with(base, {}).model_copy(update={"aging": base.aging.model_copy(update={"starvation_after_s": None})})
    assert values_in(no_guard)["aging.starvation_after_s"] == 7 * 86400.0  # off: the end nearest to off
    for p, dist in zip(SEARCH_SPACE, distributions().values(), strict=True):
        assert dist._contains(dist.to_internal_repr(values[p.name]))


def test_an_invalid_combination_names_the_field() -> None:
    with pytest.raises(InputError, match="weights"):
        policy_with(load_policy("ours"), {f"weights.{k}": 0.0 for k in PolicyConfig().weights})


def test_a_row_that_names_no_setting_fails_before_any_trial() -> None:
    with pytest.raises(InputError, match="aging.no_such_setting is not a setting"):
        check_space(load_policy("ours"), (Parameter("aging.no_such_setting", 1.0, 2.0),))


def test_the_qssf_like_point_lies_in_the_space_and_orders_by_shortness_alone() -> None:
    from predictor.tune.space import qssf_like

    base = load_policy("ours")
    values = qssf_like(base)
    for p, dist in zip(SEARCH_SPACE, distributions().values(), strict=True):
        assert dist._contains(dist.to_internal_repr(values[p.name]))
    policy = policy_with(base, values)
    assert {k for k, w in policy.weights.items() if w > 0} == {"shortness"}
    assert policy.reservation.depth == 0 and policy.preemption.max_preemptors_per_cycle == 0
    assert policy.aging.starvation_min_s == 86400.0 and policy.aging.starvation_backlog_factor == 0.0


def test_next_to_qssf_sized_the_qssf_like_point_keeps_the_base_policys_sizing() -> None:
    from predictor.tune.space import qssf_like

    base = load_policy("ours")
    assert base.sizing.use_predictions
    plain, sized = qssf_like(base), qssf_like(base, sized=True)
    assert plain["sizing.use_predictions"] == 0 and sized["sizing.use_predictions"] == 1
    assert {k: v for k, v in sized.items() if k != "sizing.use_predictions"} == {
        k: v for k, v in plain.items() if k != "sizing.use_predictions"}
    assert policy_with(base, sized).sizing.use_predictions
