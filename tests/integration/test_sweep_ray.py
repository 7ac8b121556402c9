"""``vcemu sweep`` on a real local Ray: cells run as Ray tasks, are stored, and a rerun skips them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed")

from coordinator.sweep import build_traces, run_cell, sweep_main  # noqa: E402


@pytest.mark.timeout(180)
def test_sweep_on_ray_is_resumable_and_reproducible(tmp_path: Path, capsys):
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "easy,greedy-pmtn", "--penalties", "300", "--traces", "1",
            "--jobs", "12", "--loads", "0.5,0.9", "--workers", "2", "--cell-timeout", "60", "--no-progress"]
    try:
        assert sweep_main(argv) == 0
    finally:
        ray.shutdown()
    assert "4 cells; 0 stored, 4 to run" in capsys.readouterr().err
    cells = sorted((out / "cells").glob("*.json"))
    assert len(cells) == 4
    stamps = {p.name: p.stat().st_mtime_ns for p in cells}
    first = [json.loads(p.read_text()) for p in cells]
    assert all(c["status"] == "ok" for c in first)
    with (out / "table1_p300.csv").open() as fh:
        t1 = {r["algorithm"]: r for r in csv.DictReader(fh)}
    assert set(t1) == {"easy", "greedy-pmtn"} and min(float(r["scaled_avg"]) for r in t1.values()) >= 1.0
    for name in ("config.json", "cells.csv", "degradation.csv", "fig1.png", "table1_p300.png", "table2_p300.png"):
        assert (out / name).stat().st_size > 0, name

    assert sweep_main(argv) == 0  # every cell stored: Ray is not even started
    assert "4 stored, 0 to run" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")} == stamps

    # Reproducible: the traces rebuilt from the stored config give the stored results, run in this process.
    cfg = json.loads((out / "config.json").read_text())
    trace = next(t for t in build_traces(cfg) if t.load == 0.9)
    stored = json.loads((out / "cells" / f"{trace.id}__greedy-pmtn__p300.json").read_text())
    assert run_cell(trace.specs, "greedy-pmtn", 300.0, trace.hosts)["max_stretch"] == stored["max_stretch"]

    assert sweep_main([*argv, "--jobs", "13"]) == 2  # other settings: refused
    assert "other settings (jobs)" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_a_worker_killed_on_ray_leaves_its_cell_unstored(tmp_path: Path, capsys, monkeypatch):
    import os
    import signal

    def kill_easy(specs, algorithm, penalty, hosts, timeout_s, host_memory_gb):  # shipped by value to Ray
        if algorithm == "easy":
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9 of the worker while its cell runs
        return run_cell(specs, algorithm, penalty, hosts, timeout_s=timeout_s, host_memory_gb=host_memory_gb)

    monkeypatch.setattr("coordinator.sweep._remote_run_cell", kill_easy)
    out = tmp_path / "sweep"
    argv = ["--out", str(out), "--algorithms", "fcfs,easy", "--penalties", "300", "--traces", "1", "--jobs", "12",
            "--loads", "0.5", "--workers", "1", "--cell-timeout", "60", "--no-progress"]
    try:
        assert sweep_main(argv) == 1
    finally:
        ray.shutdown()
    err = capsys.readouterr().err
    assert "1 cell failed for infrastructure reasons and was not stored" in err and "WorkerCrashedError" in err
    assert [p.name.split("__")[1] for p in (out / "cells").glob("*.json")] == ["fcfs"]


@pytest.mark.timeout(60)
def test_an_unreachable_address_is_refused_in_one_line_within_seconds(tmp_path: Path, capsys):
    """A mistyped ``--address`` (nothing listens there) is a refused setting, not minutes of Ray's retries."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    argv = ["--out", str(tmp_path / "sweep"), "--algorithms", "easy", "--penalties", "300", "--traces", "1",
            "--jobs", "12", "--loads", "0.5", "--cell-timeout", "60", "--no-progress", "--address", f"127.0.0.1:{port}"]
    t0 = time.monotonic()
    try:
        assert sweep_main(argv) == 2
    finally:
        ray.shutdown()
    assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"vcemu sweep: --address: no Ray cluster reachable at 127.0.0.1:{port} (Connection refused)"
