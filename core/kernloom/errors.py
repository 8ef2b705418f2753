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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "PYTHON_SPELLINGS",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "DeviceError",
    "Hint",
    "InvalidArgumentError",
    "KernelArgumentError",
    "KernelError",
    "KernloomError",
    "KernloomPluginWarning",
    "NotFoundError",
    "PluginError",
    "RegistrationError",
    "ResourceExhaustedError",
    "Setting",
    "did_you_mean",
    "python_spelling",
    "short_repr",
]


@dataclass(frozen=True, slots=True)
class Setting:
    """A configuration setting, as data: the Python API and the ``kernloom`` command spell
    the same setting differently (``feed_dict={'x': ...}`` against ``--feed x=FILE.npy``),
    so an error names the setting and each interface renders it in its own terms."""

    name: str
    """A key of ``PYTHON_SPELLINGS``: ``feed``, ``kernel_label``, ``device_filter``, ...

    ``feed_array`` is a feed of a given dtype (``value``: the dtype's name), the way to
    hand over values after fixing them; ``constant_array`` the same for a constant."""
    key: str = ""
    """The entry the setting is about: a tensor name (feed), an op (kernel_label)."""
    value: str = ""
    """Its value, where it has one: a label, a device filter."""


PYTHON_SPELLINGS: Final[Mapping[str, str]] = {
    "feed": "feed_dict={{{key!r}: value}}",
    "kernel_label": "SessionConfig(kernel_labels={{{key!r}: {value!r}}})",
    "device_filter": "SessionConfig(device_filters=[{value!r}])",
    "soft_placement": "SessionConfig(allow_soft_placement=True)",
    "timeout": "RunOptions(timeout_s=...)",
    "trace": "RunOptions(trace=True)",
    "inter_op_threads": "SessionConfig(inter_op_threads=...)",
    "memory_limit": "SessionConfig(memory_limit={{{key!r}: BYTES}})",
    "feed_array": "feed_dict={{{key!r}: np.asarray(values, dtype={value!r})}}",
    "constant_array": "kl.constant(np.asarray(values, dtype={value!r}))",
    "disabled_pass": "SessionConfig(disabled_passes=({value!r},))",
    "initializer": "session.run(v.initializer) for the kl.Variable {key!r}, or "
    "session.run(kl.variables_initializer())",
}
"""How the Python API spells each setting; ``str.format`` fields ``key`` and ``value``."""


def python_spelling(setting: Setting) -> str:
    template = PYTHON_SPELLINGS.get(setting.name, setting.name)
    return template.format(key=setting.key, value=setting.value)


@dataclass(frozen=True, slots=True, eq=False)
class Hint:
    """What would fix an error, as a sentence with a ``{field}`` per setting it names:
    ``Hint("Pass {feed}.", feed=Setting("feed", key="x"))``. The sentence is our own
    text; user-supplied names only ever enter through the settings."""

    template: str
    settings: Mapping[str, Setting]

    def __init__(self, template: str, **settings: Setting) -> None:
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "settings", settings)

    def render(self, spell: Callable[[Setting], str]) -> str:
        return self.template.format(**{k: spell(s) for k, s in self.settings.items()})


class KernloomError(Exception):
    """Base class of every error kernloom raises on purpose.

    ``message`` says what went wrong; ``hint``, where there is one, what would fix it in
    terms of a setting. ``str()`` renders the hint for the Python API; the command line
    renders the same hint with its flags (``render(spell)``).
    """

    def __init__(self, *args: object, hint: Hint | None = None) -> None:
        super().__init__(*args)
        self.hint = hint

    @property
    def message(self) -> str:
        """What went wrong, without the hint."""
        return super().__str__()

    def render(self, spell: Callable[[Setting], str]) -> str:
        """The message and its hint, with every setting spelled by ``spell``."""
        if self.hint is None:
            return self.message
        return f"{self.message} {self.hint.render(spell)}"

    def __str__(self) -> str:
        return self.render(python_spelling)


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
    """A kernel failed while being constructed or run; the message names the node and op.

    A plain ``KernelError`` is a crash of kernel code (an exception the kernel did not mean
    to raise, wrapped with the node it came from); a bad value the kernel found and
    reported on purpose is a ``KernelArgumentError``, which is both.
    """


class KernelArgumentError(KernelError, InvalidArgumentError):
    """A kernel found a bad argument at run time (``raise ctx.fail(...)``): a shape, an
    index, an axis or a value only known when the step runs.

    It is an ``InvalidArgumentError``, so ``except kl.InvalidArgumentError`` catches it
    as TensorFlow's ``except tf.errors.InvalidArgumentError`` catches a kernel's
    ``errors::InvalidArgument``; and a ``KernelError``, so code that catches every
    failure of a kernel still does.
    """


class DeviceError(KernloomError):
    """A device plugin's own code failed where the runtime called it -- copying a feed onto
    its device or a fetch off it -- or broke its contract (an allocation of another dtype
    than asked for), so the run could not go on. The message names the feed, fetch or
    node, the device and the plugin that provides it, and says it is that plugin's fault,
    not the graph's; the device's own exception, where there is one, is the
    ``__cause__``."""


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


def short_repr(value: object) -> str:
    """``repr(value)`` cut to 60 characters: a bad argument named in a message without
    pasting a whole array into it."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
