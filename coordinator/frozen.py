"""Building frozen dataclass instances without their ``__init__`` (issue 4 benchmark).

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, about 0.1 us a field. A
1,000-job DYNMCB8 simulation builds some 30,000 plan actions, 34,000 transitions and 120,000 job views,
and that was 5% of its time. :func:`builder` generates, once per class, a function that writes the new
instance's ``__dict__`` directly, as ``dataclasses`` itself generates ``__init__``: the same object (equal,
same hash and repr, still frozen). A unit test checks each builder against its constructor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import TypeVar

T = TypeVar("T")


def builder(cls: type[T]) -> Callable[..., T]:
    """A function ``f(*values)`` equal to ``cls(*values)``, with every field given, in field order.

    Only for plain dataclasses: one with ``__slots__`` has no ``__dict__``, and one with a
    ``__post_init__`` would not run it here."""
    if not is_dataclass(cls) or "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"builder: {cls.__name__} must be a dataclass without __slots__ or __post_init__")
    names = [f.name for f in fields(cls)]
    lines = [f"def build({', '.join(names)}):", "    obj = new(cls)", "    d = obj.__dict__"]
    lines += [f"    d[{n!r}] = {n}" for n in names]
    lines.append("    return obj")
    scope: dict[str, object] = {"new": object.__new__, "cls": cls}
    exec("\n".join(lines), scope)  # noqa: S102 - code made from the class's own field names, as dataclasses does
    build = scope["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"  # type: ignore[attr-defined]
    build.__doc__ = f"``{cls.__name__}({', '.join(names)})``, without the frozen __init__'s setattr calls."  # type: ignore[attr-defined]
    return build  # type: ignore[return-value]
