"""Bad configuration stops start-up with one clear line naming the setting (issue 6 acceptance)."""

from __future__ import annotations

import pytest

from coordinator.cli import main
from node_agent.cli import agent_main


@pytest.mark.parametrize(
    ("argv", "setting", "fragment"),
    [
        (["up", "--policy", "nosuch"], "--policy", "unknown policy 'nosuch'"),
        (["up", "--cpus-per-host=-0.5"], "--cpus-per-host", "must be > 0"),
        (["up", "--hosts", "0"], "--hosts", "must be > 0"),
        (["coordinator", "--port", "99999"], "--port", "must be in 0..65535"),
        (["coordinator", "--policy", "FIFO"], "--policy", "unknown policy 'FIFO'"),
        (["demo", "--jobs", "x"], "--jobs", "must be a whole number"),
        (["simulate", "jobs.jsonl", "--policy", "nosuch"], "--policy", "unknown policy"),
    ],
)
def test_bad_setting_is_one_line_naming_it(argv, setting, fragment, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"argument {setting}" in err and fragment in err


@pytest.mark.parametrize(
    ("argv", "setting", "fragment"),
    [
        (["--port", "70000"], "--port", "must be a port in [0, 65535]"),
        (["--hosts", "2", "--cpus-per-host", "0.5,-1"], "--cpus-per-host", ""),
        (["--mem-per-host", "lots"], "--mem-per-host", ""),
    ],
)
def test_agent_bad_setting_is_one_line(argv, setting, fragment, capsys) -> None:
    assert agent_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert setting in err and fragment in err
