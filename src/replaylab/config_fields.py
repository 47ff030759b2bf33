"""Helpers for config dataclasses: fields with help texts, and checks that name the key."""

from __future__ import annotations

from dataclasses import MISSING, field, fields
from typing import Any


class ConfigError(ValueError):
    """A config value is out of range or not one of the allowed choices; names the key."""


def knob(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with a help text (shown by `replaylab config-help`)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


def defaults_of(obj) -> dict:
    """A config dataclass's plain defaults by field name (fields with a default factory left out)."""
    return {f.name: f.default for f in fields(obj) if f.default is not MISSING}


def check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: {message}")


def check_choice(value: Any, key: str, allowed: list | tuple) -> None:
    check(value in allowed, key, f"{value!r} is not allowed; allowed values: {list(allowed)}")
