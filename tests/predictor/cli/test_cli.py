from predictor.cli import main


def test_version_lists_key_libraries(capsys):
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert "gpu-job-predictor" in out and "lightgbm" in out


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    assert "version" in capsys.readouterr().out
