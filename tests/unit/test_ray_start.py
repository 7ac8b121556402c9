"""``start_on_ray`` (``vcemu up --ray`` and ``vcemu replay --ray``) without Ray: which exit status goes with each way
start-up fails, that what was started is stopped, and how hosts held by another run's actors are handled."""

from __future__ import annotations

from typing import Any

import pytest
from ray.exceptions import ActorAlreadyExistsError

import coordinator.backends.ray.cluster as cluster
import coordinator.service
from coordinator.backends.ray.cluster import RayStartError, start_on_ray
from coordinator.backends.ray.placement import actor_name, place_hosts
from coordinator.raycluster import RayNode

MIB = 1 << 20


class Ctx:
    node_ip, ray_version, auth_mode = "127.0.0.1", "fake", "disabled"

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken = taken or set()

    def nodes(self) -> list[RayNode]:
        return [RayNode("a" * 56, "127.0.0.1", {"CPU": 2.0}, {}), RayNode("b" * 56, "127.0.0.1", {"CPU": 2.0}, {})]

    def named_actors(self) -> set[str]:
        return self.taken


class Server:
    def __init__(self, *_a: object, **_k: object) -> None:
        self.port, self.address, self.stopped = 1234, "127.0.0.1:1234", 0
        self.backend = self

    def choose_reference(self, _hosts: object) -> None:
        pass

    def start(self) -> Server:
        made.append(self)
        return self

    def stop(self) -> None:
        self.stopped += 1


made: list[Any] = []


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A coordinator that starts and stops, and agent actors whose behaviour each test sets (``how``)."""
    got: dict[str, Any] = {"how": "ok", "agents": []}
    made.clear()

    class Agents:
        def __init__(self, ctx: Ctx, placements: list[Any], coordinator: str, **_k: object) -> None:
            got["tries"] = got.get("tries", 0) + 1
            if got["how"] == "name taken" or (got["how"] == "name taken once" and got["tries"] == 1):
                # another run made these actors between the look-up and this start
                ctx.taken |= {actor_name(p.agent_id) for p in placements}
                raise ActorAlreadyExistsError("The name vcemu-agent-x (namespace=vcemu) is already taken. Please use "
                                              "a different name or get the existing actor using ray.get_actor(...)")
            if got["how"] == "other refusal":
                raise ValueError("label_selector: bad label")
            self.placements, self.coordinator, self.stopped = placements, coordinator, 0
            got["agents"].append(self)

        def wait_started(self) -> list[dict[str, Any]]:
            if got["how"] == "no start":
                raise RuntimeError("--ray: an agent actor failed to start: cgroups not writable")
            if got["how"] == "ctrl-c":
                raise KeyboardInterrupt
            return [{"agent_id": p.agent_id} for p in self.placements]

        def stop(self) -> None:
            self.stopped += 1

    monkeypatch.setattr(cluster, "RayAgents", Agents)
    monkeypatch.setattr(coordinator.service, "CoordinatorServer", Server)
    monkeypatch.setattr(coordinator.service, "wait_registered", lambda *_a, **_k: None)
    return got


def test_a_start_gives_the_coordinator_the_actors_and_their_infos(fakes: dict[str, Any]) -> None:
    server, agents, infos = start_on_ray(Ctx(), "greedy", 2, 0.5, MIB, bind="127.0.0.1", tag="replay")
    assert server is made[0] and server.stopped == 0 and agents.stopped == 0
    assert [p.hosts[0]["name"] for p in agents.placements] == ["replay0-h0", "replay1-h0"]
    assert [i["agent_id"] for i in infos] == [p.agent_id for p in agents.placements]


@pytest.mark.parametrize(("how", "status", "fragment", "agents_stopped"), [
    ("name taken", 1, "--ray: another run took this run's agent actor names as it started them (The name "
                      "vcemu-agent-x (namespace=vcemu) is already taken.): run it again", None),
    ("no start", 1, "--ray: an agent actor failed to start: cgroups not writable", 1),
    ("other refusal", 1, "--ray: label_selector: bad label", None),  # not retried as a taken name
])
def test_a_failed_start_is_one_line_with_its_status_and_stops_what_it_started(
        fakes: dict[str, Any], how: str, status: int, fragment: str, agents_stopped: int | None) -> None:
    fakes["how"] = how
    with pytest.raises(RayStartError) as err:
        start_on_ray(Ctx(), "greedy", 2, 0.5, MIB, bind="127.0.0.1")
    assert (err.value.status, str(err.value)) == (status, fragment)
    assert made[0].stopped == 1
    assert fakes["tries"] == (3 if how == "name taken" else 1)
    assert [a.stopped for a in fakes["agents"]] == ([] if agents_stopped is None else [agents_stopped])


def test_names_taken_by_a_run_started_at_the_same_moment_are_given_up_for_the_next_free_ones(
        fakes: dict[str, Any]) -> None:
    fakes["how"] = "name taken once"
    said: list[str] = []
    _, agents, _ = start_on_ray(Ctx(), "greedy", 2, 0.5, MIB, bind="127.0.0.1", note=said.append)
    assert fakes["tries"] == 2 and made[0].stopped == 0
    assert [p.hosts[0]["name"] for p in agents.placements] == ["ray-2-0-h0", "ray-2-1-h0"]
    assert said == ["another run's agent actors hold the hosts ray0-h0, ray1-h0 on this Ray cluster: this run's "
                    "hosts are ray-2-0-h0, ..."]


def test_ctrl_c_while_the_actors_start_stops_both_and_goes_on(fakes: dict[str, Any]) -> None:
    fakes["how"] = "ctrl-c"
    with pytest.raises(KeyboardInterrupt):
        start_on_ray(Ctx(), "greedy", 2, 0.5, MIB, bind="127.0.0.1")
    assert made[0].stopped == 1 and fakes["agents"][0].stopped == 1


def test_a_bad_setting_is_status_2_before_anything_starts(fakes: dict[str, Any]) -> None:
    with pytest.raises(RayStartError) as err:
        start_on_ray(Ctx(), "greedy", 2, -1.0, MIB)
    assert err.value.status == 2 and "--cpus-per-host: must be > 0" in str(err.value)
    assert made == []


def test_hosts_held_by_another_runs_actors_are_renamed_and_said_or_refused_for_a_state_file(
        fakes: dict[str, Any]) -> None:
    held = {actor_name(p.agent_id) for p in place_hosts(Ctx().nodes(), 2, 0.5, MIB, "ray")}
    said: list[str] = []
    _, agents, _ = start_on_ray(Ctx(held), "greedy", 2, 0.5, MIB, bind="127.0.0.1", note=said.append)
    assert [p.hosts[0]["name"] for p in agents.placements] == ["ray-2-0-h0", "ray-2-1-h0"]
    assert said == ["another run's agent actors hold the hosts ray0-h0, ray1-h0 on this Ray cluster: this run's "
                    "hosts are ray-2-0-h0, ..."]
    made.clear()
    with pytest.raises(RayStartError) as err:
        start_on_ray(Ctx(held), "greedy", 2, 0.5, MIB, bind="127.0.0.1", rename=False)
    assert err.value.status == 1 and "the agent actors of hosts ray0-h0, ray1-h0 are alive" in str(err.value)
    assert made == []  # refused before the coordinator started (its state file untouched)


def test_without_renaming_a_name_race_is_not_retried_and_says_to_wait(fakes: dict[str, Any]) -> None:
    fakes["how"] = "name taken once"
    with pytest.raises(RayStartError) as err:
        start_on_ray(Ctx(), "greedy", 2, 0.5, MIB, bind="127.0.0.1", rename=False)
    assert fakes["tries"] == 1 and str(err.value).endswith("is already taken.): stop that run, or wait")
    assert made[0].stopped == 1
