"""``predictor tune`` warns when the policy it recommends (QSSF itself) loses more jobs out of memory than the base."""

from __future__ import annotations

from types import SimpleNamespace

from predictor.cli.tune import _warn_losses


def _result(baseline: bool, qssf: float | None, ours: float | None, judge: str = "qssf"):
    return SimpleNamespace(choice=SimpleNamespace(baseline=baseline), judge=judge,
                           validation={judge: {"jobs_failed_oom": qssf}, "ours": {"jobs_failed_oom": ours}})


def test_qssf_chosen_and_losing_more_jobs_out_of_memory_is_warned(capsys):
    _warn_losses(_result(True, 90, 7))
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: qssf, the chosen policy, lost 90 of the validation window's jobs" in err
    assert "against 7 for the base policy (ours): it sizes nothing by memory" in err


def test_the_warning_names_the_judging_qssf_and_blames_sizing_only_for_plain_qssf(capsys):
    _warn_losses(_result(True, 12, 7, judge="qssf-sized"))
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: qssf-sized, the chosen policy, lost 12 of the validation window's jobs" in err
    assert "sizes nothing" not in err


def test_no_warning_when_a_searched_point_is_chosen_or_qssf_loses_no_more(capsys):
    _warn_losses(_result(False, 90, 7))
    _warn_losses(_result(True, 7, 7))
    _warn_losses(_result(True, None, 7))
    assert capsys.readouterr().err == ""
