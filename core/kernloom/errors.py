"""The exceptions kernloom raises, one class per kind of failure.

TensorFlow reports failures as status codes (INVALID_ARGUMENT, NOT_FOUND, ...). We keep
those categories as exception classes so that callers can catch a kind of failure, and
each one also derives from the builtin exception a Python user would expect (a missing
device is a ``LookupError``, a bad argument a ``ValueError``).

Every message names the thing at fault (node, op, device, plugin or file) and, where
one exists, says what would fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "InvalidArgumentError",
    "KernelError",
    "KernloomError",
    "KernloomPluginWarning",
    "NotFoundError",
    "PluginError",
    "RegistrationError",
    "ResourceExhaustedError",
    "did_you_mean",
]


class KernloomError(Exception):
    """Base class of every error kernloom raises on purpose."""


class InvalidArgumentError(KernloomError, ValueError):
    """An argument, name or configuration value is malformed or out of range."""


class NotFoundError(KernloomError, LookupError):
    """A device, plugin, op or kernel that was asked for does not exist."""


class AlreadyExistsError(KernloomError, ValueError):
    """Something was registered twice under one name."""


class ResourceExhaustedError(KernloomError, MemoryError):
    """A device ran out of memory (its configured limit was reached)."""


class RegistrationError(KernloomError, ValueError):
    """A plugin tried to register something invalid.

    Raised inside the plugin's ``kernloom_register`` hook, so that the plugin is
    recorded as failed and none of its registrations are kept.
    """


class CancelledError(KernloomError):
    """A step was cancelled (by the caller, a deadline or another failing executor)."""


class DeadlineExceededError(KernloomError, TimeoutError):
    """A run, or a wait inside it, passed its deadline."""


class KernelError(KernloomError):
    """A kernel failed while being constructed or run; the message names the node and op."""


class PluginError(KernloomError):
    """Plugins failed to load while ``KERNLOOM_STRICT_PLUGINS=1`` asks for no failures."""


class KernloomPluginWarning(UserWarning):
    """A plugin was left out; the runtime goes on without it.

    A category of its own so that deployments can turn it into an error with
    ``-W error::kernloom.KernloomPluginWarning`` or filter it in tests.
    """


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix for an error message, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"
