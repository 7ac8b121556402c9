"""Fixtures shared by unit tests of more than one module."""

from __future__ import annotations

import pytest

from coordinator.apc import experiment as apc


@pytest.fixture
def simulations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the simulations ``vcemu apc`` runs in this process from now on, in order."""
    ran: list[str] = []
    real = apc.simulate_unit

    def logged(key: str, *args: object, **kwargs: object) -> object:
        ran.append(key)
        return real(key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apc, "simulate_unit", logged)
    return ran
