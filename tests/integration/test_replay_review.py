"""``vcemu replay`` cut off by ``--timeout`` on a live agent (one host, ``--no-cgroups``): said on stderr, and scored
up to the cut-off: the review saw utilisation 1.157 (the span ended at the last completion, while jobs still running
after it added used time). Here job a finishes early, b runs alone long after it, and c arrives just before the
cut-off; b and c are still running then."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from coordinator.replay import replay_main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

JOBS = [
    {"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 20},
    {"id": "b", "submit_time": 200, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 20000},
    {"id": "c", "submit_time": 400, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 20000},
    {"id": "d", "submit_time": 90000, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 20},
]


def test_a_replay_cut_off_says_so_and_its_utilisation_is_at_most_1(tmp_path: Path, capfd) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(j) + "\n" for j in JOBS))
    rc = replay_main([str(trace), "--policy", "greedy-pmtn", "--compress", "40", "--hosts", "1", "--cpus-per-host",
                      "0.5", "--no-cgroups", "--max-jobs", "4", "--timeout", "12", "--json",
                      "--out", str(tmp_path / "out")])
    captured = capfd.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert rc == 1 and out["timed_out"] is True
    live, sim = out["live"], out["sim"]
    assert live["completed"] == 1, (live, captured.err[-2000:])  # a
    assert "the live run timed out after 12 s (--timeout): 1 of 4 jobs completed (3 arrived)" in captured.err
    assert live["jobs"] == sim["jobs"] == sim["completed"] == 4
    assert 0.0 < live["utilisation"] <= 1.0, live
    assert live["span_s"] > 400  # to the cut-off, after c's arrival; not a's end
    d = next((tmp_path / "out").iterdir())
    rows = {r["job"]: r for r in csv.DictReader((d / "jobs.csv").open())}
    assert rows["a"]["live_state"] == "done" and float(rows["a"]["live_stretch"]) >= 1.0
    assert rows["b"]["live_state"] in ("running", "paused") and rows["b"]["live_end"] == ""
    assert rows["d"]["live_state"] == "not arrived" and rows["d"]["sim_state"] == "done"
