"""``vcemu bench starts`` end to end: a coordinator, one real agent process, jobs submitted at once; the JSON
line says they all run, were paused, resumed and moved, and the result file holds the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_starts_runs_every_job_and_writes_what_it_prints(tmp_path: Path) -> None:
    out = tmp_path / "starts"
    proc = subprocess.run([sys.executable, "-m", "coordinator.cli", "bench", "starts", "--jobs", "40", "--hosts", "2",
                           "--json", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["running"] == 40 and result["jobs"] == 40 and result["hosts"] == 2
    assert result["seconds_to_all_running"] > 0 and result["starts_per_s"] > 0 and result["seconds_to_cancel_all"] > 0
    # every job paused, resumed and moved by a plan each (an error, not a figure, if a job was not left so)
    assert all(result[f"seconds_to_{k}_all"] > 0 for k in ("pause", "resume", "move"))
    assert len(result["running_at_quarters"]) == 3
    assert json.loads((out / "starts.json").read_text()) == result
    assert json.loads((out / "starts-config.json").read_text())["jobs"] == 40


def test_bench_starts_runs_one_job_of_many_tasks(tmp_path: Path) -> None:
    """``--tasks``: one job of 2,000 tasks on 2 hosts (StartTasks calls of at most 32 KiB each) runs."""
    out = tmp_path / "starts"
    proc = subprocess.run([sys.executable, "-m", "coordinator.cli", "bench", "starts", "--jobs", "1", "--tasks", "2000",
                           "--hosts", "2", "--json", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["running"] == 1 and result["tasks"] == 2000 and result["seconds_to_all_running"] > 0
    assert result["seconds_to_cancel_all"] > 0  # (cancelled: the agent held none of its tasks at the end)
    assert all(result[f"seconds_to_{k}_all"] > 0 for k in ("pause", "resume", "move"))
    assert json.loads((out / "starts-config.json").read_text())["tasks"] == 2000
