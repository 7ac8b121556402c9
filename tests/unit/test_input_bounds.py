"""Numbers the input review found taken without a bound, each ending in a hang, a MemoryError or a flapping cluster:
each is refused now in one line naming the flag and the bound, before anything starts."""

from __future__ import annotations

import os

import pytest

from coordinator.replay import replay_main
from coordinator.servers import MIN_HOST_CORES, default_cpus_per_host, hosts_refusal
from tests.unit.test_cli_errors import refused, run


@pytest.mark.parametrize(("argv", "message"), [
    # 10,000,000 hosts: a MemoryError; 1,000,000: 31 s and 850 MB for 6 jobs
    (["simulate", "j.jsonl", "--policy", "fcfs", "--hosts", "1000000"], "--hosts: must be at most 100,000"),
    # a preempted job's blocked_until overflowed to inf: the simulation never ended
    (["simulate", "j.jsonl", "--policy", "greedy-pmtn", "--penalty", "1e308"], "--penalty: must be at most 1e+09 s"),
    (["up", "--hosts", "100000"], "--hosts: must be at most 10,000"),  # "Argument list too long"
    (["up", "--hosts", "200", "--agents", "100"], "--agents: must be at most 64"),  # 100 agent processes
    (["up", "--heartbeat", "0.001"], "--heartbeat: must be at least 0.25 s"),  # lost and back 156 times in 30 s
    (["up", "--heartbeat", "1e-300"], "--heartbeat: must be at least 0.25 s"),  # the cluster never came up
    (["coordinator", "--heartbeat", "0.1"], "--heartbeat: must be at least 0.25 s"),
    (["demo", "--hosts", "20000"], "--hosts: must be at most 10,000"),
])
def test_an_unbounded_number_is_refused_naming_its_bound(argv: list[str], message: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(argv, capsys)
    refused(code, err, message)


@pytest.mark.parametrize(("argv", "message"), [
    (["--compress", "1e308"], "--compress: must be at most 1e+06"),  # the live clock became inf within 2 s
    (["--compress", "1e-300"], "--compress: must be at least 0.001"),
    (["--penalty", "1e308"], "--penalty: must be at most 1e+09 s"),
    (["--agents", "65", "--hosts", "100"], "--agents: must be at most 64"),
])
def test_replays_unbounded_numbers_are_refused(argv: list[str], message: str, tmp_path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([str(tmp_path / "t.jsonl"), "--policy", "greedy", *argv], capsys, replay_main)
    refused(code, err, message)


def test_the_default_share_of_many_hosts_is_never_rounded_to_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounded to three decimals, 1.2 cores over 12,000 hosts gave each 0.0 (the agents refused a list of 12,000
    zeros) and over 1,700 hosts 0.001 each, 40% more than the machine has."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert default_cpus_per_host(4) == 0.3 and default_cpus_per_host(1) == 1.0
    assert default_cpus_per_host(1700) == pytest.approx(0.000706)  # 1.2 / 1700, to 3 significant digits
    assert default_cpus_per_host(1200) == MIN_HOST_CORES and hosts_refusal(1200, None) is None
    why = hosts_refusal(1201, None)
    assert why is not None and why.startswith("--hosts 1201: each host would get 0.000999 cores")
    assert "give at most 1,200 hosts, or --cpus-per-host" in why
    assert hosts_refusal(5000, ["0.01"]) is None  # the user's own share: the agent checks it


def test_up_refuses_more_hosts_than_the_default_share_can_enforce(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    code, _, err = run(["up", "--hosts", "2000", "--no-cgroups"], capsys)
    refused(code, err, "vcemu up: --hosts 2000: each host would get 0.0006 cores")
    code, _, err = run(["demo", "--hosts", "2000", "--no-cgroups"], capsys)
    refused(code, err, "vcemu demo: --hosts 2000: each host would get 0.0006 cores")


def test_simulate_out_refuses_an_empty_path_and_a_sweeps_folder_and_fits_a_long_file_name(
        tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Input review: ``--out ''`` wrote into the current folder; ``--out`` a sweep's folder mixed a run into it; a
    job file of a 240-character name ran the whole simulation, then could not write (File name too long)."""
    import json

    jobs = tmp_path / ("a" * 240 + ".jsonl")
    jobs.write_text(json.dumps({"id": "j", "submit_time": 0, "tasks": 1, "cpu_need": 0.5, "memory": 0.1,
                                "work": 5}) + "\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["simulate", str(jobs), "--policy", "fcfs", "--out", ""], capsys)
    refused(code, err, "vcemu simulate: --out: must be a folder's path, got an empty one")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "config.json").write_text(json.dumps({"penalties": [0], "algorithms": ["fcfs"]}))
    code, _, err = run(["simulate", str(jobs), "--policy", "fcfs", "--out", str(sweep)], capsys)
    refused(code, err, "holds the results of vcemu sweep")
    code, _, err = run(["simulate", str(jobs), "--policy", "fcfs", "--out", str(tmp_path / "runs")], capsys)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "jobs.csv").exists() and len(run_dir.name) < 255
