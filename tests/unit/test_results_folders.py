"""A results folder of one experiment command is refused by the others (``cliargs.usable_out_dir(command=...)``):
each writes ``config.json`` and ``summary.json`` of its own straight into ``--out``, so ``vcemu oppcost`` into an
``apc`` folder replaced both (user review), and a rerun of ``apc`` there then started over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_cli_errors import refused, run
from vcemu.cliargs import RESULTS_MARKS, others_results

#: Each command, with the quickest settings that reach its --out check.
COMMANDS = {"apc": ["apc", "--experiments", "1"], "oppcost": ["oppcost", "--executions", "1"],
            "sweep": ["sweep", "--traces", "1", "--jobs", "2", "--algorithms", "fcfs", "--penalties", "0"],
            "vcsched": ["vcsched", "--instances", "1"]}


@pytest.mark.parametrize(("command", "other"), [(c, o) for c in sorted(COMMANDS) for o in sorted(RESULTS_MARKS)
                                                 if c != o])  # (a command's own folder is its to resume)
def test_a_folder_of_another_commands_results_is_refused_and_left_as_it_was(
        command: str, other: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {RESULTS_MARKS[other]: 1, "argv": [other], "complete": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "summary.json").write_text("{}")
    code, _, err = run([*COMMANDS[command], "--out", str(tmp_path)], capsys)
    refused(code, err, f"--out {tmp_path}: holds the results of vcemu {other} (its config.json); give another --out")
    assert json.loads((tmp_path / "config.json").read_text()) == config
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "summary.json"]


def test_a_commands_own_folder_and_an_unreadable_config_are_not_anothers(tmp_path: Path) -> None:
    assert others_results(tmp_path, "apc") is None  # no config.json
    (tmp_path / "config.json").write_text(json.dumps({"exp2_iats": [100.0]}))
    assert others_results(tmp_path, "apc") is None
    assert others_results(tmp_path, "oppcost") == "apc"
    (tmp_path / "config.json").write_text("{not json")
    assert others_results(tmp_path, "oppcost") is None
    (tmp_path / "config.json").write_text("[1, 2]")
    assert others_results(tmp_path, "oppcost") is None
