"""Heterogeneous live hosts: ``--cpus-per-host`` / ``--mem-per-host`` take one value or one per host, in
``vcemu up`` and ``vcemu agent`` (seed 004's machines differ in CPU speed and memory)."""

from __future__ import annotations

import pytest

from coordinator.cli import build_parser, main
from node_agent.cli import _hosts
from node_agent.cli import build_parser as agent_parser
from tests.unit.test_cli_errors import run
from vcemu.cliargs import per_host


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
    ("--cpus-per-host", "0.5,x", "cannot parse 'x' in '0.5,x'"),
    ("--cpus-per-host", "0.5,0", "must be > 0, got '0' in '0.5,0'"),
    ("--cpus-per-host", "0", "must be > 0, got '0'"),
    ("--mem-per-host", "1GiB,lots", "cannot parse 'lots' in '1GiB,lots'"),
    ("--mem-per-host", "1XB", "cannot parse '1XB'"),
])
def test_up_rejects_bad_values_naming_the_flag_once(capsys, flag: str, value: str, why: str) -> None:
    """argparse names the flag ("argument --mem-per-host: "): a message that names it again reads as a stutter."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["up", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {why} " in err, err
    assert err.count(flag) == 1, err


@pytest.mark.parametrize("argv", [
    ["up", "--hosts", "x"], ["up", "--port", "99999"], ["demo", "--jobs", "0"], ["demo", "--span", "nan"],
    ["demo", "--cpus-per-host", "-1"], ["simulate", "f", "--policy", "greedy", "--penalty", "-1"],
    ["agent", "--cpus-per-host", "0,x"], ["agent", "--mem-per-host", "1XB"], ["agent", "--cpus-per-host", "0"],
    ["replay", "f", "--mem-per-host", "1XB"], ["replay", "f", "--hosts", "0"],
])
def test_every_size_and_number_refusal_names_its_flag_once(capsys, argv: list[str]) -> None:
    """The other argument types (sizes, counts, ports, fractions; the agent's and replay's own) say the rule and
    leave the flag to argparse: each case's flag (its last but one word) is named once."""
    code, _, err = run(argv, capsys)
    flag = argv[-2]
    assert code == 2, err
    assert f"argument {flag}: " in err and err.count(flag) == 1, err


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
