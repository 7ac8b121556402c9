"""``vcemu demo`` and ``vcemu replay`` write each run into a new directory under ``--out`` named after the time it
started: two runs started in the same second get two directories, each with its own results, and the names stay
readable and sort by start."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from coordinator.demo import _write_results, compare_with_target
from coordinator.replay import _write

NOON = time.mktime((2025, 3, 4, 12, 0, 0, 0, 0, -1))  # local time


@pytest.fixture
def same_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock stands at 2025-03-04 12:00:00 (local) for every run, as for runs started in one second."""
    real = time.strftime
    monkeypatch.setattr(time, "time", lambda: NOON + 0.25)
    monkeypatch.setattr(time, "strftime", lambda fmt, t=None: real(fmt, time.localtime(NOON) if t is None else t))


def test_two_demos_started_in_the_same_second_keep_their_own_results(tmp_path: Path, same_second: None) -> None:
    dirs = []
    for seed, diff in ((1, 0.1), (1, 0.3)):
        args = argparse.Namespace(out=str(tmp_path), policy="greedy", seed=seed)
        dirs.append(_write_results(args, [], compare_with_target([diff]), 0, 1.0, "cgroup-v1"))
    assert [d.name for d in dirs] == ["20250304-120000-greedy-seed1", "20250304-120000-greedy-seed1-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [d.name for d in dirs]
    assert [json.loads((d / "summary.json").read_text())["live_vs_sim_median_rel_diff"] for d in dirs] == [0.1, 0.3]


def test_two_replays_started_in_the_same_second_keep_their_own_results(tmp_path: Path, same_second: None) -> None:
    dirs = []
    for jobs in (3, 4):
        args = argparse.Namespace(out=str(tmp_path), policy="greedy", compress=60.0, trace="t.jobs")
        dirs.append(_write(args, {"jobs": jobs, "live": {"completed": jobs}, "sim": {"completed": jobs}}))
    assert [d.name for d in dirs] == ["20250304-120000-greedy-k60", "20250304-120000-greedy-k60-2"]
    assert [json.loads((d / "metrics.json").read_text())["jobs"] for d in dirs] == [3, 4]
    assert [(d / "metrics.csv").read_text().splitlines()[1] for d in dirs] == ["completed,3,3", "completed,4,4"]


def test_the_name_is_the_start_of_the_run_and_sorts_by_it(tmp_path: Path) -> None:
    from vcemu.outputs import new_run_dir

    late = new_run_dir(tmp_path, "greedy-seed1", NOON + 60)
    early = [new_run_dir(tmp_path, "greedy-seed1", NOON) for _ in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in [*early, late]]
    assert late.name == "20250304-120100-greedy-seed1"
