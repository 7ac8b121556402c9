"""``vcemu replay``'s pace of the live run: the work each done job's recorded shares were worth over its work, 1 for
the model's own runs; above 1 its tasks got less CPU than their shares, or lost time the model does not charge."""

from __future__ import annotations

import pytest

from coordinator.experiments import homogeneous_hosts, simulate
from coordinator.metrics import History, Transition
from coordinator.model import JobSpec, JobState
from coordinator.replay import live_pace, pace_warning

P, R, PA, D = JobState.PENDING, JobState.RUNNING, JobState.PAUSED, JobState.DONE


def _jobs() -> list[JobSpec]:
    return [JobSpec(f"j{i}", 10.0 * i, 1 + i % 3, (0.25, 0.5, 1.0)[i % 3], 0.3, 100.0 + 40 * i) for i in range(8)]


@pytest.mark.parametrize("policy", ["fcfs", "greedy-pmtn", "dynmcb8", "dynmcb8-asap-per-60"])
def test_a_simulation_without_penalty_runs_at_pace_one(policy: str) -> None:
    pace = live_pace(simulate(_jobs(), policy, homogeneous_hosts(3)))
    assert pace["jobs"] == 8
    assert pace["median"] == pytest.approx(1.0) and pace["max"] == pytest.approx(1.0)
    assert pace_warning(pace) is None


def test_a_penalty_the_shares_do_not_show_is_a_slower_pace() -> None:
    pace = live_pace(simulate(_jobs(), "dynmcb8", homogeneous_hosts(3), penalty=30.0))
    assert pace["max"] > 1.0


def test_a_live_job_slower_than_its_shares() -> None:
    spec = JobSpec("a", 0.0, 2, 0.5, 0.1, 100.0)
    # at yield 1 for 60 s, paused 40 s, at yield 0.5 (share 0.25) for 180 s: worth 60 + 90 = 150 s of its 100
    ts = [Transition(0.0, "a", None, P, (), 0.0, "submitted"), Transition(0.0, "a", P, R, ("h0", "h1"), 0.5, "start"),
          Transition(60.0, "a", R, PA, ("h0", "h1"), 0.0, "pause"),
          Transition(100.0, "a", PA, R, ("h1", "h0"), 0.25, "resume"),
          Transition(280.0, "a", R, D, ("h1", "h0"), 0.25, "completed")]
    pace = live_pace(History({"a": spec}, ts))
    assert pace == {"jobs": 1, "median": pytest.approx(1.5), "max": pytest.approx(1.5)}
    warning = pace_warning(pace)
    assert warning is not None and "a median of 1.50 times" in warning
    assert live_pace(History({"a": spec}, ts[:3])) == {"jobs": 0, "median": None, "max": None}  # not done


@pytest.mark.parametrize("policy", ["dynmcb8", "dynmcb8-asap-per-60", "greedy-pmtn"])
def test_the_restart_cost_fitted_to_a_history_is_the_penalty_that_made_it(policy: str) -> None:
    """The simulator charges a penalty at each resume and migration and nothing at a start (001 Sec. IV-A): fitted to
    its own history, the cost of a restart is that penalty and a start's is about 0; a run without restarts has
    nothing to fit a penalty to."""
    from coordinator.replay import restart_cost

    for penalty in (0.0, 5.0, 20.0):
        costs = restart_cost(simulate(_jobs(), policy, homogeneous_hosts(3), penalty=penalty))
        assert costs["jobs"] == 8 and costs["restarts"] > 0
        # (within 15%: a job paused or given another share before its penalty has run loses less than its yield at
        # the restart times the penalty, which the fit takes it to lose)
        assert costs["penalty_s"] == pytest.approx(penalty, rel=0.15, abs=1e-6)
        assert costs["startup_s"] == pytest.approx(0.0, abs=0.1 * penalty + 1e-6)
    costs = restart_cost(simulate(_jobs(), "fcfs", homogeneous_hosts(3), penalty=20.0))
    assert costs["restarts"] == 0 and costs["penalty_s"] is None


def test_a_live_run_slowed_by_its_restarts_is_simulated_again_at_their_cost() -> None:
    """The live run here is a simulation at a penalty of 20 the replay's own simulation (penalty 0) does not charge:
    far from that one per job, it is close to the one at the fitted cost."""
    from coordinator.metrics import job_results
    from coordinator.replay import at_live_costs, per_job

    jobs, hosts = _jobs(), homogeneous_hosts(3)
    live = simulate(jobs, "dynmcb8", hosts, penalty=20.0)
    live_r = {r.job: r for r in job_results(live)}
    plain = per_job(jobs, live_r, {r.job: r for r in job_results(simulate(jobs, "dynmcb8", hosts))}, 0.0)
    costs = at_live_costs(jobs, "dynmcb8", hosts, live, live_r, 0.0)
    assert plain["median_rel_diff"] > 0.05
    assert costs["penalty_s"] == pytest.approx(20.0, rel=0.15)
    assert costs["per_job"]["median_rel_diff"] < plain["median_rel_diff"] / 3
