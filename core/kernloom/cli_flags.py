"""Errors in the command line's own terms: each setting an error names, as a flag.

An error carries what went wrong and, as a ``Hint``, the setting that would fix it
(``kernloom.errors.Setting``). The Python API spells settings as Python
(``feed_dict={'x': value}``); here the same hint is spelled with the flags of
``kernloom run`` (``--feed x=FILE.npy``). A setting the command line has no flag for
keeps its Python spelling, so no advice is ever lost.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Final

from kernloom.cli_args import UsageError
from kernloom.cli_console import plain_console
from kernloom.errors import (
    InvalidArgumentError,
    KernelError,
    KernloomError,
    NotFoundError,
    Setting,
    python_spelling,
)
from kernloom.fileio import FileError

__all__ = [
    "CLI_FLAGS",
    "COMPARE_FLAGS",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OPTIMIZE_FLAGS",
    "PYTHON_ONLY",
    "cli_message",
    "cli_spelling",
    "run_command",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""The run (or the optimizer, the demo) failed: a kernel, a device, a rendezvous."""
EXIT_USAGE: Final = 2
"""Bad usage: a bad argument, file, feed, fetch name or label."""

CLI_FLAGS: Final[Mapping[str, str]] = {
    "feed": "--feed {key}=FILE.npy",
    "feed_array": "--feed {key}=FILE.npy (FILE.npy: an array of {value}, as numpy.save writes it)",
    "kernel_label": "--label {key}={value}",
    "device_filter": "--device-filter {value}",
    "soft_placement": "--soft-placement",
    "timeout": "--timeout SECONDS",
    "trace": "--trace FILE.json",
    "inter_op_threads": "--inter-op-threads N",
    "memory_limit": "--memory-limit {key}=BYTES",
    "initializer": "--init NODE (the node that initialises {key!r}, such as '{key}/Assign', or "
    "the graph's kl.variables_initializer() node)",
    "disabled_pass": "--disable {value}",
}
"""Setting -> the ``kernloom run`` flag that sets it; ``str.format`` fields ``key``, ``value``.
A template is the flag, its argument (quoted for a shell once filled in) and, optionally,
words about it."""

COMPARE_FLAGS: Final[Mapping[str, str]] = {
    name: CLI_FLAGS[name] for name in ("feed", "feed_array", "kernel_label", "device_filter")
}
"""The settings ``kernloom compare`` has flags for."""

OPTIMIZE_FLAGS: Final[Mapping[str, str]] = {"disabled_pass": CLI_FLAGS["disabled_pass"]}
"""The settings ``kernloom optimize`` has flags for: ``--disable`` as ``kernloom run``'s."""

PYTHON_ONLY: Final = frozenset({"constant_array"})
"""Settings no command has a flag for, because no command can meet their errors: a
constant is built in Python (a saved graph's constants are already arrays)."""


def cli_spelling(setting: Setting, flags: Mapping[str, str] = CLI_FLAGS) -> str:
    """The flag that sets ``setting``, filled in and quoted for a shell. A setting the
    command has no flag for keeps its Python spelling, marked as such."""
    template = flags.get(setting.name)
    if template is None:
        return f"{python_spelling(setting)} (Python API; this command has no flag for it)"
    flag, _, rest = template.partition(" ")
    if not rest:
        return flag
    argument, _, words = rest.partition(" ")
    filled = argument.format(key=setting.key, value=setting.value)
    spelled = f"{flag} {shlex.quote(filled)}"
    if words:
        spelled += " " + words.format(key=setting.key, value=setting.value)
    return spelled


def cli_message(error: BaseException, flags: Mapping[str, str] = CLI_FLAGS) -> str:
    """The error's message for the terminal, with any hint spelled as ``flags`` (those of
    ``kernloom run`` unless a subcommand has its own)."""
    if isinstance(error, KernloomError):
        return error.render(lambda setting: cli_spelling(setting, flags))
    return str(error)


def run_command(
    body: Callable[[], int],
    *,
    failed: str,
    flags: Mapping[str, str] = CLI_FLAGS,
    usage: tuple[type[KernloomError], ...] = (),
) -> int:
    """Run a subcommand's ``body`` and turn its errors into one line on standard error and
    an exit code, the same way for every command: bad usage (a bad argument, file, name,
    feed or label, and the command's own ``usage`` errors) exits ``EXIT_USAGE``; a failure
    of the work itself (a kernel's error, a bad value a kernel found included) exits
    ``EXIT_FAILED``, its message after ``failed`` (``"the run failed: "``). Hints are
    spelled as ``flags``."""
    bad_usage: tuple[type[KernloomError], ...] = (
        InvalidArgumentError,
        NotFoundError,
        FileError,
        *usage,
    )
    try:
        return body()
    except UsageError as exc:
        message, code = str(exc), EXIT_USAGE
    except KernelError as exc:  # a kernel's bad argument too: the work itself failed
        message, code = failed + cli_message(exc, flags), EXIT_FAILED
    except bad_usage as exc:
        # Bad graph files, unknown fetch or feed names, mismatched feeds, bad labels,
        # unwritable or full outputs.
        message, code = cli_message(exc, flags), EXIT_USAGE
    except KernloomError as exc:
        message, code = failed + cli_message(exc, flags), EXIT_FAILED
    except MemoryError:
        message = failed + "out of memory; use smaller feeds or a smaller graph"
        code = EXIT_FAILED
    errors = plain_console(stderr=True)
    errors.print(f"error: {message}")
    return code
