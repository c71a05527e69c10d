"""``predictor tune`` warns when the policy it recommends (QSSF itself) loses more jobs out of memory than the base."""

from __future__ import annotations

from types import SimpleNamespace

from predictor.cli.tune import _warn_losses


def _result(baseline: bool, qssf: float | None, ours: float | None):
    return SimpleNamespace(choice=SimpleNamespace(baseline=baseline),
                           validation={"qssf": {"jobs_failed_oom": qssf}, "ours": {"jobs_failed_oom": ours}})


def test_qssf_chosen_and_losing_more_jobs_out_of_memory_is_warned(capsys):
    _warn_losses(_result(True, 90, 7))
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: qssf, the chosen policy, lost 90 of the validation window's jobs" in err
    assert "against 7 for the base policy (ours)" in err


def test_no_warning_when_a_searched_point_is_chosen_or_qssf_loses_no_more(capsys):
    _warn_losses(_result(False, 90, 7))
    _warn_losses(_result(True, 7, 7))
    _warn_losses(_result(True, None, 7))
    assert capsys.readouterr().err == ""
