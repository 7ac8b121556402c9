"""``vcemu sweep`` on a real local Ray: cells run as Ray tasks, are stored, and a rerun skips them."""

from __future__ import annotations

import csv
import json
import os
import re
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
    assert "other settings (--jobs 12 stored, 13 now); give --jobs 12 to resume it" in capsys.readouterr().err


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
    out_text, err = capsys.readouterr()
    assert "1 cell failed for infrastructure reasons and was not stored" in err and "WorkerCrashedError" in err
    # The sweep says what failed; Ray's own "(raylet) A worker died ..." paragraph (printed to stdout, across the
    # progress bar, before connect() silenced it) stays in the raylet's event log.
    assert "(raylet)" not in out_text + err and "A worker died" not in out_text + err, out_text
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


@pytest.mark.timeout(150)
def test_ctrl_c_on_a_real_ray_sweep_says_what_is_stored_and_leaves_nothing_running(tmp_path: Path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while cells run on a local Ray: before, a
    KeyboardInterrupt traceback from ``ray.wait`` and status 1. Now one line, status 130, the finished cell kept,
    and every process the sweep started (Ray's, its workers) gone."""
    import signal
    import subprocess
    import sys
    import time

    from tests.integration.test_demo_interrupt import assert_all_gone, descendants, kill_leftovers
    from tests.integration.test_up_agent_death import ROOT, wait_for

    out, err_path = tmp_path / "sweep", tmp_path / "sweep.err"
    argv = [sys.executable, "-m", "coordinator.cli", "sweep", "--out", str(out), "--algorithms",
            "fcfs,greedy-pmtn,dynmcb8", "--penalties", "300", "--traces", "1", "--jobs", "2000", "--loads", "0.9",
            "--workers", "1", "--cell-timeout", "120", "--no-progress"]
    with err_path.open("wb") as err:
        sweep = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    spawned: dict[int, bytes] = {}
    try:
        wait_for("no cell was stored", lambda: list((out / "cells").glob("*.json")), 100, err_path)
        spawned = descendants(sweep.pid)
        assert any(b"raylet" in argv for argv in spawned.values()), spawned
        os.killpg(sweep.pid, signal.SIGINT)
        t0 = time.monotonic()
        code = sweep.wait(60)
        stderr = err_path.read_text(errors="replace")
        assert code == 130 and "Traceback" not in stderr, stderr
        assert re.fullmatch(r"vcemu sweep: interrupted: [12] of 3 cells stored; run the same command again to resume",
                            stderr.strip().splitlines()[-1]), stderr
        assert time.monotonic() - t0 < 30
        assert_all_gone(spawned, 15)
    finally:
        kill_leftovers(spawned, sweep)
