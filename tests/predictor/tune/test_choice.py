"""Rule *chosen point* and the objectives' directions."""

from __future__ import annotations

import math

import pytest

from features.errors import InputError
from predictor.tune.choice import choose, margin
from predictor.tune.objectives import DEFAULT_OBJECTIVES, no_worse, parse_objectives

QSSF = {"avg_jct_s": 500.0, "max_wait_s": 10_000.0, "sla_misses": 4, "jain_index": 0.90}


def point(jct, wait, sla, jain):
    return {"avg_jct_s": jct, "max_wait_s": wait, "sla_misses": sla, "jain_index": jain}


@pytest.mark.parametrize("front, chosen", [
    # margins 10 % (all four gain at least 10 %) and 1 % (max wait); the third waits longer than QSSF
    pytest.param([point(450, 9_000, 3, 0.91), point(300, 9_900, 2, 0.95), point(200, 12_000, 1, 0.95)], 0,
                 id="largest-margin-not-lowest-jct"),
    pytest.param([point(450, 9_000, 3, 0.91), point(400, 9_800, 3, 0.91)], 0, id="a-thin-max-wait-margin-loses"),
    pytest.param([point(400, 9_000, 3, 0.91), point(400, 9_000, 3, 0.91)], 0, id="tie-earlier-trial"),
    pytest.param([point(300, 9_000, 5, 0.99), point(490, 5_000, 0, 0.99)], 1, id="an-sla-miss-more-disqualifies"),
    pytest.param([point(300, 9_000, 2, 0.899), point(490, 9_000, 2, 0.95)], 1, id="a-lower-jain-disqualifies"),
    pytest.param([point(501, 5_000, 0, 0.99), point(500, 10_000, 4, 0.90)], 1, id="a-higher-jct-disqualifies"),
])
def test_the_rule_picks_the_largest_margin_among_points_no_worse_than_qssf_on_all_four(front, chosen):
    choice = choose(front, QSSF)
    assert choice.qualified and choice.index == chosen
    assert "no worse than qssf on all four" in choice.rule and "max_wait_s <= 10000" in choice.rule
    assert "avg_jct_s <= 500" in choice.rule


def test_margin_is_the_smallest_relative_gain():
    assert margin(point(450, 9_000, 3, 0.95), QSSF) == pytest.approx(0.10)  # JCT and max wait 10 %
    assert margin(point(250, 5_000, 0, 0.91), QSSF) == pytest.approx(0.10)  # unfairness 0.10 -> 0.09
    assert margin(QSSF, QSSF) == 0.0  # QSSF itself qualifies, with no margin
    assert margin(point(600, 5_000, 0, 0.99), QSSF) == pytest.approx(-0.2)
    assert margin(point(None, 5_000, 0, 0.99), QSSF) == -math.inf


def test_when_none_qualifies_the_smallest_worst_shortfall_is_chosen_and_the_rule_says_so():
    front = [point(300, 20_000, 4, 0.90),   # max wait 100 % worse
             point(350, 11_000, 4, 0.90),   # 10 % worse
             point(320, 10_000, 6, 0.90),   # SLA misses 50 % worse
             point(600, 10_000, 4, 0.90)]   # JCT 20 % worse
    choice = choose(front, QSSF)
    assert not choice.qualified and choice.index == 1
    assert "no front point qualified" in choice.rule and "10.0% worse" in choice.rule


def test_undefined_metrics_are_worse_than_any_value_and_as_good_as_undefined():
    assert not no_worse("max_wait_s", None, 10.0)
    assert no_worse("jain_index", None, None) and no_worse("jain_index", 0.5, math.nan)
    assert choose([point(300, 9_000, 4, None)], {**QSSF, "jain_index": None}).qualified


def test_an_empty_front_is_an_error():
    with pytest.raises(ValueError, match="no trial completed"):
        choose([], QSSF)


def test_objectives_have_directions_and_a_bad_name_is_one_line_naming_it():
    objs = parse_objectives(DEFAULT_OBJECTIVES)
    assert [(o.metric, o.direction) for o in objs] == [
        ("avg_jct_s", "minimize"), ("max_wait_s", "minimize"), ("sla_misses", "minimize"), ("jain_index", "maximize")]
    assert objs[3].value({"jain_index": None}) == -math.inf and objs[0].value({"avg_jct_s": math.nan}) == math.inf
    with pytest.raises(InputError, match=r"unknown metric 'avg_jct'; choose from avg_jct_s") as err:
        parse_objectives("avg_jct,max_wait_s")
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="named more than once"):
        parse_objectives("avg_jct_s,avg_jct_s")
