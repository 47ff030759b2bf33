"""Name -> loss function registry: the tensor-level losses the objectives (`replaylab.objectives`) call."""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

LOSSES: dict[str, Callable] = {}


def register_loss(name: str) -> Callable[[F], F]:
    """Decorator registering a loss function under ``name`` (names are unique)."""

    def decorate(fn: F) -> F:
        if name in LOSSES and LOSSES[name] is not fn:
            raise ValueError(f"loss {name!r} is already registered ({LOSSES[name].__qualname__})")
        LOSSES[name] = fn
        return fn

    return decorate


def get_loss(name: str) -> Callable:
    """The loss function registered as ``name``; KeyError listing the allowed names otherwise."""
    try:
        return LOSSES[name]
    except KeyError:
        allowed = ", ".join(sorted(LOSSES)) or "(none registered)"
        raise KeyError(f"unknown loss {name!r}; allowed: {allowed}") from None
