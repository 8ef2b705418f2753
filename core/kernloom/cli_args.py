"""Argument types and actions shared by the ``kernloom`` subcommands.

Two rules hold for every flag: a value is checked as it is parsed (a number is finite
and in range, a size has a unit we know), and an option that takes one value may not be
given twice with different values -- ``--timeout 1 --timeout 5`` is a contradiction, not
"the last one wins".
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from kernloom.errors import did_you_mean

__all__ = [
    "MAX_THREADS",
    "Once",
    "UsageError",
    "byte_size",
    "int_in_range",
    "non_empty",
    "positive_seconds",
    "settings_from_pairs",
    "unknown_device_type",
]

MAX_THREADS: Final = 256
"""The most threads ``--inter-op-threads`` may ask for: far beyond any useful number,
small enough that a typo (``100000``) is an error rather than a machine brought down."""


class UsageError(Exception):
    """A bad argument or file: reported as ``error: ...`` with exit code 2."""


def unknown_device_type(flag: str, name: str, types: Sequence[str]) -> UsageError:
    """The error for a flag's value (``flag``: ``--device cpu2``) naming device type
    ``name``, which is none of ``types``: it lists them, and the nearest."""
    return UsageError(
        f"{flag}: no device type {name!r}; types: {', '.join(types) or '(none)'}."
        + did_you_mean(name, types)
    )


class Once(argparse.Action):
    """A single-valued option that is an error when repeated with a different value."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        seen: dict[str, Any] = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in seen and seen[self.dest] != values:
            parser.error(
                f"{option_string} given twice with different values ({seen[self.dest]} and "
                f"{values}); give it once"
            )
        seen[self.dest] = values
        setattr(namespace, self.dest, values)


def non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def positive_seconds(text: str) -> float:
    """A finite number of seconds above zero (``nan`` and ``inf`` are not durations)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def int_in_range(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {text}")
        return value

    return parse


_UNITS: Final = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def byte_size(text: str) -> int:
    """``512M``, ``4G``, ``1.5GiB``, ``1000`` (bytes): a positive size in bytes."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; write it as bytes or with a unit: 512M, 4G"
        )
    value = int(float(match[1]) * _UNITS[match[2].lower()])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 bytes, got {text}")
    return value


def settings_from_pairs(
    values: Sequence[str],
    flag: str,
    example: str,
    key: Callable[[str], str] = lambda name: name,
) -> dict[str, str]:
    """``NAME=VALUE`` arguments as a dict; a name given twice with different values (after
    ``key`` normalises it: ``x`` and ``x:0`` are one tensor) is a contradiction."""
    settings: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} {text!r}: expected NAME=VALUE, e.g. {flag} {example}")
        normal = key(name)
        if normal in settings and settings[normal] != value:
            raise UsageError(
                f"{flag} {spelled[normal]}={settings[normal]} and {flag} {name}={value} "
                f"contradict each other; give {name} once"
            )
        settings[normal] = value
        spelled[normal] = name
    return settings
