"""Every Grafana dashboard panel's query returns data from a real Prometheus scraping a live run.

A real ``vcemu up`` (coordinator + agent processes, real cgroups) runs greedy-pmtn-migr on 2 hosts with
a job mix that forces a preemption and a migration; the Debian ``prometheus`` server scrapes its
coordinator and its agent (``--agent-metrics-port``, at the address ``up`` prints) every second from its own
temporary storage on an ephemeral port; then each panel target
of k8s/grafana/vcemu-dashboard.json is evaluated through Prometheus' HTTP API (range queries over the
run, or instant queries for instant targets), with the template variables replaced by a regex that
matches everything, as Grafana's "All" does.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.integration.conftest import cgroups_unusable
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "k8s" / "grafana" / "vcemu-dashboard.json"
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval is at a 1 s scrape interval and a short range


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def panel_targets() -> list[tuple[str, str, bool]]:
    """(panel title, expression, instant) for every target of every panel."""
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"], bool(t.get("instant"))) for p in dash["panels"] for t in p.get("targets", [])]


def substitute(expr: str, range_s: int) -> str:
    """Grafana's variables: $policy/$host (and ${...}) by an all-matching regex, built-in intervals by durations."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", f"{range_s}s")
    expr = expr.replace("$__interval", "1s")
    expr = re.sub(r"\$\{?[A-Za-z_]\w*(?::\w+)?\}?", ".*", expr)
    assert "$" not in expr, expr
    return expr


def test_every_template_variable_is_substituted():
    dash = json.loads(DASHBOARD.read_text())
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"policy", "host"} <= names
    used = {m for _, e, _ in panel_targets() for m in re.findall(r"\$\{?(\w+)", e)}
    assert used - {"__rate_interval", "__range"} <= names, used
    assert substitute('x{policy=~"$policy",host=~"${host}"}[$__rate_interval]', 60) == 'x{policy=~".*",host=~".*"}[10s]'


def test_the_dashboard_covers_what_issue_6_asks_for():
    """Yields, stretch distribution, CPU allocated and measured, memory, jobs by state, preemptions,
    migrations, decision latency and agent health each have a panel; ids and layout are sound."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(e for _, e, _ in panel_targets())
    for metric in ("vcemu_yield_min_ratio", "vcemu_yield_avg_ratio", "vcemu_job_bounded_stretch_bucket",
                   "vcemu_host_cpu_allocated_ratio", "vcemu_host_cpu_measured_ratio", "vcemu_host_memory_used_bytes",
                   "vcemu_jobs", "vcemu_preemptions_total", "vcemu_migrations_total",
                   "vcemu_decision_latency_seconds_bucket", "vcemu_agent_up",
                   # the agents' own (operator review: no panel read them)
                   "vcemu_agent_host_cpu_allocated_ratio", "vcemu_agent_host_cpu_measured_ratio",
                   "vcemu_agent_lease_remaining_seconds", "vcemu_agent_host_fenced_tasks",
                   "vcemu_agent_host_unkilled_tasks", "vcemu_agent_tasks_ended_total",
                   # a restarted agent and its requeued jobs, and the memory the bytes are a fraction of (review)
                   "vcemu_agent_registrations_total", "vcemu_jobs_requeued_total", "vcemu_host_memory_bytes"):
        assert metric in exprs, metric
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        assert p["gridPos"]["x"] >= 0 and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[tuple[str, list[str], float]]:
    """``vcemu up`` with metrics ports for its coordinator and its agent: (coordinator address, the
    ``HOST:PORT`` of each metrics endpoint, the coordinator's first, start time)."""
    reason = cgroups_unusable()
    if reason:
        pytest.skip(reason)
    port, metrics, agent_metrics = free_port(), free_port(), free_port()
    log = (tmp_path / "up.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "up", "--hosts", "2", "--policy", "greedy-pmtn-migr",
         "--port", str(port), "--metrics-port", str(metrics), "--agent-metrics-port", str(agent_metrics),
         "--cpus-per-host", "0.3", "--mem-per-host", "256MiB"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
    )
    def text() -> str:
        return (tmp_path / "up.log").read_text()

    try:
        deadline = time.monotonic() + 60
        while "vcemu up: coordinator on" not in text():
            assert proc.poll() is None, f"vcemu up exited {proc.returncode}: {text()}"
            assert time.monotonic() < deadline, "vcemu up did not come up in 60 s"
            time.sleep(0.2)
        agents = re.findall(r"^vcemu up: agent \S+: metrics on http://(\S+)/metrics$", text(), re.M)
        assert agents == [f"127.0.0.1:{agent_metrics}"], text()
        yield f"127.0.0.1:{port}", [f"127.0.0.1:{metrics}", *agents], time.time()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def prometheus(tmp_path: Path, live_run: tuple[str, list[str], float]) -> Iterator[str]:
    """A real Prometheus scraping the run's coordinator and agent at 1 s; yields its base URL; always stopped."""
    if PROMETHEUS is None:
        pytest.skip("prometheus not found (make test installs the Debian package `prometheus` when run as root "
                    "with apt-get; or: apt-get install prometheus)")
    _, (coordinator, *agents), _ = live_run
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n" + "".join(
            f"  - job_name: {job}\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n"
            f"    static_configs:\n      - targets: {targets}\n"
            for job, targets in (("vcemu-coordinator", [coordinator]), ("vcemu-agent", agents))))
    log = (tmp_path / "prometheus.log").open("w+")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}"
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus not ready in 30 s"
            time.sleep(0.2)
        while True:  # the run is watched from its first job on: wait for a successful scrape of each target
            result = http_json(f"{url}/api/v1/query?query=up")["data"]["result"]
            if len(result) == 1 + len(agents) and all(r["value"][1] == "1" for r in result):
                break
            assert time.monotonic() < deadline, f"prometheus never scraped the coordinator and agent: {result}"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def submit(stub: pb_grpc.CoordinatorStub, work: float, memory: float) -> str:
    spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=memory, work_seconds=work, workload="dgemm")
    return stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id


def query(url: str, expr: str, start: float, end: float, instant: bool) -> list[dict]:
    if instant:
        q = {"query": expr, "time": f"{end:.3f}"}
        path = "query"
    else:
        q = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
        path = "query_range"
    reply = http_json(f"{url}/api/v1/{path}?{urllib.parse.urlencode(q)}")
    assert reply["status"] == "success", (expr, reply)
    return reply["data"]["result"]


def finite_values(series: list[dict]) -> int:
    vals = [v for s in series for v in (s.get("values") or [s["value"]])]
    return sum(1 for _, v in vals if math.isfinite(float(v)))


def scalar(url: str, expr: str) -> float:
    (s,) = query(url, expr, 0, time.time(), instant=True)
    return float(s["value"][1])


def test_every_dashboard_panel_returns_data(live_run: tuple[str, list[str], float], prometheus: str):
    address, _, t0 = live_run
    t_start = time.monotonic()
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.CoordinatorStub(ch)
        # Memory is the hard constraint (CPU is shared); the policy is GREEDY-PMTN-MIGR. A (0.3) runs on one
        # host for 2 s, B (0.3) takes the other; C (0.8) needs a host to itself, so the lowest-priority job,
        # A (it has run longest), is paused for it and, in the same decision, resumed beside B: a migration
        # (001 Table II counts it as one, not as a preemption). D (0.8) then needs a host too, and neither
        # A nor B fits beside C: both are paused (preemptions) until C ends.
        jobs = [submit(stub, 6.0, 0.3)]
        time.sleep(2.0)
        jobs.append(submit(stub, 3.0, 0.3))
        time.sleep(1.0)
        jobs.append(submit(stub, 3.0, 0.8))
        time.sleep(1.0)
        jobs.append(submit(stub, 3.0, 0.8))
        deadline = time.monotonic() + 40
        while not all(stub.GetJob(pb.JobRef(job_id=j), timeout=5).state == "done" for j in jobs):
            assert time.monotonic() < deadline, [str(stub.GetJob(pb.JobRef(job_id=j), timeout=5)) for j in jobs]
            time.sleep(0.5)
    # Until Prometheus has scraped the last completion (the coordinator's and the agent's counts), not a fixed
    # 2.5 s: a scrape can come late on a loaded machine (the test audit of session 36).
    # (At least: a count above it is a defect the exact checks below name.)
    last: list[float] = []

    def scraped() -> bool:
        try:
            last[:] = [scalar(prometheus, "sum(vcemu_job_bounded_stretch_count)"),
                       scalar(prometheus, 'sum(vcemu_agent_tasks_ended_total{state="done"})')]
        except (ValueError, OSError, AssertionError):  # (no series yet; a busy Prometheus)
            return False
        return min(last) >= len(jobs)

    deadline = time.monotonic() + 30
    while not scraped():
        assert time.monotonic() < deadline, (f"Prometheus did not scrape the last completions within 30 s: stretch "
                                             f"count and tasks done {last}, {len(jobs)} jobs")
        time.sleep(0.25)
    time.sleep(1.0)  # and one more scrape, so that the range queries' last samples are after it
    end = time.time()
    range_s = math.ceil(end - t0) + 1

    assert scalar(prometheus, "sum(vcemu_preemptions_total)") >= 1
    assert scalar(prometheus, "sum(vcemu_migrations_total)") >= 1
    assert scalar(prometheus, "sum(vcemu_job_bounded_stretch_count)") == len(jobs)
    # The agent's own series: each job's one task ended done once, and none failed (a move or a pause stops a
    # task); the CPU panel saw a host's whole share allocated and charged by its cgroup; the lease held throughout.
    assert scalar(prometheus, 'sum(vcemu_agent_tasks_ended_total{state="done"})') == len(jobs)
    assert scalar(prometheus, 'sum(vcemu_agent_tasks_ended_total{state="failed"})') == 0
    assert scalar(prometheus, 'sum(vcemu_agent_tasks_ended_total{state="stopped"})') >= 1
    assert scalar(prometheus, f"max(max_over_time(vcemu_agent_host_cpu_allocated_ratio[{range_s}s]))") >= 0.99
    assert scalar(prometheus, f"max(max_over_time(vcemu_agent_host_cpu_measured_ratio[{range_s}s]))") > 0.5
    assert scalar(prometheus, f"min(min_over_time(vcemu_agent_lease_remaining_seconds[{range_s}s]))") > 0

    empty, rows = [], []
    for title, expr, instant in panel_targets():
        q = substitute(expr, range_s)
        series = query(prometheus, q, t0, end, instant)
        n_finite = finite_values(series)
        rows.append(f"{len(series):3d} series {n_finite:4d} finite  [{title}] {q}")
        if not series or n_finite == 0:
            empty.append((title, q))
    scrapes = scalar(prometheus, f'count_over_time(up{{job="vcemu-coordinator"}}[{range_s}s])')
    print(f"\nrun+scrape {time.monotonic() - t_start:.1f} s, range {range_s} s, {scrapes:.0f} scrapes; per panel "
          "target:\n" + "\n".join(rows))
    assert not empty, f"panel queries without data: {empty}"

    # What the stretch panels read (operator review): every job here has a bounded stretch of at least 1, and
    # histogram_quantile alone put the median of 4 jobs at exactly 1 at 0.5; increase() made 3.02 jobs of 3.
    panels = {p["title"]: p for p in json.loads(DASHBOARD.read_text())["panels"]}
    for t in panels["Bounded stretch: median, p95 and mean"]["targets"]:
        for s in query(prometheus, substitute(t["expr"], range_s), t0, end, instant=True):
            assert float(s["value"][1]) >= 1, (t["expr"], s)
    (counts,) = panels["Bounded stretch of completed jobs"]["targets"]
    got = query(prometheus, substitute(counts["expr"], range_s), t0, end, instant=True)
    assert all(float(s["value"][1]).is_integer() for s in got), got
    assert max(float(s["value"][1]) for s in got) == len(jobs)  # the +Inf bucket holds every job
