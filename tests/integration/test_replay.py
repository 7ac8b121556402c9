"""``vcemu replay``: a tiny job file on two live hosts (real agent process, cgroups), time-compressed 30x,
scored beside its simulation by the same metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coordinator.replay import replay_main

JOBS = [
    {"id": "a", "submit_time": 0, "tasks": 2, "cpu_need": 1.0, "memory": 0.2, "work": 300},
    {"id": "b", "submit_time": 60, "tasks": 1, "cpu_need": 0.25, "memory": 0.1, "work": 240},
    {"id": "c", "submit_time": 120, "tasks": 2, "cpu_need": 1.0, "memory": 0.5, "work": 180},
    {"id": "d", "submit_time": 150, "tasks": 1, "cpu_need": 1.0, "memory": 0.6, "work": 120},
    {"id": "wide", "submit_time": 160, "tasks": 3, "cpu_need": 1.0, "memory": 0.1, "work": 60},
]


@pytest.mark.timeout(120)
def test_replay_runs_live_and_simulated_side_by_side(cgroups_required, tmp_path: Path, capfd):
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("".join(json.dumps(j) + "\n" for j in JOBS))
    rc = replay_main([str(trace), "--policy", "dynmcb8-asap-per", "--compress", "30", "--hosts", "2",
                      "--max-jobs", "5", "--json", "--out", str(tmp_path / "out")])
    captured = capfd.readouterr()  # file descriptors, so the agent processes' output is caught too
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert rc == 0, out
    assert out["jobs"] == 4 and out["dropped_too_wide"] == 1  # 3 tasks cannot run on 2 hosts
    live, sim = out["live"], out["sim"]
    assert live["completed"] == sim["completed"] == 4
    # Simulated: a (2x100%) runs alone, b joins; c needs both hosts' memory room -> stretches > 1.
    assert sim["max_stretch"] > 1.0
    # Live pays real start/stop costs and runs on a loaded box: same order of magnitude, not equal.
    assert 0.5 <= live["max_stretch"] / sim["max_stretch"] <= 4.0, (live, sim)
    assert 0.5 <= live["span_s"] / sim["span_s"] <= 3.0
    assert 0.0 < live["utilisation"] <= 1.0 and 0.0 <= live["underutilisation"] < 1.0
    # The plans the live run carried out (its jobs' starts among them), and the share of its wall time they took.
    plans = out["live_plans"]
    assert plans["count"] >= 1 and 0.0 < plans["median_s"] <= plans["p99_s"] < 30.0, plans
    assert 0.0 < plans["wall_share"] < 1.0, plans
    written = next((tmp_path / "out").iterdir())
    assert json.loads((written / "metrics.json").read_text())["live_plans"] == plans
    assert {p.name for p in written.iterdir()} >= {"config.json", "metrics.json", "metrics.csv", "agents.log",
                                                   "jobs.csv", "stretch.png"}
    # Each job's live stretch against its simulated one: every job finished both ways is compared.
    per_job = out["per_job"]
    assert per_job["jobs"] == 4 and 0.0 <= per_job["median_rel_diff"] <= per_job["max_rel_diff"], per_job
    assert json.loads((written / "metrics.json").read_text())["per_job"] == per_job
    # The agents log into the run's folder, not over the progress bar on the terminal.
    agents_log = (written / "agents.log").read_text()
    assert re.search(r"^vcemu agent: [-\d]+T[:\d]+ INFO task start ", agents_log, re.M), agents_log[:500]
    assert "vcemu agent" not in captured.err, captured.err[-500:]
    # And the coordinator into a log of its own there.
    assert " INFO agent replay0 at 127.0.0.1:" in (written / "coordinator.log").read_text()
    assert " INFO coordinator on 127.0.0.1:" in (written / "coordinator.log").read_text()  # where to follow the run


def test_replay_refuses_an_unknown_policy(tmp_path: Path, capsys):
    trace = tmp_path / "tiny.jsonl"
    trace.write_text(json.dumps(JOBS[0]) + "\n")
    assert replay_main([str(trace), "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
