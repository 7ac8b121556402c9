"""A live run's folder records the cores its hosts got (reproducibility review).

``vcemu replay`` and ``vcemu demo`` give each emulated host, by default, 60% of *this* machine's cores shared out
(:func:`coordinator.servers.default_cpus_per_host`), and their config.json recorded only the flag,
``"cpus_per_host": null``: a folder from a 2-core machine did not say its hosts had 0.6 core each, and a rerun from
it on a 16-core machine gave them 1 (the live column's time per job, start-up overheads and contention change with
it). config.json now records ``cpus_per_host_used`` (one value per host) and ``machine_cpus``.
"""

from __future__ import annotations

import argparse
import json
import os

from coordinator.demo import _write_results, compare_with_target
from coordinator.replay import _write
from coordinator.servers import default_cpus_per_host


def test_replay_records_the_default_cores_per_host(tmp_path):
    args = argparse.Namespace(out=str(tmp_path), policy="greedy", compress=5.0, hosts=3, cpus_per_host=None, ray=None)
    d = _write(args, {"live": {"jobs": 1}, "sim": {"jobs": 1}})
    config = json.loads((d / "config.json").read_text())
    assert config["cpus_per_host"] is None  # the flag, as given
    assert config["cpus_per_host_used"] == [default_cpus_per_host(3)] * 3
    assert config["machine_cpus"] == os.cpu_count()


def test_replay_records_cores_given_per_host(tmp_path):
    args = argparse.Namespace(out=str(tmp_path), policy="greedy", compress=5.0, hosts=2, cpus_per_host=["1", "0.25"],
                              ray=None)
    d = _write(args, {"live": {"jobs": 1}, "sim": {"jobs": 1}})
    assert json.loads((d / "config.json").read_text())["cpus_per_host_used"] == [1.0, 0.25]


def test_demo_records_the_default_cores_per_host(tmp_path):
    args = argparse.Namespace(out=str(tmp_path), policy="greedy", seed=1, hosts=4, cpus_per_host=None)
    d = _write_results(args, [], compare_with_target([0.1]), 0, 1.0, "cgroup-v1")
    config = json.loads((d / "config.json").read_text())
    assert config["cpus_per_host_used"] == [default_cpus_per_host(4)] * 4
    assert config["machine_cpus"] == os.cpu_count()
