"""Light jobs started ahead, side by side.

Checks whose jobs measure no speed (task placement, the shared filesystem, the node probe that
reads GPU health, InfiniBand and the inventory) do not need the nodes to themselves. Their
fixtures are marked with :func:`ahead`; when the run starts, the session calls each marked
fixture function that a selected test will use, in a thread of its own, so those jobs are
submitted together and run at the same time instead of one after another. Each goes through
``GpuClusterSession.once``, so the test that needs the value later takes what the early call
measured (or waits for it). A job that is not started ahead waits until every early one has
ended: a performance measurement never shares the nodes with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

# fixture function → what to call ahead (the function itself, or a lighter start for it)
_STARTS: dict[Callable[..., Any], Callable[..., Any]] = {}


def ahead(fn: F | None = None, *, start: Callable[..., Any] | None = None) -> Any:
    """Mark a fixture function (put it under ``@pytest.fixture``) whose jobs may start ahead.

    It is called ahead with the session as its first argument and, by name, any test parameters
    among its other arguments; a test that cannot supply all of them gets no early start. With
    ``start``, that callable is called instead (for a fixture that takes other fixtures)."""

    def wrap(f: F) -> F:
        _STARTS[f] = start or f
        return f

    return wrap(fn) if fn is not None else wrap


def start_for(fixture_function: Callable[..., Any]) -> Callable[..., Any] | None:
    """What to call ahead for this fixture function, or None when it is not marked."""
    return _STARTS.get(fixture_function)
