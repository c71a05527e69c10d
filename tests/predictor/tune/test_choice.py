"""Rule *chosen point* and the objectives' directions."""

from __future__ import annotations

import math

import pytest

from features.errors import InputError
from predictor.tune.choice import choose, margin, part_key, parts_of
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
    choice = choose(front, QSSF, min_margin=0.0)
    assert choice.qualified and choice.index == chosen and not choice.baseline
    assert "no worse than qssf on all four" in choice.rule and "max_wait_s <= 10000" in choice.rule
    assert "avg_jct_s <= 500" in choice.rule


def test_margin_is_the_smallest_relative_gain():
    assert margin(point(450, 9_000, 3, 0.95), QSSF) == pytest.approx(0.10)  # JCT and max wait 10 %
    assert margin(point(250, 5_000, 0, 0.91), QSSF) == pytest.approx(0.10)  # unfairness 0.10 -> 0.09
    assert margin(QSSF, QSSF) == 0.0  # QSSF itself qualifies, with no margin
    assert margin(point(600, 5_000, 0, 0.99), QSSF) == pytest.approx(-0.2)
    assert margin(point(None, 5_000, 0, 0.99), QSSF) == -math.inf


def test_when_none_qualifies_qssf_itself_is_chosen_and_the_rule_says_how_close_the_front_came():
    front = [point(300, 20_000, 4, 0.90),   # max wait 100 % worse
             point(350, 11_000, 4, 0.90),   # 10 % worse
             point(320, 10_000, 6, 0.90),   # SLA misses 50 % worse
             point(600, 10_000, 4, 0.90)]   # JCT 20 % worse
    choice = choose(front, QSSF)
    assert not choice.qualified and choice.baseline and choice.index == -1
    assert "no front point qualified (the closest was 10.0% worse" in choice.rule
    assert choice.rule.endswith("so the chosen policy is qssf itself")


@pytest.mark.parametrize("won, min_margin, baseline", [
    (0.002, 0.01, True),    # the Philly-derived study's QSSF-like point: 0.2 % is not a gain to act on
    (0.02, 0.01, False),
    (0.002, 0.0, False),    # --min-margin 0: any qualifying point is chosen
    (0.0, 0.0, False),      # ... even a tie
])
def test_a_point_is_chosen_over_qssf_only_with_at_least_the_minimum_margin(won, min_margin, baseline):
    p = point(500 * (1 - won), 10_000 * (1 - won), 4 - 4 * won, 1 - 0.1 * (1 - won))
    choice = choose([p], QSSF, min_margin=min_margin)
    assert choice.qualified and choice.baseline == baseline and choice.index == (-1 if baseline else 0)
    assert ("under 1.0%, so the chosen policy is qssf itself" in choice.rule) == baseline


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


def with_parts(whole, *parts):
    """A point's metrics with those of consecutive parts of the window (``part_key``)."""
    out = dict(whole)
    for i, p in enumerate(parts, start=1):
        out.update({part_key(i, m): v for m, v in p.items()})
    return out


QSSF_PARTS = with_parts(QSSF, point(700, 10_000, 3, 0.85), point(300, 4_000, 1, 0.95))


def test_a_point_that_wins_on_the_whole_window_but_loses_a_part_does_not_qualify():
    # 10 % better on the whole window, but the second (lighter) part is 5 % worse on JCT and max wait
    winner_on_average = with_parts(point(450, 9_000, 3, 0.91), point(600, 9_000, 2, 0.86), point(315, 4_200, 1, 0.95))
    ties_qssf = QSSF_PARTS  # the QSSF-like point replays as QSSF does
    choice = choose([winner_on_average, ties_qssf], QSSF_PARTS, min_margin=0.0)
    assert choice.qualified and choice.index == 1
    assert "each of its 2 consecutive parts" in choice.rule and "chosen margin 0.0%" in choice.rule
    assert choose([winner_on_average, ties_qssf], QSSF_PARTS).baseline  # a tie is no gain: QSSF itself
    assert margin(winner_on_average, QSSF) == pytest.approx(0.1)  # without QSSF's parts: the whole window only
    assert margin(winner_on_average, QSSF_PARTS) == pytest.approx(-0.05)


def test_the_margin_is_the_smallest_over_the_whole_window_and_its_parts():
    p = with_parts(point(400, 8_000, 2, 0.92), point(630, 9_000, 2, 0.88), point(270, 3_000, 0, 0.96))
    # whole: min(0.2, 0.2, 0.5, 0.2) = 0.2; part 1: min(0.1, 0.1, 1/3, 0.2) = 0.1; part 2: min(0.1, 0.25, 1, 0.2)
    assert margin(p, QSSF_PARTS) == pytest.approx(0.1)
    assert parts_of(p)[1] == point(630, 9_000, 2, 0.88)
    assert choose([p], QSSF_PARTS).qualified


def test_when_none_qualifies_the_shortfall_counts_the_parts_too():
    # a: 2 % worse on the whole window's JCT only; b: better on the whole, 30 % worse on part 2's max wait
    a = with_parts(point(510, 10_000, 4, 0.90), point(714, 10_000, 3, 0.85), point(306, 4_000, 1, 0.95))
    b = with_parts(point(490, 9_000, 3, 0.91), point(690, 9_000, 2, 0.86), point(290, 5_200, 1, 0.95))
    choice = choose([b, a], QSSF_PARTS)
    assert not choice.qualified and choice.baseline
    assert "the closest was 2.0% worse than qssf on its worst metric, whole window and parts" in choice.rule


def test_a_point_that_loses_more_jobs_out_of_memory_than_qssf_never_qualifies():
    """A point that sizes nothing by memory can win the four guards by failing jobs (they leave the queue
    early): it does not qualify, and the margin does not reward a point for failing fewer."""
    qssf = {**QSSF, "jobs_failed_oom": 20}
    lossy = {**point(300, 5_000, 0, 0.99), "jobs_failed_oom": 21}  # wins every guard by 40 %+
    safe = {**point(450, 9_000, 3, 0.91), "jobs_failed_oom": 2}  # 10 % margin
    choice = choose([lossy, safe], qssf, min_margin=0.0)
    assert choice.qualified and choice.index == 1, choice
    assert "no more jobs to out-of-memory failures than qssf (20)" in choice.rule
    assert margin(safe, qssf) == pytest.approx(margin(point(450, 9_000, 3, 0.91), QSSF))
    assert choose([lossy], qssf).baseline and not choose([lossy], qssf).qualified


def test_qssf_chosen_says_when_it_lost_more_jobs_out_of_memory_than_a_front_point():
    qssf = {**QSSF, "jobs_failed_oom": 231}
    slower = {**point(900, 9_000, 3, 0.91), "jobs_failed_oom": 17}
    choice = choose([slower], qssf)
    assert choice.baseline
    assert "qssf lost 231 of the tuning window's jobs to out-of-memory failures, a front point 17" in choice.rule
    even = choose([{**point(900, 9_000, 3, 0.91), "jobs_failed_oom": 231}], qssf)
    assert "out-of-memory failures, a front point" not in even.rule
    assert "lost" not in choose([point(900, 9_000, 3, 0.91)], QSSF).rule  # no counts: no clause, no note


def test_the_base_policy_is_chosen_instead_of_a_qssf_that_loses_many_more_jobs_out_of_memory():
    qssf = {**QSSF, "jobs_failed_oom": 120}
    slower = {**point(900, 9_000, 3, 0.91), "jobs_failed_oom": 10}  # loses to QSSF on JCT
    choice = choose([slower], qssf, base=slower)
    assert choice.base and not choice.baseline and choice.index == -1
    assert ("but qssf lost 120 of the tuning window's jobs to out-of-memory failures against 10 for the base "
            "policy (trial 0), so the chosen policy is the base policy") in choice.rule


@pytest.mark.parametrize("qssf_lost, base_lost", [
    pytest.param(36, 36, id="one-gpu-type-both-lose-the-same"),
    pytest.param(19, 10, id="under-twice-as-many"),
    pytest.param(8, 4, id="twice-but-fewer-than-5-more"),
    pytest.param(None, 3, id="no-count"),
])
def test_qssf_stays_the_fallback_unless_it_loses_many_more_jobs(qssf_lost, base_lost):
    qssf = {**QSSF, "jobs_failed_oom": qssf_lost}
    base = {**point(900, 9_000, 3, 0.91), "jobs_failed_oom": base_lost}
    choice = choose([base], qssf, base=base)
    assert choice.baseline and not choice.base
    assert choose([base], qssf).baseline  # no base metrics: QSSF as before


def test_a_front_disqualified_only_by_its_losses_says_so():
    qssf = {**QSSF, "jobs_failed_oom": 20}
    lossy = {**point(300, 5_000, 0, 0.99), "jobs_failed_oom": 30}
    choice = choose([lossy], qssf)
    assert "the points no worse than qssf on all four lost more jobs to out-of-memory failures" in choice.rule
    assert "0.0% worse" not in choice.rule


def test_the_rule_names_the_qssf_it_judges_against():
    sized = choose([point(600, 10_000, 4, 0.90)], QSSF, name="qssf-sized")
    assert sized.baseline and sized.rule.startswith("largest margin over qssf-sized (")
    assert sized.rule.endswith("so the chosen policy is qssf-sized itself")
    assert " qssf " not in sized.rule and "qssf itself" not in sized.rule.replace("qssf-sized itself", "")
    won = choose([point(400, 9_000, 3, 0.95)], QSSF, name="qssf-sized")
    assert won.index == 0 and "no worse than qssf-sized on all four" in won.rule
