"""The ``kernloom`` command: what is installed, and what went wrong with it.

Exit codes: 0 when everything loaded, 1 when a plugin failed to load (or a factory
conflicted or crashed), 2 for bad usage, including malformed ``KERNLOOM_*`` variables.

Nearly every string shown comes from a plugin or the user (device names, install hints,
op names, reasons), so no console here interprets rich markup: ``[cuda12]`` in an
install hint must be shown, and ``[/dev/accel0]`` must not be read as a closing tag.
Styles are applied through ``rich.text.Text`` objects only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernloom.cli_args import UsageError, unknown_device_type
from kernloom.cli_compare import add_compare_parser
from kernloom.cli_console import plain_console
from kernloom.cli_flags import cli_message
from kernloom.cli_onnx import add_convert_parser, cmd_ops_onnx
from kernloom.cli_optimize import add_optimize_parser
from kernloom.cli_plugin import add_plugin_parser
from kernloom.cli_run import add_run_parser
from kernloom.demo import add_demo_parser
from kernloom.errors import InvalidArgumentError, KernloomError, PluginError
from kernloom.framework.attr import format_attr_value
from kernloom.framework.device import DeviceOptions
from kernloom.framework.device_factory_registry import (
    ResolvedFactory,
    create_devices_checked,
    probe_unavailable,
)
from kernloom.framework.device_name import parse_device_name
from kernloom.framework.origin import Origin
from kernloom.hooks import KERNLOOM_API_VERSION, PluginState
from kernloom.registry import Registry
from kernloom.version import __version__

__all__ = ["main"]

EXIT_OK = 0
EXIT_PLUGIN_FAILURE = 1
EXIT_USAGE = 2


def origin_json(origin: Origin) -> dict[str, str | None]:
    """Where a registration came from, as every ``--json`` listing gives it."""
    return {"plugin": origin.plugin, "distribution": origin.distribution}


def _console(*, stderr: bool = False) -> Console:
    return plain_console(stderr=stderr, table_width=True)


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class _DeviceRow:
    device_type: str
    name: str | None
    backend: str | None
    factory: str
    plugin: str
    distribution: str | None
    priority: int
    status: str
    reason: str
    memory_limit: int | None
    physical_device_desc: str


def _device_rows(resolved: ResolvedFactory) -> tuple[list[_DeviceRow], str | None]:
    """Rows for one factory's devices (or one row saying why it has none), and an error."""
    reg = resolved.registration

    def row(**kw: Any) -> _DeviceRow:
        base: dict[str, Any] = {
            "device_type": reg.device_type,
            "name": None,
            "backend": None,
            "factory": reg.factory.description,
            **origin_json(reg.origin),
            "priority": reg.priority,
            "status": str(resolved.status),
            "reason": resolved.reason,
            "memory_limit": None,
            "physical_device_desc": "",
        }
        base.update(kw)
        return _DeviceRow(**base)

    try:
        devices = create_devices_checked(reg, DeviceOptions())
    except KernloomError as exc:
        return [row(status="error", reason=cli_message(exc))], cli_message(exc)
    try:
        if not devices:
            why = probe_unavailable(reg.factory) or "the factory found no device"
            return [row(status="unavailable", reason=why)], None
        return [
            row(
                name=d.name,
                backend=d.backend,
                memory_limit=d.attributes.memory_limit,
                physical_device_desc=d.attributes.physical_device_desc,
            )
            for d in devices
        ], None
    finally:
        for device in devices:
            device.close()


def _cmd_devices(registry: Registry, args: argparse.Namespace) -> int:
    try:
        resolved = registry.resolve_factories()
        order = registry.placement_order()
    except KernloomError as exc:
        _console(stderr=True).print(f"error: {cli_message(exc)}")
        return EXIT_USAGE
    rows: list[_DeviceRow] = []
    errors: list[str] = []
    for item in resolved:
        item_rows, error = _device_rows(item)
        rows.extend(item_rows)
        if error:
            errors.append(error)
    problems = registry.problems() + errors
    if args.json:
        print(
            json.dumps(
                {
                    "kernloom_version": __version__,
                    "plugin_api": KERNLOOM_API_VERSION,
                    "placement_order": order,
                    "devices": [asdict(r) for r in rows],
                    "conflicts": [str(c) for c in registry.conflicts],
                    "problems": problems,
                },
                indent=2,
            )
        )
        return EXIT_PLUGIN_FAILURE if problems else EXIT_OK

    console = _console()
    table = Table(title="kernloom devices", title_justify="left")
    for column in (
        "type",
        "name",
        "backend",
        "factory",
        "plugin (distribution)",
        "priority",
        "status",
        "memory",
        "why",
    ):
        table.add_column(column, overflow="fold", no_wrap=column in ("name", "status", "memory"))
    for r in rows:
        style = {"in use": "green", "shadowed": "yellow"}.get(r.status, "red")
        table.add_row(
            r.device_type,
            r.name or "-",
            r.backend or "-",
            r.factory.rpartition(".")[2],
            r.plugin + (f" ({r.distribution})" if r.distribution else ""),
            str(r.priority),
            Text(r.status, style=style),
            _bytes(r.memory_limit) if r.memory_limit is not None else "-",
            r.reason,
        )
    if rows:
        console.print(table)
        console.print(f"placement order: {' > '.join(order)}")
    else:
        console.print(
            Text("no device factory is registered.", style="red"),
            "Install a device plugin, e.g. `pip install kernloom-cpu-numpy`.",
        )
    _print_problems(console, problems)
    return EXIT_PLUGIN_FAILURE if problems or not rows else EXIT_OK


def _print_problems(console: Console, problems: list[str]) -> None:
    if problems:
        console.print(Text(f"{len(problems)} problem(s):", style="red"))
        for problem in problems:
            console.print(f"  - {problem}")
        console.print("Run `kernloom plugins --verbose` for details.")


def _cmd_plugins(registry: Registry, args: argparse.Namespace) -> int:
    records = registry.plugins
    problems = registry.problems()
    if args.json:
        print(
            json.dumps(
                {
                    "kernloom_version": __version__,
                    "plugin_api": KERNLOOM_API_VERSION,
                    "plugins": [
                        {**asdict(r), "state": str(r.state), "registered": list(r.registered)}
                        | ({} if args.verbose else {"traceback": None})
                        for r in records
                    ],
                    "problems": problems,
                },
                indent=2,
            )
        )
        return EXIT_PLUGIN_FAILURE if registry.failures or problems else EXIT_OK

    console = _console()
    table = Table(
        title=f"kernloom plugins (plugin API {KERNLOOM_API_VERSION})", title_justify="left"
    )
    for column in ("plugin", "distribution", "state", "requires API", "registered / reason"):
        table.add_column(column, overflow="fold")
    for r in records:
        style = {PluginState.LOADED: "green", PluginState.DISABLED: "dim"}.get(r.state, "red")
        table.add_row(
            r.name,
            f"{r.distribution} {r.version or ''}".strip() if r.distribution else r.value,
            Text(str(r.state), style=style),
            r.api_requirement or "-",
            Text(", ".join(r.registered) if r.state is PluginState.LOADED else r.reason),
        )
    if records:
        console.print(table)
    else:
        console.print("no kernloom plugins are installed; try `pip install kernloom-cpu-numpy`.")
    if args.verbose:
        for r in records:
            if r.traceback:
                console.rule(f"traceback of plugin {r.name!r}")
                console.print(r.traceback.rstrip())
    _print_problems(console, problems)
    return EXIT_PLUGIN_FAILURE if problems else EXIT_OK


def _report_unknown_op(registry: Registry, name: str | None) -> bool:
    """Print why ``name`` is no op (with suggestions) and say so; False for a known op."""
    if name is None or name in registry.ops:
        return False
    try:
        registry.op_def(name)
    except KernloomError as exc:
        _console(stderr=True).print(f"error: {cli_message(exc)}")
    return True


def _cmd_ops(registry: Registry, args: argparse.Namespace) -> int:
    if args.onnx:
        return cmd_ops_onnx(args)
    if _report_unknown_op(registry, args.name):
        return EXIT_USAGE
    registrations = [
        r
        for r in registry.ops.registrations()
        if args.name in (None, r.op_def.name)
        and (args.all or args.name or not r.op_def.name.startswith("_"))
    ]
    if args.json:
        rows = [
            {
                "name": r.op_def.name,
                "signature": r.op_def.signature(),
                "inputs": [arg.spec() for arg in r.op_def.inputs],
                "outputs": [arg.spec() for arg in r.op_def.outputs],
                "attrs": [attr.spec() for attr in r.op_def.attrs],
                "is_stateful": r.op_def.is_stateful,
                "is_commutative": r.op_def.is_commutative,
                "has_shape_fn": r.op_def.shape_fn is not None or not r.op_def.outputs,
                "summary": r.op_def.summary,
                **origin_json(r.origin),
            }
            for r in registrations
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title=f"kernloom ops ({len(registrations)})", title_justify="left")
    for column in ("op", "signature", "attrs", "from"):
        table.add_column(column, overflow="fold")
    for r in registrations:
        op = r.op_def
        no_shape_fn = op.shape_fn is None and bool(op.outputs)
        flags = [
            f
            for f, on in (
                ("stateful", op.is_stateful),
                ("commutative", op.is_commutative),
                ("no shape function: output shapes unknown until it runs", no_shape_fn),
            )
            if on
        ]
        table.add_row(
            Text(op.name + (f" [{', '.join(flags)}]" if flags else "")),  # not rich markup
            op.signature().removeprefix(op.name),
            "\n".join(a.spec() for a in op.attrs),
            r.origin.plugin,
        )
    _console().print(table)
    if args.name and registrations and registrations[0].op_def.summary:
        _console().print(registrations[0].op_def.summary)
    return EXIT_OK


def _kernel_device_type(registry: Registry, text: str | None) -> str | None:
    """``--device`` as a device type: a type (any case: ``cpu``) or a device name
    (``CPU:0``, ``/device:GPU:1``), one that a factory creates or a kernel is registered
    for; anything else is refused, naming the types, not answered with an empty table."""
    if text is None:
        return None
    types = sorted(
        {
            *registry.placement_order(),
            *(k.kernel_def.device_type for k in registry.kernels.kernels()),
        }
    )
    try:
        wanted = parse_device_name(text).device_type or text
    except KernloomError:
        wanted = text
    for device_type in types:
        if device_type.lower() == wanted.lower():
            return device_type
    raise unknown_device_type(f"--device {text}", wanted, types)


def _cmd_kernels(registry: Registry, args: argparse.Namespace) -> int:
    if _report_unknown_op(registry, args.op):
        return EXIT_USAGE
    try:
        device_type = _kernel_device_type(registry, args.device)
    except UsageError as exc:
        _console(stderr=True).print(f"error: {exc}")
        return EXIT_USAGE
    kernels = [
        k
        for k in registry.kernels.kernels(args.op)
        if device_type is None or k.kernel_def.device_type == device_type
    ]
    if args.json:
        rows = [
            {
                "op": k.kernel_def.op,
                "device_type": k.kernel_def.device_type,
                "backend": k.kernel_def.backend,
                "label": k.kernel_def.label,
                "constraints": {
                    attr: [format_attr_value(v).strip("'") for v in values]
                    for attr, values in k.kernel_def.constraints.items()
                },
                "host_memory_args": list(k.kernel_def.host_memory_args),
                "priority": k.kernel_def.priority,
                "implementation": k.implementation,
                **origin_json(k.origin),
            }
            for k in kernels
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = Table(title=f"kernloom kernels ({len(kernels)})", title_justify="left")
    for column in (
        "op",
        "device",
        "backend",
        "label",
        "constraints",
        "host memory",
        "priority",
        "plugin",
    ):
        table.add_column(column, overflow="fold")
    for k in kernels:
        kd = k.kernel_def
        table.add_row(
            kd.op,
            kd.device_type,
            kd.backend or "any",
            kd.label or "-",
            "; ".join(
                f"{a} in {{{', '.join(str(v) for v in vs)}}}"
                for a, vs in sorted(kd.constraints.items())
            )
            or "-",
            ", ".join(kd.host_memory_args) or "-",
            str(kd.priority),
            k.origin.plugin + (f" ({k.origin.distribution})" if k.origin.distribution else ""),
        )
    _console().print(table)
    if not kernels:
        where = " ".join(
            p
            for p in (
                f"for op {args.op}" if args.op else "",
                f"on {args.device}" if args.device else "",
            )
            if p
        )
        _console().print(f"no kernel is registered {where}".rstrip() + ".")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernloom",
        description="Inspect kernloom's installed devices and plugins, run saved graphs.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kernloom {__version__} (plugin API {KERNLOOM_API_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    devices = sub.add_parser("devices", help="the devices the installed factories provide")
    devices.add_argument("--json", action="store_true", help="machine-readable output")
    devices.set_defaults(handler=_cmd_devices)
    plugins = sub.add_parser("plugins", help="installed plugins, loaded or failed, and why")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    plugins.set_defaults(handler=_cmd_plugins)
    ops = sub.add_parser("ops", help="registered ops: signatures and attrs")
    ops.add_argument("name", nargs="?", help="show one op")
    ops.add_argument("--all", action="store_true", help="include runtime-internal ops (_Send, ...)")
    ops.add_argument("--json", action="store_true", help="machine-readable output")
    ops.add_argument("--onnx", action="store_true", help="list the ONNX ops that import")
    ops.set_defaults(handler=_cmd_ops)
    kernels = sub.add_parser("kernels", help="registered kernels and what selects them")
    kernels.add_argument("--op", help="only kernels of this op")
    kernels.add_argument("--device", help="only kernels for this device type (CPU, GPU, ...)")
    kernels.add_argument("--json", action="store_true", help="machine-readable output")
    kernels.set_defaults(handler=_cmd_kernels)
    add_run_parser(sub)
    add_optimize_parser(sub)
    add_convert_parser(sub)
    add_demo_parser(sub)
    add_plugin_parser(sub)
    add_compare_parser(sub)
    return parser


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a command whose reader closed the pipe."""


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the (sub)command ``args`` was parsed for: ``kernloom plugin new``'s
    for ``kernloom plugin new ...``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(str(getattr(args, action.dest, "")))
            if chosen is not None:
                return _command_parser(chosen, args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said in the usage of the command they were given to, not kernloom's
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        registry = Registry.from_entry_points(warn=False)
    except PluginError as exc:
        _console(stderr=True).print(f"error: {cli_message(exc)}")
        return EXIT_PLUGIN_FAILURE
    except InvalidArgumentError as exc:
        _console(stderr=True).print(f"error: {cli_message(exc)}")
        return EXIT_USAGE
    try:
        code: int = args.handler(registry, args)
    except BrokenPipeError:
        # The reader went away (`kernloom ops --json | head`): as for any Unix tool, stop
        # quietly; point stdout at /dev/null so the interpreter's final flush cannot fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
