"""Which plugin's devices the kit checks when ``--kernloom-plugin`` names one.

Two plugins may provide one device type: with CuPy's and torch's GPU plugins installed
side by side, CuPy's factory (priority 210) creates the GPU devices and torch's (200) is
shadowed. ``--kernloom-plugin gpu_torch`` asks for torch's GPU, so the kit selects that
plugin's factory for the type, as a user would with ``KERNLOOM_DEVICE_FACTORY=GPU=gpu_torch``;
without this the kit found no torch kernel on CuPy's device and refused to run (seen on
an H100 with both plugins installed). A kernel library without a factory of its own is
checked on the device in use, as before.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable, Mapping

from kernloom.environment import DEVICE_FACTORY
from kernloom.errors import KernloomError
from kernloom.framework.device_factory_registry import FactoryRegistration, probe_unavailable
from kernloom.registry import Registry, default_registry

__all__ = ["installed_registry", "shadowed_factory"]


def shadowed_factory(
    registry: Registry, device_type: str, plugin: str
) -> FactoryRegistration | None:
    """``plugin``'s factory for ``device_type`` where another plugin's creates the devices."""
    factories = registry.device_factories
    own = [r for r in factories.registrations(device_type) if r.origin.answers_to(plugin)]
    if not own:
        return None
    in_use = factories.chosen(registry.factory_overrides()).get(device_type)
    return None if in_use is own[0] else own[0]


def installed_registry(
    device_type: str,
    only_plugin: str | None,
    *,
    environ: Mapping[str, str] | None = None,
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> Registry:
    """The installed plugins, with ``only_plugin``'s own factory creating ``device_type``'s
    devices where it has one (``environ`` and ``entry_points`` replace the process's, in
    tests). Raises ``KernloomError`` when ``KERNLOOM_DEVICE_FACTORY`` selects another
    plugin for the type, or when the named plugin's factory finds no device."""
    isolated = environ is not None or entry_points is not None
    env = dict(os.environ if environ is None else environ)
    registry = (
        Registry.from_entry_points(entry_points=entry_points, environ=env)
        if isolated
        else default_registry()
    )
    if only_plugin is None:
        return registry
    wanted = shadowed_factory(registry, device_type, only_plugin)
    if wanted is None:
        return registry
    selected = registry.factory_overrides().get(device_type)
    if selected is not None:
        raise KernloomError(
            f"--kernloom-plugin {only_plugin}: {selected.source} selects plugin "
            f"{selected.plugin!r} for {device_type}, so the kit would check that plugin's "
            f"devices; unset it, or set it to {device_type}={only_plugin}"
        )
    reason = probe_unavailable(wanted.factory)
    if reason is not None:
        raise KernloomError(
            f"--kernloom-plugin {only_plugin}: its {device_type} factory finds no device "
            f"({reason}); the kit checks a plugin's kernels on that plugin's own devices"
        )
    choice = f"{device_type}={only_plugin}"
    env[DEVICE_FACTORY] = ",".join(filter(None, (env.get(DEVICE_FACTORY, "").strip(), choice)))
    return Registry.from_entry_points(entry_points=entry_points, environ=env, warn=False)
