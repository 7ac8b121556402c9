"""Heterogeneous live hosts: ``--cpus-per-host`` / ``--mem-per-host`` take one value or one per host, in
``vcemu up`` and ``vcemu agent`` (seed 004's machines differ in CPU speed and memory)."""

from __future__ import annotations

import pytest

from coordinator.cli import build_parser, main, per_host
from node_agent.cli import _hosts
from node_agent.cli import build_parser as agent_parser


def test_up_accepts_one_value_or_one_per_host() -> None:
    args = build_parser().parse_args(["up", "--hosts", "3", "--cpus-per-host", "0.5,0.25, 0.25",
                                      "--mem-per-host", "1GiB,512MiB,256MiB"])
    assert args.cpus_per_host == ["0.5", "0.25", "0.25"]
    assert per_host("--mem-per-host", args.mem_per_host, 3) == ["1GiB", "512MiB", "256MiB"]
    assert per_host("--cpus-per-host", 0.3, 2) == ["0.3", "0.3"]
    assert per_host("--mem-per-host", ["2GiB"], 3) == ["2GiB"] * 3
    with pytest.raises(ValueError, match=r"--cpus-per-host: give one value or 3 \(one per host\), got 2"):
        per_host("--cpus-per-host", ["0.5", "0.25"], 3)


@pytest.mark.parametrize(("flag", "value", "why"), [
    ("--cpus-per-host", "0.5,x", "cannot parse 'x'"),
    ("--cpus-per-host", "0.5,0", "must be > 0"),
    ("--mem-per-host", "1GiB,lots", "cannot parse 'lots'"),
])
def test_up_rejects_bad_values_naming_the_flag(capsys, flag: str, value: str, why: str) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["up", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and why in err


def test_up_rejects_a_wrong_count_before_starting_anything(capsys) -> None:
    assert main(["up", "--hosts", "2", "--cpus-per-host", "0.1,0.1,0.1", "--port", "0"]) == 2
    assert "--cpus-per-host: give one value or 2 (one per host), got 3" in capsys.readouterr().err


def test_agent_builds_heterogeneous_hosts_and_rejects_wrong_counts(capsys) -> None:
    p = agent_parser()
    args = p.parse_args(["--hosts", "2", "--cpus-per-host", "0.5,0.25", "--mem-per-host", "1GiB,256MiB",
                         "--agent-id", "a"])
    hosts = _hosts(args, p)
    assert [(h.cpu_cores, h.memory_bytes) for h in hosts] == [(0.5, 1 << 30), (0.25, 256 << 20)]
    args = p.parse_args(["--hosts", "3", "--mem-per-host", "1GiB,256MiB", "--agent-id", "a"])
    with pytest.raises(SystemExit):
        _hosts(args, p)
    assert "--mem-per-host: give one value or 3 (one per host), got 2" in capsys.readouterr().err
