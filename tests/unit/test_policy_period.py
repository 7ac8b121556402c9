"""A periodic policy's period in its name (001 Sec. III-B's DYNMCB8-PER-T): parsed, built, simulated, refused."""

from __future__ import annotations

import re
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.backends.sim import SimBackend
from coordinator.cli import main
from coordinator.engine import Engine
from coordinator.experiments import homogeneous_hosts, simulate
from coordinator.metrics import job_results
from coordinator.model import JobSpec
from coordinator.policies import UnknownPolicy, get_policy
from coordinator.policy_names import PERIODIC_NAMES, canonical_name, described, policy_order, split_name, thrashing
from coordinator.service import CoordinatorServer
from coordinator.sweep import _parse_args, config_from_args
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

# One host; a and b each take 60% of its memory, so they never run together.
JOBS = [JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 10.0, 1, 1.0, 0.6, 50.0)]


@pytest.mark.parametrize(("text", "base", "period", "name"), [
    ("dynmcb8-per", "dynmcb8-per", 600.0, "dynmcb8-per"),
    ("DYNMCB8-PER-600", "dynmcb8-per", 600.0, "dynmcb8-per"),  # 001's T: the plain name
    ("dynmcb8-asap-per-60", "dynmcb8-asap-per", 60.0, "dynmcb8-asap-per-60"),
    ("dynmcb8-stretch-per-3600.0", "dynmcb8-stretch-per", 3600.0, "dynmcb8-stretch-per-3600"),
    ("dynmcb8-per-1.5", "dynmcb8-per", 1.5, "dynmcb8-per-1.5"),
    ("greedy", "greedy", None, "greedy"),
    ("dynmcb8", "dynmcb8", None, "dynmcb8"),
])
def test_a_name_gives_the_policy_and_its_period(text: str, base: str, period: float | None, name: str) -> None:
    assert split_name(text) == (base, period)
    assert canonical_name(text) == name
    policy = get_policy(text)
    assert (policy.name, policy.period) == (name, period)


def test_the_asap_and_stretch_variants_keep_their_kind_at_another_period() -> None:
    asap, stretch = get_policy("dynmcb8-asap-per-60"), get_policy("dynmcb8-stretch-per-60")
    assert (asap.asap, asap.stretch, stretch.asap, stretch.stretch) == (True, False, False, True)


@pytest.mark.parametrize(("text", "message"), [
    ("dynmcb8-per-x", "the period after dynmcb8-per- must be a number of seconds, got 'x'"),
    ("dynmcb8-per-0.5", "the period must be 1 to 1e+09 s, got 0.5"),
    ("dynmcb8-per-inf", "the period after dynmcb8-per- must be a number of seconds, got 'inf'"),
    ("dynmcb8-per-nan", "must be a number of seconds, got 'nan'"),
    ("dynmcb8-per-1e400", "the period must be 1 to 1e+09 s, got 1e400"),
    ("DYNMCB8-PER-T", "must be a number of seconds, got 'T'"),
    ("dynmcb8-per-+60", "must be a number of seconds, got '+60'"),
    ("dynmcb8-per-6_0", "must be a number of seconds, got '6_0'"),
    ("dynmcb8-per-\u0661\u0662", "must be a number of seconds"),
    ("dynmcb8-60", "dynmcb8 has no period; only dynmcb8-per, dynmcb8-asap-per, dynmcb8-stretch-per take one"),
    ("greedy-pmtn-5", "greedy-pmtn has no period"),
    ("nope", "unknown policy 'nope'; known: dynmcb8, "),
])
def test_a_bad_name_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(UnknownPolicy, match=message.replace("+", r"\+").replace("(", r"\(")):
        get_policy(text)


def test_the_period_sets_when_the_repackings_come() -> None:
    """Hand-worked, one host. DYNMCB8-PER-60: a waits for the tick at 60; at 120, b (vt 0, infinite priority)
    and a cannot share the memory: a, the lowest priority, is paused and b runs to 170; completions change
    nothing until the tick at 180, where a resumes its last 40 s. At 001's T = 600 the same happens at 600 and
    1200. ASAP starts a at once, and b at the first tick."""
    def starts_ends(policy: str) -> list[tuple[str, float | None, float | None]]:
        return [(r.job, r.start, r.end) for r in job_results(simulate(JOBS, policy, homogeneous_hosts(1)))]

    assert starts_ends("dynmcb8-per-60") == [("a", 60.0, 220.0), ("b", 120.0, 170.0)]
    assert starts_ends("dynmcb8-per") == [("a", 600.0, 700.0), ("b", 1200.0, 1250.0)]
    assert starts_ends("dynmcb8-asap-per-60") == [("a", 0.0, 160.0), ("b", 60.0, 110.0)]


def test_names_sort_in_table_i_order_with_other_periods_beside_their_policy() -> None:
    names = ["dynmcb8-asap-per", "dynmcb8-per-3600", "fcfs", "dynmcb8-per", "dynmcb8-per-60"]
    assert sorted(names, key=policy_order) == ["fcfs", "dynmcb8-per-60", "dynmcb8-per", "dynmcb8-per-3600",
                                               "dynmcb8-asap-per"]


def test_the_period_is_said_where_a_cluster_starts() -> None:
    assert described("dynmcb8-asap-per") == "dynmcb8-asap-per, repacking every 600 s"
    assert described("dynmcb8-per-30") == "dynmcb8-per-30, repacking every 30 s"
    assert described("greedy") == "greedy"


def test_a_sweep_takes_periods_and_runs_each_policy_once() -> None:
    cfg = config_from_args(_parse_args(["--algorithms", "dynmcb8-per,DYNMCB8-PER-600,dynmcb8-asap-per-60",
                                        "--traces", "1"]))
    assert cfg["algorithms"] == ["dynmcb8-per", "dynmcb8-asap-per-60"]


@pytest.mark.parametrize("command", [["up"], ["coordinator"], ["simulate", "jobs.jsonl"]])
def test_a_command_refuses_a_period_on_a_policy_without_one_in_one_line(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--policy", "greedy-60"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --policy: policy 'greedy-60': greedy has no period" in err, err


def test_the_engine_keeps_the_time_of_the_next_repacking() -> None:
    """What ``vcemu status`` reads: set when a repacking is scheduled, None once no job is left."""
    engine = Engine(get_policy("dynmcb8-per-60"), SimBackend(), homogeneous_hosts(1))
    seen: list[tuple[float, float | None]] = []
    engine.decision_listeners.append(lambda _s: seen.append((engine.backend.now(), engine.next_tick)))
    engine.run(JOBS)
    # (decisions at the submissions of 0 and 10, the ticks, and the completions of 170 and 220; the tick due at 240
    # when the last job ended at 220 still comes, and schedules none)
    assert seen == [(0.0, 60.0), (10.0, 60.0), (60.0, 120.0), (120.0, 180.0), (170.0, 180.0), (180.0, 240.0),
                    (220.0, 240.0), (240.0, None)]
    assert engine.next_tick is None
    assert Engine(get_policy("greedy"), SimBackend(), homogeneous_hosts(1)).next_tick is None


def _status(policy: str, job: bool, cancel: bool = False) -> None:
    """Run ``vcemu status`` on a coordinator of ``policy`` with one agent, after submitting a job (``job``) that it
    then cancels (``cancel``) once the repacking it brings is scheduled."""
    server = CoordinatorServer(get_policy(policy), port=0).start()
    try:
        desc = agent_pb2.DescribeReply(agent_id="a0", mode="cgroup-v1", hosts=[
            agent_pb2.HostInfo(name="a0-h0", cpu_cores=0.5, memory_bytes=1 << 30)])
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(pb.RegisterAgentRequest(address="127.0.0.1:1", description=desc), timeout=5)
            if job:
                job_id = stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.9,
                                                                      work_seconds=99)), timeout=5).job_id
                deadline = time.monotonic() + 10
                while (policy.startswith("dynmcb8-asap") and server.engine.next_tick is None
                       and time.monotonic() < deadline):
                    time.sleep(0.01)
                if cancel:
                    assert server.engine.next_tick is not None
                    stub.Cancel(pb.JobRef(job_id=job_id), timeout=5)
                    assert server.engine.next_tick is not None  # (still scheduled, with nothing to do)
        assert main(["status", "--coordinator", server.address]) == 0
    finally:
        server.stop()


@pytest.mark.parametrize(("policy", "job", "line"), [
    ("dynmcb8-asap-per-30", True, r"policy dynmcb8-asap-per-30, repacking every 30 s, next at t=3\d\.\ds  t=\d\.\ds  "),
    ("dynmcb8-per", False, r"policy dynmcb8-per, repacking every 600 s, none due \(no job\)  t=\d\.\ds  "),
    ("greedy", True, r"policy greedy  t=\d\.\ds  "),
])
def test_status_says_the_period_and_the_next_repacking(policy: str, job: bool, line: str, capsys) -> None:
    _status(policy, job)
    first = capsys.readouterr().out.splitlines()[0]
    assert re.match(line, first), first


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PERIODIC_NAMES), st.floats(min_value=1.0, max_value=1e9, allow_nan=False),
       st.sampled_from([str.lower, str.upper]))
def test_every_period_in_range_names_one_policy_whose_name_names_it_again(base: str, period: float, case) -> None:
    """canonical_name is idempotent and is the built policy's name; the period survives the round trip."""
    name = case(f"{base}-{period!r}")  # (repr writes no exponent below 1e16)
    one = canonical_name(name)
    assert canonical_name(one) == one == get_policy(name).name
    assert split_name(one) == (base, period)


def test_status_says_a_repacking_whose_time_has_come_is_due_not_next() -> None:
    """The coordinator's loop may be busy (starting jobs) past a repacking's time (live check, session 32)."""
    from types import SimpleNamespace

    from coordinator.client import _policy_line

    line = "dynmcb8-per-60, repacking every 60 s"
    assert _policy_line(SimpleNamespace(policy="dynmcb8-per-60", next_repacking=60.0, now=58.5)) == \
        f"{line}, next at t=60.0s"
    assert _policy_line(SimpleNamespace(policy="dynmcb8-per-60", next_repacking=60.0, now=62.3)) == \
        f"{line}, due since t=60.0s"
    assert _policy_line(SimpleNamespace(policy="dynmcb8-per-60", next_repacking=0.0, now=62.3)) == \
        f"{line}, none due (no job)"


def test_status_says_none_due_once_no_job_is_left(capsys) -> None:
    """The repacking scheduled before the last job left still comes, with nothing to do (live check, session 32)."""
    _status("dynmcb8-asap-per-30", job=True, cancel=True)
    first = capsys.readouterr().out.splitlines()[0]
    assert "repacking every 30 s, none due (no job)" in first, first


def test_an_unknown_name_sorts_last_and_status_shows_it_alone() -> None:
    """A sweep's config.json from a newer vcemu, or a coordinator of one, may name a policy this one does not know."""
    assert sorted(["bogus", "dynmcb8", "fcfs"], key=policy_order) == ["fcfs", "dynmcb8", "bogus"]
    from types import SimpleNamespace

    from coordinator.client import _policy_line

    assert _policy_line(SimpleNamespace(policy="bogus-7", next_repacking=0.0)) == "bogus-7"


def test_a_period_shorter_than_the_penalty_is_warned_of(tmp_path, capsys) -> None:
    """001 Sec. IV-A: such periods thrash, and a simulation may never end: said before it starts."""
    assert thrashing("dynmcb8-per-60", 300.0).startswith("dynmcb8-per-60 repacks every 60 s, less than the 300-s")
    assert thrashing("dynmcb8-per", 300.0) is None and thrashing("greedy", 300.0) is None
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 10}\n')
    assert main(["simulate", "--policy", "dynmcb8-per-60", "--penalty", "100", "--json", str(jobs)]) == 0
    assert "vcemu simulate: warning: dynmcb8-per-60 repacks every 60 s, less than the 100-s" in capsys.readouterr().err
    assert main(["simulate", "--policy", "dynmcb8-per-60", "--penalty", "30", "--json", str(jobs)]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(("submit", "start"), [
    (1100.0, 1200.0),  # the grid still ticking (the repacking at 600 found a1 done at 100, 1200 is the next)
    (1300.0, 1800.0),  # arrived at an idle cluster: the grid's next point, not 1300 + 600
    (1800.0, 1800.0),  # exactly on a point of the grid: in that repacking
    (1800.5, 2400.0),
])
def test_the_periodic_repackings_keep_to_one_grid_across_an_idle_cluster(submit: float, start: float) -> None:
    """001 Sec. III-B: DYNMCB8-PER invokes MCB8 "periodically, every T seconds"; a job arriving while nothing runs
    waits for the next of those times (fidelity review: it waited a whole T from its arrival)."""
    jobs = [JobSpec("a1", 0.0, 1, 1.0, 0.1, 100.0), JobSpec("a2", submit, 1, 1.0, 0.1, 100.0)]
    results = {r.job: r for r in job_results(simulate(jobs, "dynmcb8-per", homogeneous_hosts(1)))}
    assert results["a1"].start == 600.0
    assert results["a2"].start == start


def test_the_grid_starts_at_the_first_arrival() -> None:
    """The first repacking is T after the first arrival, the grid's origin; the later ones on its points."""
    jobs = [JobSpec("a1", 250.0, 1, 1.0, 0.1, 10.0), JobSpec("a2", 1000.0, 1, 1.0, 0.1, 10.0)]
    results = {r.job: r for r in job_results(simulate(jobs, "dynmcb8-per-100", homogeneous_hosts(1)))}
    assert (results["a1"].start, results["a2"].start) == (350.0, 1050.0)
