"""``vcemu simulate`` on a trace as a researcher runs it at scale (scale review): an SWF trace on the 120 hosts its
jobs were converted for unless ``--hosts`` says otherwise, and a per-job table printed only up to 1,000 jobs (the
whole HPC2N trace printed 202,874 lines, 15 MB, before its summary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.experiments import MAX_TABLE_JOBS
from tests.unit.test_cli_errors import run
from workloads.swf import SWFJob, write_swf


def _trace(path: Path, n: int = 3) -> Path:
    # jobs of 64 processors, as HPC2N's: more tasks than the 4 hosts of a job file's default
    write_swf(path, [SWFJob(job_number=i + 1, submit_time=10 * i, wait_time=0, run_time=100, allocated_processors=64,
                            average_cpu_time=-1, used_memory_kb=-1, requested_processors=64, requested_time=200,
                            requested_memory_kb=-1, status=1, user_id=1, group_id=1, executable_number=1,
                            queue_number=1, partition_number=1, preceding_job_number=-1, think_time=-1)
                     for i in range(n)])
    return path


def test_an_swf_trace_runs_on_120_hosts_unless_told(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path / "t.swf")
    code, out, err = run(["simulate", str(trace), "--policy", "fcfs", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["hosts"] == 120 and json.loads(out)["completed"] == 3
    code, out, err = run(["simulate", str(trace), "--policy", "fcfs", "--hosts", "200", "--json"], capsys)
    assert code == 0 and json.loads(out)["hosts"] == 200, err
    jobs = tmp_path / "j.jsonl"
    jobs.write_text(json.dumps({"id": "j", "submit_time": 0, "tasks": 1, "cpu_need": 0.5, "memory": 0.1,
                                "work": 5}) + "\n")
    code, out, err = run(["simulate", str(jobs), "--policy", "fcfs", "--json"], capsys)
    assert code == 0 and json.loads(out)["hosts"] == 4, err  # a job file's default is unchanged


def test_the_per_job_table_is_printed_up_to_its_most_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "j.jsonl"
    n = MAX_TABLE_JOBS + 1
    jobs.write_text("".join(json.dumps({"id": f"j{i}", "submit_time": i, "tasks": 1, "cpu_need": 0.5, "memory": 0.1,
                                        "work": 5}) + "\n" for i in range(n)))
    code, out, err = run(["simulate", str(jobs), "--policy", "fcfs"], capsys)
    assert code == 0, err
    assert f"this run's {n:,} go to jobs.csv with --out DIR" in out and "j17 " not in out
    assert out.rstrip().splitlines()[-1].startswith(f"fcfs: {n}/{n} done")
    code, out, err = run(["simulate", str(jobs), "--policy", "fcfs", "--out", str(tmp_path / "o")], capsys)
    (folder,) = (tmp_path / "o").iterdir()
    assert code == 0 and f"are in {folder / 'jobs.csv'}" in out
    assert len((folder / "jobs.csv").read_text().splitlines()) == n + 1
