"""``coordinator.raycluster.connect`` without a Ray cluster: which addresses go where, and what a failure says.

``ray.init`` is replaced by a fake: the real one takes 30 s to give up on an unreachable ``ray://`` address."""

from __future__ import annotations

from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed")

from coordinator import raycluster  # noqa: E402
from coordinator.raycluster import RayUnavailable, connect  # noqa: E402


@pytest.fixture
def init_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake_init(**kwargs: Any) -> None:
        # with the state of the switch that silences Ray's messages, while ray.init runs
        calls.append({**kwargs, "messages_on": raycluster._set_ray_messages(False)})
        raise ConnectionError("ray client connection timeout\nsecond line")

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    return calls


@pytest.mark.parametrize("address", ["ray://127.0.0.1:10001", "auto"])
def test_ray_forms_go_to_ray_init_as_given_and_fail_in_one_line(address: str, init_calls: list) -> None:
    before = raycluster._set_ray_messages(True)
    try:
        with pytest.raises(RayUnavailable) as err:
            connect(address, setting="--address", ray_forms=True)
        assert str(err.value) == (f"--address: cannot connect to the Ray cluster at {address} "
                                  "(ConnectionError: ray client connection timeout)")
        assert [c["address"] for c in init_calls] == [address]
        assert init_calls[0]["log_to_driver"] is False
        assert init_calls[0]["messages_on"] is False  # silenced for the attempt
        # The switch that silences Ray's messages was turned off for the attempt and is back on after it failed.
        assert raycluster._set_ray_messages(True) is True
    finally:
        if before is not None:
            raycluster._set_ray_messages(before)


@pytest.mark.parametrize("address", ["ray://127.0.0.1:10001", "auto"])
def test_without_ray_forms_only_host_port_is_an_address(address: str, init_calls: list) -> None:
    """``vcemu up --ray`` takes a head's HOST:PORT only: Ray's own forms are refused before ``ray.init``."""
    with pytest.raises(RayUnavailable, match=r"^--ray: .* is not a Ray address; give the head's GCS address"):
        connect(address)
    assert init_calls == []


def test_sweep_address_empty_is_a_local_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """``vcemu sweep --address ''`` started a local Ray before the sweep went through connect(); it still does."""
    import coordinator.raycluster
    from coordinator.sweep import ray_init

    got: list[object] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(coordinator.raycluster, "connect", lambda address, **kw: got.append((address, kw)))
    ray_init("", 3)
    assert got[0][0] is None and got[0][1]["num_cpus"] == 3
