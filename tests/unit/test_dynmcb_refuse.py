"""A job no DYNMCB8 repacking could ever place is refused at submission (new-user review: DYNMCB8-PER and
-ASAP-PER simulated such a job for ever, at full CPU; DYNMCB8 stopped with a ``Stalled`` traceback), and a
simulation that stalls says so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.cli import main
from coordinator.engine import Engine
from coordinator.experiments import homogeneous_hosts
from coordinator.model import InvalidJob, JobSpec
from coordinator.plan import Plan
from coordinator.policies import get_policy

DYNMCB8 = ["dynmcb8", "dynmcb8-per", "dynmcb8-asap-per", "dynmcb8-stretch-per"]
HOSTS = tuple(homogeneous_hosts(4))


def spec(tasks: int, need: float = 1.0, mem: float = 0.001) -> JobSpec:
    return JobSpec(id="a", submit_time=0.0, tasks=tasks, cpu_need=need, mem=mem, work=30.0)


@pytest.mark.parametrize("policy", DYNMCB8)
def test_a_job_that_does_not_pack_alone_at_the_smallest_yield_is_refused(policy: str) -> None:
    # 4 unit hosts at yield 0.01 hold 100 tasks of need 1 each: 400 tasks pack, 401 never do.
    refuse = get_policy(policy).refuse
    assert refuse(spec(400), HOSTS) is None
    assert refuse(spec(801, need=0.5), HOSTS) == (
        "tasks", f"801 tasks of CPU need 0.5 and memory 0.001 do not fit on the 4 hosts even at the smallest yield "
                 f"{policy} tries (0.01): every repacking would set the job aside, so it could never run to its end")
    assert refuse(spec(401), HOSTS) is not None
    assert refuse(spec(800, need=0.5), HOSTS) is None
    assert refuse(spec(401), ()) is None  # no host yet (live): the service's refusal, not this one


@pytest.mark.parametrize("policy", DYNMCB8)
def test_memory_at_the_packings_tolerance_is_judged_by_the_packing(policy: str) -> None:
    """Review: 384 tasks of memory just above 1/3 on 128 hosts pass ``JobSpec.validate``'s count (a relative
    tolerance) but not MCB8's total (an absolute one): accepted, the job was never placed."""
    hosts = tuple(homogeneous_hosts(128))
    job = spec(384, need=0.1, mem=1 / (3 - 5e-10))
    job.validate(hosts)
    assert get_policy(policy).refuse(job, hosts) is not None


@pytest.mark.parametrize("policy", DYNMCB8)
def test_the_engine_refuses_it_at_arrival_and_runs_the_others(policy: str) -> None:
    engine = Engine(get_policy(policy), SimBackend(), HOSTS)
    with pytest.raises(InvalidJob, match="could never run to its end"):
        engine.arrive(spec(401))
    ok = JobSpec(id="b", submit_time=0.0, tasks=400, cpu_need=1.0, mem=0.001, work=3.0)
    history = engine.run([ok])
    assert [t.dst.value for t in history.transitions if t.job == "b"][-1] == "done"


@pytest.mark.timeout(60)  # before: the periodic variants never returned
@pytest.mark.parametrize("policy", DYNMCB8)
def test_simulate_refuses_the_job_with_its_line(policy: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "wide.jsonl"
    job = {"id": "a", "submit_time": 0, "tasks": 401, "cpu_need": 1, "memory": 0.001, "work": 30}
    path.write_text(json.dumps({**job, "id": "ok", "tasks": 1}) + "\n" + json.dumps(job) + "\n")
    code = main(["simulate", "--policy", policy, str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == (f"vcemu simulate: {path}:2: tasks: 401 tasks of CPU need 1 and memory 0.001 do not fit on "
                           f"the 4 hosts even at the smallest yield {policy} tries (0.01): every repacking would set "
                           "the job aside, so it could never run to its end")


def test_a_simulation_that_stalls_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys) -> None:
    """A policy that never starts a job (nothing to run, nothing due): before, the ``Stalled`` traceback."""
    import coordinator.experiments

    class Idle:
        name = "idle"
        period = None

        def decide(self, snap, stim) -> Plan:  # type: ignore[no-untyped-def]
            return Plan()

    monkeypatch.setattr(coordinator.experiments, "get_policy", lambda _name: Idle())
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps({"id": "a", "submit_time": 0, "tasks": 1, "cpu_need": 1, "memory": 0.1, "work": 3})
                    + "\n")
    code = main(["simulate", "--policy", "greedy", str(path)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.strip() == f"vcemu simulate: greedy on {path}: 1 jobs can never progress: a"
