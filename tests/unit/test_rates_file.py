"""``vcemu agent --progress-by units --rates-file``: a calibration kept for the agent process started again in its
place (:func:`node_agent.runner.calibrated_rates`). Without it a restarted agent measured its calibration again for
about 4 s before it registered, close to the 6 s after which its hosts are declared lost (session 37 measured 5.3 s
on an idle machine; 1.6 s with the file). Under ``cpu-time`` progress (the default, and ``vcemu up``'s) nothing is
calibrated."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

import node_agent.runner as runner
from coordinator.cli import main
from node_agent.runner import calibrated_rates

WORKLOADS = {"dgemm": "workloads.dgemm", "arraycycle": "workloads.arraycycle"}


@pytest.fixture
def measured(monkeypatch) -> list[str]:
    """Calibrations made (a fake: dgemm 100.0, arraycycle 7.0), in order."""
    made: list[str] = []

    def calibrate(workload: str) -> float:
        made.append(workload)
        return {"dgemm": 100.0, "arraycycle": 7.0}[workload]

    monkeypatch.setattr(runner, "calibrate", calibrate)
    return made


def test_without_a_file_each_workload_is_calibrated(measured: list[str]) -> None:
    assert calibrated_rates(WORKLOADS) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert measured == ["dgemm", "arraycycle"]


def test_a_new_file_is_written_and_the_next_process_reads_it_instead_of_calibrating(
        measured: list[str], tmp_path: Path, caplog) -> None:
    path = tmp_path / "agent0.json"
    assert calibrated_rates(WORKLOADS, str(path)) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert json.loads(path.read_text()) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert sorted(os.listdir(tmp_path)) == ["agent0.json"]  # (no temporary file left)
    measured.clear()
    path.write_text(json.dumps({"dgemm": 250.5, "arraycycle": 3.25}))
    with caplog.at_level(logging.INFO, logger="vcemu.agent"):
        assert calibrated_rates(WORKLOADS, str(path)) == {"dgemm": 250.5, "arraycycle": 3.25}
    assert measured == []
    assert f"calibration read from {path} (an earlier process of this agent measured it)" in caplog.text


@pytest.mark.parametrize(("content", "why"), [
    ("{", "not JSON (Expecting property name enclosed in double quotes, line 1)"),
    ('{"dgemm": 250.5}', "no rate for arraycycle"),
    ('{"dgemm": 250.5, "arraycycle": -1}', "the rate of arraycycle is not a positive number: -1"),
    ('{"dgemm": 250.5, "arraycycle": NaN}', "the rate of arraycycle is not a positive number: NaN"),
    ('{"dgemm": 250.5, "arraycycle": "fast"}', 'the rate of arraycycle is not a positive number: "fast"'),
    ('{"dgemm": 250.5, "arraycycle": null}', "the rate of arraycycle is not a positive number: null"),
    ('{"dgemm": true, "arraycycle": true}', "the rate of dgemm is not a positive number: true"),
    ('{"dgemm": 1' + "0" * 400 + ', "arraycycle": 7}', "the rate of dgemm is not a positive number: 1000"),
    ("[1, 2]", "not an object of rates (a JSON list)"),
    ("[" * 100_000 + "]" * 100_000, "unreadable (RecursionError)"),
    (b"\xff\xfe", "'utf-8' codec can't decode byte 0xff"),
])
def test_a_file_without_a_valid_rate_for_each_workload_is_warned_of_and_measured_again(
        content: str | bytes, why: str, measured: list[str], tmp_path: Path, caplog) -> None:
    path = tmp_path / "agent0.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="vcemu.agent"):
        assert calibrated_rates(WORKLOADS, str(path)) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert measured == ["dgemm", "arraycycle"]
    assert f"--rates-file {path}: {why}" in caplog.text and "calibrating again" in caplog.text, caplog.text
    assert json.loads(path.read_text()) == {"dgemm": 100.0, "arraycycle": 7.0}  # the next restart reads this one


def test_a_file_that_cannot_be_written_is_warned_of_and_the_agent_goes_on(measured: list[str], tmp_path: Path,
                                                                           caplog) -> None:
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "agent0.json"  # (its folder is a file: root may write anywhere else)
    with caplog.at_level(logging.WARNING, logger="vcemu.agent"):
        assert calibrated_rates(WORKLOADS, str(path)) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert f"--rates-file {path}: cannot write the calibration there (Not a directory)" in caplog.text


def test_a_failed_write_leaves_no_temporary_file(measured: list[str], tmp_path: Path, monkeypatch) -> None:
    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner.os, "replace", refuse)
    assert calibrated_rates(WORKLOADS, str(tmp_path / "agent0.json")) == {"dgemm": 100.0, "arraycycle": 7.0}
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("where", "why"), [("folder", "is a folder"), ("missing/agent0.json", ": no folder"),
                                            ("", "no file's path")])
def test_the_agent_refuses_a_rates_file_it_could_not_use_before_it_calibrates(where: str, why: str, tmp_path: Path,
                                                                               monkeypatch, capsys) -> None:
    import node_agent.server

    (tmp_path / "folder").mkdir()
    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    path = str(tmp_path / where) if where else ""
    assert main(["agent", "--progress-by", "units", "--rates-file", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"vcemu agent: error: argument --rates-file: {path}"), err
    assert why in err[0], err


def test_the_agent_refuses_a_rates_file_without_units_progress(tmp_path: Path, monkeypatch, capsys) -> None:
    """Under ``cpu-time`` progress (the default) nothing is calibrated: a ``--rates-file`` would do nothing."""
    import node_agent.server

    monkeypatch.setattr(node_agent.server, "open_core", lambda *a, **k: pytest.fail("agent core opened"))
    assert main(["agent", "--rates-file", str(tmp_path / "agent0.json")]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err == ("vcemu agent: error: argument --rates-file: only --progress-by units calibrates the workloads "
                   "(under cpu-time progress a task is done when charged its CPU-seconds)")


@pytest.mark.parametrize(("progress_by", "calibrated"), [("cpu-time", []), ("units", ["dgemm", "arraycycle"])])
def test_an_agent_calibrates_only_under_units_progress(progress_by: str, calibrated: list[str],
                                                       measured: list[str]) -> None:
    """Calibrating took every agent start about 4 s, and under ``cpu-time`` progress no rate is read."""
    from node_agent.agent import open_core

    core = open_core(f"ratescal-{os.getpid()}", [], no_cgroups=True, progress_by=progress_by)
    try:
        assert measured == calibrated
        assert set(core.rates) == {"dgemm", "arraycycle"}
    finally:
        core.shutdown()


def test_up_gives_its_agents_no_rates_file(monkeypatch, capsys) -> None:
    """``vcemu up``'s agents progress by CPU time: they calibrate nothing, and up keeps no calibrations for them."""
    import coordinator.servers

    extras: list[list[str]] = []

    def spawn(coordinator, hosts, cpus, mems, agent_id, extra=(), log=None, token=None):  # type: ignore[no-untyped-def]
        extras.append(list(extra))
        if len(extras) == 2:
            raise KeyboardInterrupt
        return subprocess.Popen(["sleep", "60"])

    monkeypatch.setattr(coordinator.servers, "spawn_agent", spawn)
    assert main(["up", "--hosts", "2", "--agents", "2", "--port", "0"]) == 130, capsys.readouterr().err
    assert len(extras) == 2 and not any("--rates-file" in extra for extra in extras), extras


def test_a_units_task_without_a_calibrated_rate_is_refused(tmp_path: Path) -> None:
    """Review h214: an agent under cpu-time progress has rates of 0; a task given units progress on such a rate had a
    target of 1 unit (``max(1, ...)``) and was done at its first multiplication, silently (the integration test of
    units progress passed so)."""
    from node_agent.dutycycle import DutyCycleDriver
    from node_agent.runner import Task, TaskSpec

    spec = TaskSpec("t/0", "h0", 1.0, "dgemm", 1.0, 1.0, 1.0, 64 << 20)
    with pytest.raises(ValueError, match="no calibrated rate"):
        Task(spec, DutyCycleDriver(), 0.0, str(tmp_path), "units")
    assert Task(spec, DutyCycleDriver(), 0.0, str(tmp_path), "cpu-time").cpu_target > 0
