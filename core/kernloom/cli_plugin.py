"""``kernloom plugin new NAME``: write a plugin package that installs and passes ``pytest``.

Two templates, under ``kernloom/scaffold/templates/`` (package data): ``device`` (a device
type with its factory, buffers, copies and a few kernels) and ``kernels`` (a kernel library
adding labelled kernels for an existing device type). Each is a pip-installable project
whose ``pytest`` runs kernloom's conformance kit (``addopts`` in its pyproject) and a few
tests of its own. Templates are files ending ``.tmpl`` in which ``__kl_KEY__`` stands for a
value (a valid identifier, so the Python templates parse and their imports can be checked);
the generated code imports only ``kernloom``, ``kernloom.plugin``, ``kernloom.testing``,
numpy and pytest.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import keyword
import os
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from kernloom.cli_console import plain_console
from kernloom.cli_flags import cli_message
from kernloom.errors import InvalidArgumentError
from kernloom.fileio import FileError, atomic_write_text, describe_os_error
from kernloom.framework.device_name import is_valid_device_type
from kernloom.hooks import ENTRY_POINT_GROUP
from kernloom.registry import Registry
from kernloom.version import __version__

__all__ = [
    "DEVICE_PRIORITY",
    "PluginSpec",
    "add_plugin_parser",
    "installed_clashes",
    "write_plugin",
]

EXIT_OK, EXIT_USAGE = 0, 2

DEVICE_PRIORITY = 100
"""Where a new device type goes in placement order: above the CPU (60), below GPUs (200)."""
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """What the templates are filled with."""

    name: str
    """The entry-point name and project directory (``acme``)."""
    device_type: str
    kernels_only: bool = False

    @classmethod
    def make(cls, name: str, device_type: str | None, *, kernels_only: bool) -> PluginSpec:
        """Check the names, and default the device type (``ACME`` for ``acme``; ``CPU`` for a
        kernel library)."""
        if not _NAME.fullmatch(name) or keyword.iskeyword(name):
            raise InvalidArgumentError(
                f"plugin name {name!r} must be a lower-case Python identifier such as 'acme' "
                f"or 'acme_npu' (it names the entry point and the package kernloom_{name})"
            )
        chosen = device_type or ("CPU" if kernels_only else name.upper())
        if not is_valid_device_type(chosen):
            raise InvalidArgumentError(
                f"device type {chosen!r} must be an upper-case name such as ACME or NPU"
            )
        return cls(name, chosen, kernels_only)

    @property
    def package(self) -> str:
        return f"kernloom_{self.name}"

    def values(self) -> dict[str, str]:
        return {
            "name": self.name,
            "package": self.package,
            "distribution": f"kernloom-{self.name.replace('_', '-')}",
            "device_type": self.device_type,
            "cls": "".join(part.capitalize() for part in self.name.split("_")),
            "priority": str(DEVICE_PRIORITY),
            "kernloom_version": ".".join(__version__.split(".")[:2]),
        }


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"__kl_{key}__", value)
    leftover = re.search(r"__kl_\w+?__", text)
    if leftover is not None:  # a template names a value we do not have: our bug
        raise AssertionError(f"unfilled placeholder {leftover.group()} in a template")
    return text


def _files(root: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            found += _files(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(".tmpl"):
            found.append((prefix + entry.name.removesuffix(".tmpl"), entry))
    return found


def installed_clashes(spec: PluginSpec) -> list[str]:
    """What is installed under the names the plugin would take (its distribution, its
    import package, its ``kernloom`` entry point), each described; empty when none is.
    Installed beside it, the new plugin would shadow that one or be shadowed by it."""
    values = spec.values()
    clashes = []
    try:
        found = importlib.metadata.distribution(values["distribution"])
    except importlib.metadata.PackageNotFoundError:
        pass
    else:
        clashes.append(f"distribution {found.metadata['Name']} (version {found.version})")
    owners = importlib.metadata.packages_distributions().get(spec.package)
    if owners:
        clashes.append(
            f"import package {spec.package} (of distribution {', '.join(sorted(set(owners)))})"
        )
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == spec.name:
            owner = entry_point.dist.name if entry_point.dist is not None else "unknown"
            clashes.append(
                f"{ENTRY_POINT_GROUP} entry point {spec.name!r} ({entry_point.value}, of "
                f"distribution {owner})"
            )
    return clashes


def _target_problem(directory: Path, target: Path) -> str | None:
    """Why the project directory ``target`` in ``directory`` cannot be made, or None: a
    file where it or a folder above it should be, or a folder above it that cannot be
    written."""
    for folder in [target, *target.parents]:
        if folder.exists():
            if not folder.is_dir():
                return (
                    "is a file, not a directory"
                    if folder == directory
                    else f"{folder} is a file, not a directory"
                )
            if folder != target and not os.access(folder, os.W_OK | os.X_OK):
                return f"cannot create directories in {folder}: permission denied"
            return None
    return None


def write_plugin(spec: PluginSpec, directory: Path) -> list[Path]:
    """Write the plugin project into ``directory/spec.name`` and return the files written.

    Refuses to write into a directory that exists and is not empty, so nothing a user
    wrote is ever overwritten, and a ``directory`` where the project cannot be made
    (``InvalidArgumentError`` naming ``--dir``).
    """
    target = directory / spec.name
    problem = _target_problem(directory, target)
    if problem is not None:
        raise InvalidArgumentError(
            f"--dir {directory}: {problem}; give a directory you can write (it is created "
            f"if missing)"
        )
    if target.exists() and any(target.iterdir()):
        raise InvalidArgumentError(
            f"{target} already exists and is not empty; choose another --dir or name"
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgumentError(
            f"--dir {directory}: cannot create {target}: {describe_os_error(exc)}; give a "
            f"directory you can write (it is created if missing)"
        ) from None
    template = resources.files("kernloom") / "scaffold" / "templates"
    template = template / ("kernels" if spec.kernels_only else "device")
    values = spec.values()
    written = []
    for relative, source in _files(template):
        path = target / _fill(relative.replace("package/", f"{spec.package}/", 1), values)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, _fill(source.read_text(encoding="utf-8"), values))
        written.append(path)
    return written


def _new(registry: Registry, args: argparse.Namespace) -> int:
    console = plain_console()
    try:
        spec = PluginSpec.make(args.name, args.device_type, kernels_only=args.kernels_only)
        clashes = installed_clashes(spec)
        if clashes:
            raise InvalidArgumentError(
                f"plugin name {spec.name!r} clashes with what is installed: "
                f"{'; '.join(clashes)}. Installed beside it, the new plugin would shadow "
                f"it or be shadowed by it; pick another name"
            )
        files = write_plugin(spec, Path(args.dir))
    except FileError as exc:  # a file of the project could not be written
        plain_console(stderr=True).print(f"error: --dir {args.dir}: {exc.message}")
        return EXIT_USAGE
    except InvalidArgumentError as exc:
        plain_console(stderr=True).print(f"error: {cli_message(exc, {})}")
        return EXIT_USAGE
    root = Path(args.dir) / spec.name
    what = "kernel library" if spec.kernels_only else "device plugin"
    console.print(f"wrote the {what} {root} ({len(files)} files):")
    for path in files:
        console.print(f"  {path.relative_to(root)}")
    console.print(
        f"next: pip install -e '{root}[test]' && (cd {root} && pytest)"
        f"   # runs kernloom's conformance kit on {spec.device_type}"
    )
    return EXIT_OK


def add_plugin_parser(sub: Any) -> None:
    plugin = sub.add_parser("plugin", help="write a new device plugin or kernel library")
    commands = plugin.add_subparsers(dest="plugin_command", required=True, metavar="COMMAND")
    new = commands.add_parser(
        "new",
        help="write a plugin package: pyproject, device, factory, kernels, README, tests",
        description="Write a pip-installable plugin package whose pytest runs kernloom's "
        "conformance kit.",
    )
    new.add_argument("name", help="the plugin's name: entry point, directory, kernloom_NAME")
    new.add_argument(
        "--device-type",
        metavar="TYPE",
        help="the device type (default: NAME in upper case; CPU with --kernels-only)",
    )
    new.add_argument("--dir", default=".", help="where to create NAME/ (default: here)")
    new.add_argument(
        "--kernels-only",
        action="store_true",
        help="a kernel library: labelled kernels for an existing device type, no device",
    )
    new.set_defaults(handler=_new)
