"""Name -> loss function registry, so configs can pick an objective by string."""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

OBJECTIVES: dict[str, Callable] = {}


def register_objective(name: str) -> Callable[[F], F]:
    """Decorator registering a loss function under ``name`` (names are unique)."""

    def decorate(fn: F) -> F:
        if name in OBJECTIVES and OBJECTIVES[name] is not fn:
            raise ValueError(f"objective {name!r} is already registered ({OBJECTIVES[name].__qualname__})")
        OBJECTIVES[name] = fn
        return fn

    return decorate


def get_objective(name: str) -> Callable:
    """The loss function registered as ``name``; KeyError listing the allowed names otherwise."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        allowed = ", ".join(sorted(OBJECTIVES)) or "(none registered)"
        raise KeyError(f"unknown objective {name!r}; allowed: {allowed}") from None
