"""Parsing and matching device names, full (``/job:localhost/replica:0/task:0/device:CPU:0``)
or partial (``CPU:0``, ``/device:GPU:1``, ``GPU``, TensorFlow's legacy ``/cpu:0``).

A partial name is a *specification*: the fields it leaves out match anything. The
placer and ``DeviceMgr`` both match specifications against full names, so the rules
live here once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from kernloom.errors import InvalidArgumentError

__all__ = ["LOCAL_PREFIX", "DeviceSpec", "is_valid_device_type", "parse_device_name"]

LOCAL_PREFIX: Final = "/job:localhost/replica:0/task:0"
"""The name prefix of every device in this process (no distribution yet, but names have room)."""

_DEVICE_TYPE: Final = re.compile(r"[A-Z][A-Z0-9_]*")
_JOB: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

_FORMS: Final = (
    "'/job:localhost/replica:0/task:0/device:CPU:0', '/device:CPU:0', 'CPU:0', 'CPU' or '/cpu:0'"
)


def is_valid_device_type(name: str) -> bool:
    """Device types are upper-case identifiers such as ``CPU``, ``GPU`` or ``XLA_CPU``."""
    return _DEVICE_TYPE.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A possibly partial device name; ``None`` fields match anything."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @property
    def is_full(self) -> bool:
        return None not in (self.job, self.replica, self.task, self.device_type, self.device_index)

    def matches(self, full: DeviceSpec) -> bool:
        """Whether the device with the full name ``full`` satisfies this specification."""
        return all(
            mine is None or mine == theirs
            for mine, theirs in (
                (self.job, full.job),
                (self.replica, full.replica),
                (self.task, full.task),
                (self.device_type, full.device_type),
                (self.device_index, full.device_index),
            )
        )

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else str(self.device_index)
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    def __str__(self) -> str:
        return self.to_string()


def _parse_index(text: str, name: str) -> int | None:
    if text == "*":
        return None
    if not text.isdigit():
        raise InvalidArgumentError(
            f"malformed device name {name!r}: {text!r} is not an index; write it as {_FORMS}"
        )
    return int(text)


def _parse_device_part(body: str, name: str) -> tuple[str, int | None]:
    """``CPU:0``, ``CPU`` or ``CPU:*``; ``cpu`` and ``gpu`` in lower case as TensorFlow allows."""
    type_text, _, index_text = body.partition(":")
    device_type = type_text.upper() if type_text in ("cpu", "gpu") else type_text
    if not is_valid_device_type(device_type):
        raise InvalidArgumentError(
            f"malformed device name {name!r}: device type {type_text!r} must be an upper-case "
            f"name such as CPU, GPU or XLA_CPU; write the name as {_FORMS}"
        )
    return device_type, (_parse_index(index_text, name) if index_text else None)


def parse_device_name(name: str) -> DeviceSpec:
    """Parse a full or partial device name into a ``DeviceSpec``.

    Accepts the forms TensorFlow accepts: ``/job:J/replica:R/task:T/device:TYPE:N`` with
    any of its fields left out, the bare ``TYPE:N`` and ``TYPE``, and the legacy lower-case
    ``/cpu:0`` and ``/gpu:1``. An empty string is the empty specification (any device).
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a device name must be a string, got {name!r}")
    text = name.strip()
    if not text:
        return DeviceSpec()
    if not text.startswith("/"):
        device_type, index = _parse_device_part(text, name)
        return DeviceSpec(device_type=device_type, device_index=index)

    fields: dict[str, object] = {}
    for part in text[1:].split("/"):
        key, sep, value = part.partition(":")
        if not sep or not value:
            raise InvalidArgumentError(
                f"malformed device name {name!r}: part {part!r} is not 'field:value'; "
                f"write it as {_FORMS}"
            )
        if key in fields or (key in ("device", "cpu", "gpu") and "device_type" in fields):
            raise InvalidArgumentError(f"malformed device name {name!r}: {key!r} appears twice")
        if key == "job":
            if _JOB.fullmatch(value) is None:
                raise InvalidArgumentError(f"malformed device name {name!r}: bad job {value!r}")
            fields["job"] = value
        elif key in ("replica", "task"):
            fields[key] = _parse_index(value, name)
        elif key == "device":
            fields["device_type"], fields["device_index"] = _parse_device_part(value, name)
        elif key.lower() in ("cpu", "gpu"):
            fields["device_type"] = key.upper()
            fields["device_index"] = _parse_index(value, name)
        else:
            raise InvalidArgumentError(
                f"malformed device name {name!r}: unknown field {key!r}; write it as {_FORMS}"
            )
    return DeviceSpec(**fields)  # type: ignore[arg-type]
