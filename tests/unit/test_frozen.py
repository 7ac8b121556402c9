"""coordinator.frozen.builder: the constructor's object, and a refusal where it could not be."""

from dataclasses import FrozenInstanceError, dataclass

import pytest

from coordinator.frozen import builder


@dataclass(frozen=True)
class Point:
    x: float
    y: tuple[str, ...]


def test_a_built_object_is_the_constructors():
    p = builder(Point)(1.5, ("h0",))
    assert p == Point(1.5, ("h0",)) and hash(p) == hash(Point(1.5, ("h0",))) and repr(p) == "Point(x=1.5, y=('h0',))"
    with pytest.raises(FrozenInstanceError):
        p.x = 2.0  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class Slotted:
    x: float
    y: tuple[str, ...] = ()


def test_a_built_slotted_object_is_the_constructors():
    """A slotted dataclass (metrics.Transition: half the memory) is built through its slots' descriptors."""
    s = builder(Slotted)(1.5, ("h0",))
    assert s == Slotted(1.5, ("h0",)) and hash(s) == hash(Slotted(1.5, ("h0",)))
    assert repr(s) == "Slotted(x=1.5, y=('h0',))" and not hasattr(s, "__dict__")
    with pytest.raises(FrozenInstanceError):
        s.x = 2.0  # type: ignore[misc]


def test_classes_whose_init_does_more_are_refused():
    @dataclass(frozen=True)
    class Checked:
        x: float

        def __post_init__(self) -> None:
            assert self.x > 0

    for cls in (Checked, int):
        with pytest.raises(TypeError, match=f"builder: {cls.__name__} must be a dataclass"):
            builder(cls)
