"""Device factories by type and priority: TensorFlow's ``REGISTER_LOCAL_DEVICE_FACTORY``.

Priority decides two things (seed 004):

- **Within one device type**, the factory with the highest priority is used; the others
  are *shadowed*: kept, reported by ``kernloom devices``, and selectable with
  ``DeviceOptions.factory_overrides`` or ``KERNLOOM_DEVICE_FACTORY=TYPE=plugin``.
  A factory that finds no device (its ``unavailable_reason()``) yields to the next one of
  its type, so that an installed CuPy plugin without CuPy does not hide torch's GPU.
  Two factories of one type at the *same* priority are a conflict: the one registered
  first is kept, the other is left out, and the conflict is reported naming both plugins.
- **Across device types**, the priorities of the factories in use order placement:
  a node goes to the first type in that order on which it has a kernel.

The priorities TensorFlow uses, which ours follow:

=====================  ====  ==========================================================
factory                prio  note
=====================  ====  ==========================================================
GPU (CuPy)             210   TensorFlow's GPUDeviceFactory
GPU (torch)            200   shadowed by CuPy's when both are installed
CPU, GPU-compatible     70   TensorFlow's GPUCompatibleCPUDeviceFactory
CPU (numpy)             60   TensorFlow's ThreadPoolDeviceFactory
=====================  ====  ==========================================================

Worked example: with CuPy's GPU (210) and numpy's CPU (60) installed, the placement order
is GPU, CPU. Installing a plugin with a CPU factory at 70 shadows numpy's CPU factory
without changing the order of types; ``KERNLOOM_DEVICE_FACTORY=CPU=cpu_numpy`` brings
numpy's back, and CPU then has priority 60 in the order.

Ties between types with equal priority are broken by type name, so that the order never
depends on which plugin was installed first.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import final

from kernloom.errors import KernloomError, KernloomPluginWarning, NotFoundError, did_you_mean
from kernloom.framework.device import Device, DeviceFactory, DeviceOptions
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.origin import Origin, refuse_frozen

__all__ = [
    "DeviceFactoryRegistry",
    "FactoryConflict",
    "FactoryOverride",
    "FactoryRegistration",
    "FactoryStatus",
    "ResolvedFactory",
    "create_devices_checked",
    "probe_unavailable",
]


@dataclass(frozen=True, slots=True)
class FactoryRegistration:
    """One ``register_device_factory`` call that was accepted."""

    device_type: str
    factory: DeviceFactory
    priority: int
    origin: Origin


@dataclass(frozen=True, slots=True)
class FactoryConflict:
    """Two factories of one type at one priority; ``rejected`` was left out."""

    kept: FactoryRegistration
    rejected: FactoryRegistration

    def __str__(self) -> str:
        kept, rejected = self.kept, self.rejected
        return (
            f"device factory conflict for {kept.device_type} at priority {kept.priority}: "
            f"{kept.origin} registered {kept.factory.description} first and is kept; "
            f"{rejected.origin} registered {rejected.factory.description} and is left out. "
            f"Give one of them a different priority, or uninstall one of "
            f"{kept.origin.distribution or kept.origin.plugin} and "
            f"{rejected.origin.distribution or rejected.origin.plugin}."
        )


@dataclass(frozen=True, slots=True)
class FactoryOverride:
    """A request to use a given plugin's factory for a device type."""

    plugin: str
    source: str
    """Where the request came from, for messages (``KERNLOOM_DEVICE_FACTORY``, ...)."""


class FactoryStatus(enum.StrEnum):
    IN_USE = "in use"
    SHADOWED = "shadowed"


@dataclass(frozen=True, slots=True)
class ResolvedFactory:
    """A registration with the part it plays after priorities and overrides."""

    registration: FactoryRegistration
    status: FactoryStatus
    reason: str
    """Why it is in use or shadowed, in words."""


@final
class DeviceFactoryRegistry:
    """The accepted factory registrations and the conflicts met while accepting them: the
    lookup of the factory in use per device type (``chosen``) and device creation through
    it (``create_devices``). Filled while plugins load, then frozen."""

    __slots__ = ("_by_type", "_conflicts", "_frozen", "_lock", "_warned")

    def __init__(self) -> None:
        self._by_type: dict[str, list[FactoryRegistration]] = {}
        self._conflicts: list[FactoryConflict] = []
        self._frozen = False
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def freeze(self) -> None:
        """Refuse every later ``add`` (plugin loading is over)."""
        self._frozen = True

    def add(self, registration: FactoryRegistration) -> FactoryConflict | None:
        """Accept a registration, unless it ties an earlier one (then report the conflict)."""
        if self._frozen:
            raise refuse_frozen(
                "device factory registry",
                registration.origin,
                f"a {registration.device_type} device factory",
            )
        same_type = self._by_type.setdefault(registration.device_type, [])
        for existing in same_type:
            if existing.priority == registration.priority:
                conflict = FactoryConflict(kept=existing, rejected=registration)
                self._conflicts.append(conflict)
                return conflict
        same_type.append(registration)
        same_type.sort(key=lambda r: -r.priority)
        return None

    @property
    def conflicts(self) -> tuple[FactoryConflict, ...]:
        return tuple(self._conflicts)

    def device_types(self) -> list[str]:
        return sorted(self._by_type)

    def registrations(self, device_type: str | None = None) -> list[FactoryRegistration]:
        """Accepted registrations, highest priority first within a type."""
        if device_type is not None:
            return list(self._by_type.get(device_type, ()))
        return [r for t in sorted(self._by_type) for r in self._by_type[t]]

    def chosen(
        self, overrides: Mapping[str, FactoryOverride] | None = None
    ) -> dict[str, FactoryRegistration]:
        """The factory in use for each device type, in placement order."""
        overrides = overrides or {}
        self._check_overrides(overrides)
        chosen: dict[str, FactoryRegistration] = {}
        for device_type, regs in self._by_type.items():
            override = overrides.get(device_type)
            if override is None:
                # The highest priority that can create a device: an installed CuPy plugin
                # without CuPy must not hide the GPU that torch's factory finds.
                usable = (r for r in regs if probe_unavailable(r.factory) is None)
                chosen[device_type] = next(usable, regs[0])
            else:
                chosen[device_type] = next(r for r in regs if r.origin.answers_to(override.plugin))
        order = sorted(chosen.values(), key=lambda r: (-r.priority, r.device_type))
        return {r.device_type: r for r in order}

    def placement_order(self, overrides: Mapping[str, FactoryOverride] | None = None) -> list[str]:
        """Device types from highest to lowest priority of the factory in use."""
        return list(self.chosen(overrides))

    def resolve(
        self, overrides: Mapping[str, FactoryOverride] | None = None
    ) -> list[ResolvedFactory]:
        """Every accepted registration, in placement order of its type, saying whether
        it is in use or shadowed and why."""
        overrides = overrides or {}
        chosen = self.chosen(overrides)
        resolved: list[ResolvedFactory] = []
        for device_type, in_use in chosen.items():
            override = overrides.get(device_type)
            for reg in self._by_type[device_type]:
                if reg is in_use:
                    if override is not None:
                        reason = f"selected by {override.source}"
                    elif reg is self._by_type[device_type][0]:
                        reason = "highest priority for its type"
                    else:
                        reason = "highest priority among the factories that find a device"
                    resolved.append(ResolvedFactory(reg, FactoryStatus.IN_USE, reason))
                    continue
                if override is not None:
                    reason = f"{override.source} selects {in_use.origin}"
                elif reg.priority > in_use.priority:
                    reason = (
                        f"finds no device ({probe_unavailable(reg.factory)}), so "
                        f"{in_use.origin} (priority {in_use.priority}) provides {device_type}"
                    )
                else:
                    reason = f"{in_use.origin} has priority {in_use.priority} > {reg.priority}"
                resolved.append(ResolvedFactory(reg, FactoryStatus.SHADOWED, reason))
        return resolved

    def _check_overrides(self, overrides: Mapping[str, FactoryOverride]) -> None:
        for device_type, override in overrides.items():
            regs = self._by_type.get(device_type)
            if not regs:
                raise NotFoundError(
                    f"{override.source} selects plugin {override.plugin!r} for device type "
                    f"{device_type!r}, but no plugin registers a {device_type} device factory; "
                    f"the types are: {', '.join(sorted(self._by_type)) or '(none)'}; install "
                    f"the plugin that provides {device_type}, or drop the selection"
                )
            if any(r.origin.answers_to(override.plugin) for r in regs):
                continue
            names = [r.origin.plugin for r in regs]
            left_out = [
                c.rejected.origin
                for c in self._conflicts
                if c.rejected.device_type == device_type
                and c.rejected.origin.answers_to(override.plugin)
            ]
            why = (
                f" Its factory was left out: it conflicts with {self._winner_at(left_out[0])}."
                if left_out
                else ""
            )
            raise NotFoundError(
                f"{override.source} selects plugin {override.plugin!r} for device type "
                f"{device_type}, but that plugin registers no {device_type} factory in use.{why} "
                f"Plugins with a {device_type} factory: {', '.join(names)}."
                + did_you_mean(override.plugin, names)
            )

    def create_devices(
        self,
        options: DeviceOptions,
        overrides: Mapping[str, FactoryOverride] | None = None,
        *,
        strict: bool = False,
        disabled: Sequence[str] = (),
    ) -> DeviceMgr:
        """Create the devices of every factory in use, in placement order.

        A factory that finds no hardware contributes nothing. A factory that *fails*
        (raises, or returns something that is not a list of its devices) is left out too:
        it is warned about once per registry, listed in ``DeviceMgr.unavailable`` (so a
        graph that asks for its type is told why) and shown by ``kernloom devices``; only
        ``strict`` (``KERNLOOM_STRICT_PLUGINS=1``) makes it fatal. If no device at all can
        be created the error says what each factory reported (those not in use for their
        type too) and what to do: enable an installed plugin ``disabled`` names (one line
        per plugin the environment left out, with why), else install one.
        """
        devices: list[Device] = []
        unavailable: dict[str, str] = {}
        chosen = self.chosen(overrides)
        for registration in chosen.values():
            try:
                created = create_devices_checked(registration, options)
            except KernloomError as exc:
                if strict:
                    raise
                self._warn_failure(registration, str(exc))
                unavailable[registration.device_type] = str(exc)
                continue
            devices.extend(created)
            if not created:
                reason = probe_unavailable(registration.factory) or "it found no device"
                unavailable[registration.device_type] = f"{registration.origin}: {reason}"
        if not devices:
            raise NotFoundError(
                f"no device could be created: {self._why_none(chosen, unavailable)}. "
                + _no_device_advice(disabled)
            )
        return DeviceMgr(devices, unavailable=unavailable)

    def _why_none(
        self, chosen: Mapping[str, FactoryRegistration], unavailable: Mapping[str, str]
    ) -> str:
        """What every factory said, per device type: the one in use's reason, then each
        other's own (``unavailable_reason``), or that it was not used."""
        if not unavailable:
            return "no loaded plugin registers a device factory"
        parts = []
        for device_type, why in unavailable.items():
            reasons = [why]
            in_use = chosen[device_type]
            for other in self._by_type.get(device_type, ()):
                if other is in_use:
                    continue
                reason = probe_unavailable(other.factory)
                reasons.append(f"{other.origin}: {reason or f'not in use ({in_use.origin} is)'}")
            parts.append(f"{device_type} ({'; '.join(reasons)})")
        return "; ".join(parts)

    def _warn_failure(self, registration: FactoryRegistration, message: str) -> None:
        key = f"{registration.device_type}@{registration.origin}"
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(
            f"{message}; {registration.device_type} is left out and only graphs that need it "
            f"fail (`kernloom devices` shows it; KERNLOOM_STRICT_PLUGINS=1 makes it fatal)",
            KernloomPluginWarning,
            stacklevel=4,
        )

    def _winner_at(self, origin: Origin) -> str:
        for conflict in self._conflicts:
            if conflict.rejected.origin == origin:
                return f"{conflict.kept.origin} at priority {conflict.kept.priority}"
        return "another plugin"


def _no_device_advice(disabled: Sequence[str]) -> str:
    """What to do when no device exists: enable a plugin that is installed but was left
    out (naming the variables), else install a device plugin."""
    if disabled:
        return (
            f"Installed plugins were left out: {'; '.join(disabled)}. If one of them provides "
            f"the device you want, enable it: remove its name from KERNLOOM_DISABLE_PLUGINS, "
            f"or add it to KERNLOOM_PLUGINS (or unset that variable); `kernloom plugins` "
            f"shows every plugin and its state."
        )
    return (
        "Install a device plugin, e.g. `pip install kernloom-cpu-numpy`, and check "
        "`kernloom plugins`."
    )


def probe_unavailable(factory: DeviceFactory) -> str | None:
    """``factory.unavailable_reason()``, where a probe that raises (``SystemExit`` too: a
    plugin must not end the host) says so as its reason: the factory counts as
    unavailable, and every other device still works."""
    try:
        return factory.unavailable_reason()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return f"its unavailable_reason() raised {type(exc).__name__}: {exc}"


def create_devices_checked(
    registration: FactoryRegistration, options: DeviceOptions
) -> list[Device]:
    """Call a factory and check what it returns, blaming its plugin for anything wrong."""
    factory, origin = registration.factory, registration.origin
    where = f"device factory {factory.description} of {origin}"
    try:
        devices = factory.create_devices(options)
    except (KernloomError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # SystemExit too: a plugin must not end the host
        raise KernloomError(
            f"{where} failed to create {registration.device_type} devices: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(devices, list | tuple):
        raise KernloomError(
            f"{where} returned {devices!r} from create_devices; return a list of Device"
        )
    for device in devices:
        if not isinstance(device, Device):
            raise KernloomError(
                f"{where} returned {device!r}, which is not a kernloom.plugin.Device"
            )
        if device.device_type != registration.device_type:
            raise KernloomError(
                f"{where} is registered for {registration.device_type} but created {device.name} "
                f"of type {device.device_type}"
            )
    names = [device.name for device in devices]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise KernloomError(
            f"{where} created two devices named {twice[0]!r}: each device of a factory needs "
            "its own index (full_device_name(prefix, type, index))"
        )
    for device in devices:
        device.origin = origin
    return list(devices)
