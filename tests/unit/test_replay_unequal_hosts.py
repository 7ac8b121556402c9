"""``vcemu replay --cpus-per-host`` takes one value per host, as ``vcemu up`` does: a replay on hosts of unequal size
(before, only one value was taken, so a policy's handling of unequal hosts could not be compared live)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.model import JobSpec
from coordinator.replay import _parse, replay_hosts, single_core


def test_one_value_per_host_is_taken() -> None:
    a = _parse(["jobs.jsonl", "--hosts", "4", "--cpus-per-host", "0.45,0.15,0.45,0.15"])
    assert a.cpus_per_host == ["0.45", "0.15", "0.45", "0.15"]
    hosts = replay_hosts(4, a.cpus_per_host)
    assert [h.cpu for h in hosts] == pytest.approx([1.0, 1 / 3, 1.0, 1 / 3])  # the largest is "a host"


def test_one_value_is_a_number_as_before() -> None:
    a = _parse(["jobs.jsonl", "--hosts", "4", "--cpus-per-host", "0.3"])
    assert a.cpus_per_host == 0.3
    assert [h.cpu for h in replay_hosts(4, a.cpus_per_host)] == [1.0] * 4
    assert _parse(["jobs.jsonl"]).cpus_per_host is None


@pytest.mark.parametrize("argv", [["--hosts", "4", "--cpus-per-host", "0.4,0.2,0.4"],
                                  ["--hosts", "2", "--cpus-per-host", "0.4,-0.2"],
                                  ["--hosts", "2", "--cpus-per-host", "0.4,0.2", "--ray", "h:1"]])
def test_a_wrong_list_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse(["jobs.jsonl", *argv])
    assert exc.value.code == 2
    assert "--cpus-per-host" in capsys.readouterr().err


def test_a_single_process_job_is_checked_against_the_largest_host() -> None:
    spec = JobSpec("a", 0.0, 1, 0.8, 0.1, 10.0)
    single_core([spec], ["0.5", "1.0"])
    with pytest.raises(ValueError, match="job a's CPU need 0.8 is 1.6 cores on hosts of 2"):
        single_core([spec], ["0.5", "2"])
    single_core([replace(spec, workload="modeled")], ["0.5", "2"])
