"""A new user's walk through the README: ``vcemu bench boot`` printed nothing for its ~80 s, then its table (bench
starts and cpu-share show how far they are); ``vcemu bench starts --jobs 1 --tasks 10000`` reported
``starts_per_s 2.5`` and ``running_at_quarters [0, 0, 0]``, figures that mean nothing for one job (it runs once all
its tasks do: one start, at the end). Nothing here starts an agent or a cluster."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from coordinator import bench_ops
from node_agent import bench_boot

# ---- bench boot: a bar on a terminal, drawn between the timed starts; nothing off a terminal ----------------------


class _Log:
    """What happened, in order: a start, a boot's end seen, a write to stderr."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()

    def add(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


def _fake_agents(monkeypatch: pytest.MonkeyPatch, log: _Log) -> None:
    """bench boot's agents replaced by instant ones (every start booted at once), and no gap between starts."""

    class Task:
        @property
        def _booted(self) -> bool:
            log.add("booted")
            return True

    class Core:
        def __init__(self, *_a: object, **_k: object) -> None:
            self._tasks: dict[str, Task] = {}
            self.boot_poll_s = 0.0

        def start_task(self, tid: str, *_a: object) -> None:
            log.add("start")
            self._tasks[tid] = Task()

        def status(self) -> None:
            pass

        def shutdown(self) -> None:
            pass

    monkeypatch.setattr(bench_boot, "AgentCore", Core)
    monkeypatch.setattr(bench_boot, "DutyCycleDriver", lambda: None)
    monkeypatch.setattr(bench_boot, "GAP_S", 0.0)
    monkeypatch.setattr(bench_boot, "STATUS_S", 0.01)


def _stderr(monkeypatch: pytest.MonkeyPatch, tty: bool, log: _Log) -> io.StringIO:
    class Err(io.StringIO):
        def isatty(self) -> bool:
            return tty

        def write(self, text: str) -> int:
            log.add("write")
            return super().write(text)

    err = Err()
    monkeypatch.setattr("sys.stderr", err)
    return err


@pytest.mark.parametrize("as_json", [False, True])
def test_bench_boot_shows_a_bar_on_a_terminal_drawn_between_timed_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture, as_json: bool) -> None:
    log = _Log()
    _fake_agents(monkeypatch, log)
    err = _stderr(monkeypatch, True, log)
    argv = ["--no-cgroups", "--starts", "3", "--rounds", "2", "--out", str(tmp_path / "bb")]
    assert bench_boot.boot_main(argv + (["--json"] if as_json else [])) == 0
    out = capsys.readouterr().out
    drawn = err.getvalue()
    if as_json:  # (no bar with --json, as bench starts, load and scale)
        assert drawn == "" and json.loads(out)["rounds"] == 2
        return
    assert "cold_rounds_only" in out  # (the table, as before)
    # what it measures (each agent, each round), how far it is (of 2 rounds x 3 agents x 3 starts) and an ETA
    for name, _, _ in bench_boot.VARIANTS:
        assert f"boot {name} [round 2/2]" in drawn, drawn
    assert "18/18" in drawn and "<" in drawn and "start/s" in drawn, drawn
    # no write between a timed start and its boot's end: the bar is drawn outside the timed sections
    events = log.events
    timed = [i for i, e in enumerate(events) if e == "start"]
    for i in timed:
        end = events.index("booted", i)
        assert "write" not in events[i:end], events[i:end + 1]


def test_bench_boot_draws_nothing_off_a_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    log = _Log()
    _fake_agents(monkeypatch, log)
    err = _stderr(monkeypatch, False, log)
    assert bench_boot.boot_main(["--no-cgroups", "--starts", "2", "--rounds", "1", "--out", str(tmp_path / "bb")]) == 0
    assert err.getvalue() == ""
    assert "MEDIAN ms" in capsys.readouterr().out


# ---- bench starts: the job figures of a run of few jobs -----------------------------------------------------------


def test_starts_figures_of_one_job_are_null_with_a_reason_and_tasks_per_second_given() -> None:
    samples = [(0.1, 0), (0.2, 0), (0.3, 0), (0.4, 1)]
    fig = bench_ops.starts_figures(samples, jobs=1, tasks=10000)
    assert fig["starts_per_s"] is None and fig["running_at_quarters"] is None
    assert fig["task_starts_per_s"] == 25000.0
    assert set(fig["notes"]) == {"starts_per_s", "running_at_quarters"}
    assert "1 job," in fig["notes"]["starts_per_s"] and "task_starts_per_s" in fig["notes"]["starts_per_s"]


def test_starts_figures_of_many_jobs_are_as_before() -> None:
    samples = [(0.25, 10), (0.5, 20), (0.75, 30), (1.0, 40)]
    fig = bench_ops.starts_figures(samples, jobs=40, tasks=1)
    assert fig == {"starts_per_s": 40.0, "task_starts_per_s": 40.0, "running_at_quarters": [10, 20, 30], "notes": {}}


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench starts against a coordinator whose jobs all run at the 4th count, and no agent: nothing is started."""
    import contextlib

    import coordinator.service
    from coordinator.model import JobState

    class Board:
        def __init__(self) -> None:
            self.counts = self.jobs = 0

        def counts_and_running(self) -> tuple[dict, list]:
            self.counts += 1
            return {JobState.RUNNING: self.jobs if self.counts >= 4 else 0}, []

    class Server:
        address = "fake:0"
        board = Board()

        def __init__(self, *_a: object, **_k: object) -> None:
            Server.board = Board()  # (a board per run: the stub's submissions count on it)

        def start(self) -> Server:
            return self

        def stop(self) -> None:
            pass

    class Stub:
        def __init__(self, _channel: object) -> None:
            pass

        def SubmitBatch(self, request, timeout: float):  # type: ignore[no-untyped-def]  # noqa: N802
            Server.board.jobs += len(request.requests)
            return SimpleNamespace(results=[SimpleNamespace(code=0, error="", job=SimpleNamespace(job_id=r.request_id))
                                            for r in request.requests])

    monkeypatch.setattr(coordinator.service, "CoordinatorServer", Server)
    monkeypatch.setattr(bench_ops, "_spawn_agents", lambda *_a, **_k: [])
    monkeypatch.setattr(bench_ops, "stop_agents", lambda *_a, **_k: None)
    monkeypatch.setattr(bench_ops.grpc, "insecure_channel", lambda _address: contextlib.nullcontext())
    monkeypatch.setattr(bench_ops.pb_grpc, "CoordinatorStub", Stub)
    monkeypatch.setattr(bench_ops, "_apply_timed", lambda *_a: ({"pause": 0.1, "resume": 0.1, "move": 0.2}, None))
    monkeypatch.setattr(bench_ops, "_cancel_all", lambda *_a: 0.3)


def test_bench_starts_of_one_job_reports_task_starts_and_says_why_the_job_figures_are_null(
        fake_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--jobs", "1", "--tasks", "10000", "--out", str(tmp_path / "bs")]
    assert bench_ops.bench_starts_main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "bs" / "starts.json").read_text()) == result
    # the keys others read are all there; the job figures null, with their reason
    assert {"starts_per_s", "running_at_quarters", "seconds_to_all_running", "running"} <= set(result)
    assert result["starts_per_s"] is None and result["running_at_quarters"] is None
    assert result["task_starts_per_s"] == pytest.approx(10000 / result["seconds_to_all_running"], rel=0.05)
    assert set(result["notes"]) == {"starts_per_s", "running_at_quarters"}
    assert bench_ops.bench_starts_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["starts_per_s", "None"] for line in lines), lines
    assert any(line.startswith("starts_per_s: null: 1 job, fewer than 4") for line in lines), lines
    assert any(line.split()[0] == "task_starts_per_s" for line in lines), lines


def test_bench_starts_of_many_jobs_keeps_its_job_figures(fake_cluster: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    assert bench_ops.bench_starts_main(["--jobs", "40", "--out", str(tmp_path / "bs"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["starts_per_s"] > 0 and result["running_at_quarters"] is not None and result["notes"] == {}
    assert result["task_starts_per_s"] == result["starts_per_s"]


def test_bench_starts_help_says_what_each_figure_means(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        bench_ops.bench_starts_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for key in ("starts_per_s", "task_starts_per_s", "running_at_quarters", "seconds_to_all_running",
                "seconds_to_cancel_all", "notes"):
        assert key in text, key
    assert "fewer than 4 jobs" in text
