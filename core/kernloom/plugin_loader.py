"""Loading plugins: the ``PluginLoader`` that fills a registry's tables, and, for each
plugin, its API check and its hook, run through pluggy on its own.

The loader decides which plugins load (entry points, the environment's allow and deny
lists), records what happened to each (``PluginRecord``) and puts what they register into
the op, kernel and device-factory tables (``PluginTables``) that the ``Registry`` then
serves, frozen, to everyone else. The part that touches plugin code turns every way it
can fail into a ``PluginFailure`` carrying the state and reason to record.
"""

from __future__ import annotations

import importlib.metadata
import threading
import traceback
from dataclasses import dataclass, field
from typing import final

import pluggy

from kernloom.environment import PluginSettings
from kernloom.errors import InvalidArgumentError
from kernloom.framework.device_factory_registry import DeviceFactoryRegistry
from kernloom.framework.device_independent_kernels import device_independent_registrations
from kernloom.framework.kernel_registry import KernelRegistry
from kernloom.framework.op_def import OpRegistry
from kernloom.framework.origin import Origin
from kernloom.hooks import (
    KERNLOOM_API_VERSION,
    PROJECT_NAME,
    ApiRange,
    KernloomHookSpecs,
    PluginRecord,
    PluginState,
)
from kernloom.op_library import standard_ops
from kernloom.registrar import GraphPassRegistration, Registrar
from kernloom.version import __version__

__all__ = [
    "PluginFailure",
    "PluginLoader",
    "PluginTables",
    "check_api",
    "describe_exception",
    "format_tb",
    "run_hook",
]


class PluginFailure(Exception):
    """Internal: a plugin step failed; carries the state and reason to record."""

    def __init__(self, state: PluginState, reason: str, api: str | None = None) -> None:
        super().__init__(reason)
        self.state = state
        self.reason = reason
        self.api = api


def format_tb(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def describe_exception(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def check_api(plugin: object, value: str, required: bool) -> str | None:
    """The plugin's declared ``KERNLOOM_API`` range, checked against ours."""
    declared = getattr(plugin, "KERNLOOM_API", None)
    if declared is None:
        if not required:
            return None
        raise PluginFailure(
            PluginState.FAILED,
            f"{value!r} declares no KERNLOOM_API; add a line such as "
            f"KERNLOOM_API = '>=1.0,<2' naming the plugin-API versions it was built for "
            f"(this kernloom provides {KERNLOOM_API_VERSION})",
        )
    try:
        wanted = ApiRange.parse(declared)
    except InvalidArgumentError as exc:
        raise PluginFailure(PluginState.FAILED, f"{value!r}: {exc}", api=str(declared)) from exc
    if not wanted.contains(KERNLOOM_API_VERSION):
        raise PluginFailure(
            PluginState.INCOMPATIBLE,
            f"built for kernloom plugin API {wanted}, but this kernloom ({__version__}) "
            f"provides API {KERNLOOM_API_VERSION}; install a release of the plugin built "
            f"for API {KERNLOOM_API_VERSION.split('.')[0]}.x, or a kernloom whose plugin "
            f"API is in {wanted}",
            api=wanted.spec,
        )
    return wanted.spec


def run_hook(plugin: object, origin: Origin, known_ops: OpRegistry) -> Registrar:
    """Validate the plugin's hook with pluggy and call it through pluggy, on its own:
    each plugin gets a plugin manager of its own, so one plugin's call never reaches
    another's hook and a failure is the failing plugin's alone."""
    name = origin.plugin
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(KernloomHookSpecs)
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except (pluggy.PluginValidationError, ValueError) as exc:
        raise PluginFailure(PluginState.FAILED, f"invalid hook: {exc}") from exc
    impls = pm.hook.kernloom_register.get_hookimpls()
    registrar = Registrar(origin, known_ops)
    try:
        if not impls:
            raise PluginFailure(
                PluginState.FAILED,
                "implements no kernloom hook; define kernloom_register(registrar) and "
                "decorate it with @kernloom.plugin.hookimpl",
            )
        if any(impl.wrapper or impl.hookwrapper for impl in impls):
            raise PluginFailure(
                PluginState.FAILED,
                "kernloom_register is declared as a wrapper hook (wrapper=True or "
                "hookwrapper=True), which would run none of its registrations; use a plain "
                "@kernloom.plugin.hookimpl",
            )
        pm.hook.kernloom_register(registrar=registrar, registry=registrar)
        registrar.finish()
    except (PluginFailure, KeyboardInterrupt):
        raise
    except BaseException as exc:
        # SystemExit and other BaseExceptions too: a plugin must never end the host.
        raise PluginFailure(
            PluginState.FAILED, f"kernloom_register raised {describe_exception(exc)}"
        ) from exc
    finally:
        registrar.close()
    return registrar


@dataclass
class PluginTables:
    """What loading plugins produces: the tables a ``Registry`` serves, and the record of
    every plugin seen, loaded or not (``notes``: conflicts and configuration mistakes)."""

    ops: OpRegistry = field(default_factory=lambda: OpRegistry(parent=standard_ops()))
    kernels: KernelRegistry = field(default_factory=KernelRegistry)
    factories: DeviceFactoryRegistry = field(default_factory=DeviceFactoryRegistry)
    graph_passes: list[GraphPassRegistration] = field(default_factory=list)
    records: dict[str, PluginRecord] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def freeze(self) -> None:
        """Loading is over: the op, kernel and device-factory tables refuse registrations."""
        self.ops.freeze()
        self.kernels.freeze()
        self.factories.freeze()


@final
class PluginLoader:
    """Loads plugins into ``tables``, one policy for all: a plugin that cannot be imported,
    declares an incompatible API, fails pluggy's validation, raises in its hook or
    registers something invalid is recorded with its reason and left out entirely."""

    def __init__(self, settings: PluginSettings, tables: PluginTables) -> None:
        self.settings = settings
        self.tables = tables
        self._independent_types: set[str] = set()
        self._lock = threading.Lock()

    def load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        """Import and load one installed plugin, unless the settings skip it."""
        dist = getattr(ep, "dist", None)
        origin = Origin(ep.name, dist.name if dist else None, dist.version if dist else None)
        if ep.name in self.tables.records:
            other = self.tables.records[ep.name]
            reason = (
                f"entry-point name {ep.name!r} is also used by "
                f"{other.distribution or other.value}; plugin names must be unique, so this "
                f"one is left out"
            )
            record = PluginRecord.of(origin, ep.value, PluginState.FAILED, reason=reason)
            self._record(record, key=f"{ep.name}@{ep.value}")
            return
        skipped = self.settings.why_skipped(ep.name)
        if skipped is not None:
            self._record(PluginRecord.of(origin, ep.value, PluginState.DISABLED, reason=skipped))
            return
        try:
            plugin = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            # SystemExit too: a plugin calling sys.exit() on import must not end the host.
            reason = f"error importing {ep.value!r}: {describe_exception(exc)}"
            self._record(
                PluginRecord.of(
                    origin, ep.value, PluginState.FAILED, reason=reason, traceback=format_tb(exc)
                )
            )
            return
        self.load_object(plugin, origin, ep.value, api_required=True)

    def load_object(
        self, plugin: object, origin: Origin, value: str, *, api_required: bool
    ) -> PluginRecord:
        """Load an imported plugin object; its record, failed or not."""
        api: str | None = None
        with self._lock:
            try:
                if origin.plugin in self.tables.records:
                    raise PluginFailure(
                        PluginState.FAILED,
                        f"a plugin named {origin.plugin!r} is already registered",
                    )
                api = check_api(plugin, value, api_required)
                registrar = run_hook(plugin, origin, self.tables.ops)
            except PluginFailure as failure:
                cause = failure.__cause__
                record = PluginRecord.of(
                    origin,
                    value,
                    failure.state,
                    reason=failure.reason,
                    traceback=format_tb(cause) if cause is not None else "",
                    api_requirement=failure.api or api,
                )
            else:
                for registration in registrar.factories:
                    conflict = self.tables.factories.add(registration)
                    if conflict is not None:
                        self.tables.notes.append(str(conflict))
                    self._add_device_independent_kernels(registration.device_type)
                for op_def in registrar.op_defs:
                    self.tables.ops.add(op_def, origin)
                self.tables.graph_passes.extend(registrar.graph_passes)
                for kernel in registrar.kernels:
                    kernel_conflict = self.tables.kernels.add(kernel)
                    if kernel_conflict is not None:
                        self.tables.notes.append(str(kernel_conflict))
                record = PluginRecord.of(
                    origin,
                    value,
                    PluginState.LOADED,
                    api_requirement=api,
                    registered=registrar.summary(),
                )
        self._record(record)
        return record

    def _add_device_independent_kernels(self, device_type: str) -> None:
        """Give a device type the kernels that are the same everywhere (Const, Identity,
        NoOp, _Send/_Recv, _Arg/_Retval, control flow) the first time a factory for it
        appears, so that a plugin never has to register them. They sit at priority -1: a
        plugin's own kernel for one of these ops (priority 0 or more) wins."""
        if device_type in self._independent_types:
            return
        self._independent_types.add(device_type)
        for registration in device_independent_registrations(device_type):
            self.tables.kernels.add(registration)

    def _record(self, record: PluginRecord, *, key: str | None = None) -> None:
        self.tables.records[key or record.name] = record
