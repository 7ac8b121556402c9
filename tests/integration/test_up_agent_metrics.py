"""``vcemu up --agent-metrics-port BASE``: each agent process it starts serves its own Prometheus metrics on
BASE + i, and ``up`` says where before it says it is up. Real processes: ``vcemu up`` with two agents sharing
three hosts (``--no-cgroups``: no root needed), each agent's metrics read over HTTP."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]


def free_port_pair() -> int:
    """A port p with p and p + 1 both free just now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
            return p
    raise AssertionError("no two consecutive free ports")


def test_up_serves_each_agents_metrics_on_base_plus_i_and_says_where(tmp_path: Path) -> None:
    base = free_port_pair()
    log_path = tmp_path / "up.log"
    with log_path.open("wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "up", "--hosts", "3", "--agents", "2",
                               "--no-cgroups", "--port", "0", "--agent-metrics-port", str(base)],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while "vcemu up: coordinator on" not in (text := log_path.read_text(errors="replace")):
            assert up.poll() is None and time.monotonic() < deadline, f"vcemu up did not come up:\n{text}"
            time.sleep(0.2)
        said = dict(re.findall(r"^vcemu up: agent (\S+): metrics on (\S+)$", text, re.M))
        assert said == {"agent0": f"http://127.0.0.1:{base}/metrics",
                        "agent1": f"http://127.0.0.1:{base + 1}/metrics"}, text
        assert text.index("vcemu up: agent agent1: metrics") < text.index("vcemu up: coordinator on"), text
        for agent, hosts in (("agent0", {"agent0-h0", "agent0-h1"}), ("agent1", {"agent1-h0"})):
            with urllib.request.urlopen(said[agent], timeout=5) as r:
                metrics = r.read().decode()
            served = set(re.findall(r'^vcemu_agent_host_cpu_allocated_ratio\{host="([^"]+)"\}', metrics, re.M))
            assert served == hosts, metrics
            assert 'vcemu_agent_cgroup_mode_info{mode="duty-cycle"} 1.0' in metrics, metrics
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            assert up.wait(30) == 0, log_path.read_text(errors="replace")
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
            raise
