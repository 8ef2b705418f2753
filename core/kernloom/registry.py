"""The ``Registry``: everything the installed plugins provide, gathered in one object.

Registries are objects, not module globals. ``default_registry()`` builds one lazily
from the installed entry points on first use and keeps it; tests and tools build their
own with ``Registry()`` plus ``register_plugin`` or ``Registry.from_entry_points``.

Failure policy, one and the same for every plugin: a plugin that cannot be imported,
declares an incompatible API, fails pluggy's validation, raises in its hook, or
registers something invalid is *recorded* (``Registry.plugins``) with its reason and
traceback, warned about once with ``KernloomPluginWarning``, and left out entirely.
``KERNLOOM_STRICT_PLUGINS=1`` turns every such problem into a ``PluginError`` instead.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, final

from kernloom.environment import PluginSettings
from kernloom.errors import (
    KernloomPluginWarning,
    PluginError,
    did_you_mean,
)
from kernloom.framework.device import Device, DeviceOptions
from kernloom.framework.device_factory_registry import (
    DeviceFactoryRegistry,
    FactoryConflict,
    FactoryOverride,
    ResolvedFactory,
)
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.kernel_registry import (
    KernelConflict,
    KernelRegistration,
    KernelRegistry,
)
from kernloom.framework.node_def import NodeDef
from kernloom.framework.op_def import OpDef, OpRegistry, OpSource
from kernloom.framework.op_kernel import OpKernel
from kernloom.framework.origin import Origin
from kernloom.hooks import (
    ENTRY_POINT_GROUP,
    PluginRecord,
    PluginState,
)
from kernloom.plugin_loader import PluginLoader, PluginTables
from kernloom.registrar import GraphPassRegistration

OPTIONS_SOURCE = "DeviceOptions.factory_overrides"
"""How a ``DeviceOptions``' factory selection is named in messages, by default."""

__all__ = ["Registry", "default_registry", "registry_of"]


@final
class Registry:
    """What the installed plugins provide, with their origins: the op table, the kernels
    (``KernelRegistry``: lookup and construction), the device factories
    (``DeviceFactoryRegistry``: lookup and device creation) and the graph passes. A
    ``PluginLoader`` fills them; once loading ends they are frozen (``freeze``)."""

    def __init__(self, settings: PluginSettings | None = None) -> None:
        self._settings = settings or PluginSettings()
        self._tables = PluginTables()
        self._loader = PluginLoader(self._settings, self._tables)
        self._factories = self._tables.factories
        self._ops = self._tables.ops
        self._kernels = self._tables.kernels
        self._graph_passes = self._tables.graph_passes
        self._records = self._tables.records
        self._notes = self._tables.notes
        self._frozen = False
        self._lock = threading.Lock()

    # -- building ---------------------------------------------------------------------

    @classmethod
    def from_entry_points(
        cls,
        *,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
        environ: Mapping[str, str] | None = None,
        warn: bool = True,
    ) -> Registry:
        """A registry holding every plugin installed in the ``kernloom`` entry-point group.

        ``entry_points`` replaces discovery (tests pass hand-made ``EntryPoint``s);
        ``environ`` replaces ``os.environ``. Plugins load in order of entry-point name,
        so "registered first" never depends on installation order.
        """
        settings = PluginSettings.from_environ(os.environ if environ is None else environ)
        registry = cls(settings)
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        found = sorted(entry_points, key=lambda ep: (ep.name, ep.value))
        for ep in found:
            registry._loader.load_entry_point(ep)
        names = [ep.name for ep in found]
        if settings.allow is not None:
            for wanted in sorted(settings.allow - set(names)):
                registry._notes.append(
                    f"KERNLOOM_PLUGINS names {wanted!r}, but no installed plugin has that "
                    f"name; installed: {', '.join(names) or '(none)'}."
                    + did_you_mean(wanted, names)
                )
        for unwanted in sorted(settings.disable - set(names)):
            # A typo here would leave the plugin meant loaded, silently.
            registry._notes.append(
                f"KERNLOOM_DISABLE_PLUGINS names {unwanted!r}, but no installed plugin has that "
                f"name, so it disables nothing; installed: {', '.join(names) or '(none)'}."
                + did_you_mean(unwanted, names)
            )
        problems = registry.problems()
        if problems and settings.strict:
            raise PluginError(
                "KERNLOOM_STRICT_PLUGINS=1 and plugins failed to load:\n  - "
                + "\n  - ".join(problems)
                + "\nRun `kernloom plugins --verbose` for the tracebacks; fix or uninstall the "
                "plugins, or unset KERNLOOM_STRICT_PLUGINS to run without them."
            )
        if warn:
            for problem in problems:
                warnings.warn(
                    f"{problem} (`kernloom plugins --verbose` shows details)",
                    KernloomPluginWarning,
                    stacklevel=2,
                )
        return registry

    def register_plugin(
        self,
        plugin: object,
        *,
        name: str,
        distribution: str | None = None,
        version: str | None = None,
    ) -> PluginRecord:
        """Load an in-process plugin object (a module, class instance or namespace).

        The same checks as for an installed plugin, but a failure raises at once
        (``PluginError``, chained to the cause) instead of being recorded: the caller
        is right here. ``KERNLOOM_API`` is checked when the object declares it.
        """
        origin = Origin(name, distribution, version)
        value = getattr(plugin, "__name__", type(plugin).__name__)
        if self._frozen:
            raise PluginError(
                f"cannot register {origin} ({value}): this registry is frozen, as plugin "
                f"loading ended (the default registry is frozen when built; any other, when it "
                f"first finds a kernel or creates devices). Build a new "
                f"kernloom.plugin.Registry() and register_plugin every plugin into it before "
                f"using it."
            )
        record = self._loader.load_object(plugin, origin, value, api_required=False)
        if record.failed:
            raise PluginError(record.describe())
        return record

    def freeze(self) -> None:
        """End loading: the op, kernel and device-factory tables refuse registrations from
        now on. ``default_registry()`` is frozen when built; any other registry the first
        time it finds a kernel or creates devices, so that nothing a session, placer or
        kernel cache has seen changes under it. (Before that, in-process plugins may join
        the installed ones: ``from_entry_points()`` then ``register_plugin``.)"""
        with self._lock:
            if self._frozen:
                return
            self._frozen = True
            self._tables.freeze()

    @property
    def frozen(self) -> bool:
        return self._frozen

    # -- what was loaded ----------------------------------------------------------------

    @property
    def settings(self) -> PluginSettings:
        return self._settings

    @property
    def plugins(self) -> tuple[PluginRecord, ...]:
        """Every plugin seen, loaded or not, in load order."""
        return tuple(self._records.values())

    @property
    def failures(self) -> tuple[PluginRecord, ...]:
        return tuple(r for r in self._records.values() if r.failed)

    @property
    def conflicts(self) -> tuple[FactoryConflict, ...]:
        return self._factories.conflicts

    def problems(self) -> list[str]:
        """Every failure, conflict and configuration mistake, one line each."""
        return [r.describe() for r in self.failures] + list(self._notes)

    @property
    def device_factories(self) -> DeviceFactoryRegistry:
        return self._factories

    @property
    def kernel_conflicts(self) -> tuple[KernelConflict, ...]:
        return self._kernels.conflicts

    # -- ops and kernels --------------------------------------------------------------------

    @property
    def ops(self) -> OpRegistry:
        """The standard op library plus the plugins' ops."""
        return self._ops

    @property
    def kernels(self) -> KernelRegistry:
        return self._kernels

    @property
    def graph_passes(self) -> tuple[GraphPassRegistration, ...]:
        """The plugins' graph passes, in registration order (the optimizer runs them)."""
        return tuple(self._graph_passes)

    def op_def(self, name: str) -> OpDef:
        return self._ops.get(name)

    def node_attrs(self, node: NodeDef) -> dict[str, Any]:
        """The node's attrs checked against its op, with defaults filled in."""
        return self.op_def(node.op).check_attrs(node.attrs, node.name)

    def find_kernel(
        self, node: NodeDef, device_type: str, backend: str | None = None
    ) -> KernelRegistration:
        """The kernel a node gets on a device type (and backend); see ``KernelRegistry``."""
        self.freeze()
        return self._kernels.find(node, self.node_attrs(node), device_type, backend)

    def supported_device_types(
        self,
        node: NodeDef,
        options: DeviceOptions | None = None,
        backends: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The device types on which ``node`` has a kernel, in placement order."""
        self.freeze()
        return self._kernels.supported_device_types(
            node, self.node_attrs(node), self.placement_order(options), backends
        )

    def create_kernel(self, node: NodeDef, device: Device) -> OpKernel:
        """Look up and construct the kernel for ``node`` on ``device``."""
        self.freeze()
        op_def = self.op_def(node.op)
        return self._kernels.create(node, op_def, op_def.check_attrs(node.attrs, node.name), device)

    # -- devices ----------------------------------------------------------------------

    def factory_overrides(
        self, options: DeviceOptions | None = None, *, source: str = OPTIONS_SOURCE
    ) -> dict[str, FactoryOverride]:
        """The environment's factory selections, overridden by ``options``'; ``source``
        names where the latter came from in messages (a session says
        ``SessionConfig(factory_overrides=...)``, in its user's words)."""
        overrides = dict(self._settings.factory_overrides)
        if options is not None:
            for device_type, plugin in options.factory_overrides.items():
                overrides[device_type] = FactoryOverride(plugin, source)
        return overrides

    def placement_order(
        self, options: DeviceOptions | None = None, *, source: str = OPTIONS_SOURCE
    ) -> list[str]:
        """Device types, highest priority first: the order the placer tries them in."""
        return self._factories.placement_order(self.factory_overrides(options, source=source))

    def resolve_factories(
        self, options: DeviceOptions | None = None, *, source: str = OPTIONS_SOURCE
    ) -> list[ResolvedFactory]:
        return self._factories.resolve(self.factory_overrides(options, source=source))

    def create_devices(
        self, options: DeviceOptions | None = None, *, source: str = OPTIONS_SOURCE
    ) -> DeviceMgr:
        """Create the devices of every factory in use, in placement order (see
        ``DeviceFactoryRegistry.create_devices``); the registry is frozen from here on."""
        self.freeze()
        options = options or DeviceOptions()
        disabled = [
            f"plugin {r.name!r}"
            + (f" ({r.distribution})" if r.distribution else "")
            + f": {r.reason}"
            for r in self._records.values()
            if r.state is PluginState.DISABLED
        ]
        return self._factories.create_devices(
            options,
            self.factory_overrides(options, source=source),
            strict=self._settings.strict,
            disabled=disabled,
        )


_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The registry of the installed plugins, built on first use and then kept."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry.from_entry_points()
            _default.freeze()
        return _default


def registry_of(source: OpSource | None) -> Registry:
    """The registry to run a graph with: the one it was built with (``Graph.registry``) if
    that is a ``Registry``, else the installed plugins' (built here, on first need)."""
    return source if isinstance(source, Registry) else default_registry()
