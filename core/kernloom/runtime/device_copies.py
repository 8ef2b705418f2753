"""A device plugin's fault in a copy the runtime asked of it, in one wording.

The session copies feeds onto their devices and fetches off them (``Session.run``); the
rendezvous copies values from one device to another (``_Send``/``_Recv``). When the
device's own code fails there -- its ``copy_to_host``, ``copy_from_host`` or
``copy_from_device`` raises, or returns something that is not the value it was given
(a list, another dtype, another shape) -- the error is a ``DeviceError`` naming what was
copied, the device, the call and the plugin that provides the device: the device's
fault, never the graph's, nor that of the core's kernels that asked for the copy.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from kernloom.errors import DeviceError, short_repr
from kernloom.framework.device import Device

__all__ = ["copy_fault", "host_copy_problem", "plugin_of", "raised"]

_ADVICE: Final = (
    "report it to the plugin's authors (`kernloom plugins` names its distribution), or "
    "run without that device (SessionConfig(device_filters=[...]))"
)


def plugin_of(device: Device) -> str:
    """The plugin that provides ``device``, for a message (``plugin 'acme'``)."""
    return str(device.origin) if device.origin is not None else "the plugin that provides it"


def raised(exc: BaseException) -> str:
    """What a device call that raised ``exc`` did, for ``copy_fault``'s ``problem``."""
    return f"raised {type(exc).__name__}: {exc}"


def host_copy_problem(
    host: object, dtype: np.dtype[Any] | None, shape: tuple[int, ...] | None
) -> str | None:
    """What is wrong with ``host``, the result of a ``copy_to_host`` of a value of
    ``dtype`` and ``shape`` (either None: not checked), or None: it must be a numpy array
    of that dtype and shape. The error path and the tests call this; the hot paths test
    the same first, inline."""
    if not isinstance(host, np.ndarray):
        return f"returned {type(host).__name__} {short_repr(host)}, not a numpy array"
    if dtype is not None and host.dtype != dtype:
        return f"returned a {host.dtype} array for a {np.dtype(dtype)} value"
    if shape is not None and host.shape != shape:
        return f"returned an array of shape {host.shape} for a value whose value_shape is {shape}"
    return None


def copy_fault(
    subject: str, moving: str, device: Device, call: str, problem: str, innocent: str = ""
) -> DeviceError:
    """The error for ``device``'s ``call`` that failed (``problem``: ``raised(exc)``, or
    what it returned instead of the value) while ``moving`` (``"copying it off GPU:0"``)
    ``subject`` (``"fetch 'y:0'"``); ``innocent`` names what besides the graph is not at
    fault (``"the fetch"``). The caller chains the device's own exception, if any."""
    besides = f" or {innocent}" if innocent else ""
    return DeviceError(
        f"{subject}: {moving} failed: the device's {call} of {plugin_of(device)} {problem}. "
        f"This is a fault of the device plugin, not of the graph{besides}: {_ADVICE}"
    )
