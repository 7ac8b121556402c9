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

    A plain dataclass's fields are written to the new instance's ``__dict__``; a slotted one's (no ``__dict__``:
    half the memory of a :class:`~coordinator.metrics.Transition`, of which a long simulation keeps millions)
    through each slot's descriptor, as ``object.__setattr__`` would without its lookup. Not for a dataclass with
    a ``__post_init__``, which would not run here."""
    if not is_dataclass(cls) or hasattr(cls, "__post_init__"):
        raise TypeError(f"builder: {cls.__name__} must be a dataclass without __post_init__")
    names = [f.name for f in fields(cls)]
    scope: dict[str, object] = {"new": object.__new__, "cls": cls}
    lines = [f"def build({', '.join(names)}):", "    obj = new(cls)"]
    if "__slots__" in cls.__dict__:
        scope.update({f"set_{n}": cls.__dict__[n].__set__ for n in names})
        lines += [f"    set_{n}(obj, {n})" for n in names]
    else:
        lines.append("    d = obj.__dict__")
        lines += [f"    d[{n!r}] = {n}" for n in names]
    lines.append("    return obj")
    exec("\n".join(lines), scope)  # noqa: S102 - code made from the class's own field names, as dataclasses does
    build = scope["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"  # type: ignore[attr-defined]
    build.__doc__ = f"``{cls.__name__}({', '.join(names)})``, without the frozen __init__'s setattr calls."  # type: ignore[attr-defined]
    return build  # type: ignore[return-value]
