"""What the kit runs on one device type: decided once, at collection, from the registry.

The device *claims* what its kernels are registered for: the dtypes in the type
constraints of every kernel of its type (and backend). Each case of the shared table
(``kernloom.testing.cases``) either has a kernel on the device -- then it runs -- or it
does not, and is reported as "no kernel" rather than failing. A labelled case runs only
where the device has a kernel with that label; elsewhere it is left out altogether.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kernloom.dtypes import DType, as_dtype
from kernloom.environment import DEVICE_FACTORY
from kernloom.errors import KernloomError
from kernloom.framework.device import Device, DeviceOptions
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.kernel_def import constraint_value
from kernloom.framework.kernel_registry import KernelRegistration, NoKernelError
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, NodeDef
from kernloom.registry import Registry
from kernloom.testing.cases import Case, cases
from kernloom.testing.cases.kit_edges import error_cases
from kernloom.testing.conformance.selection import shadowed_factory

__all__ = [
    "NODE",
    "PROBE_PLUGIN",
    "KernelCase",
    "KitPlan",
    "NoKernel",
    "case_dtypes",
    "describe_dtype",
]

PROBE_PLUGIN = "kernloom_conformance_probe"
"""The name under which the kit registers its own op and kernel into the registry."""
NODE = "op"
"""The name of the node a case runs as (as in ``kernloom.testing.run_op``)."""


def case_dtypes(case: Case) -> list[DType | list[DType]]:
    """The dtypes of a case's inputs, a list for an ``N * T`` argument."""
    return [
        [as_dtype(np.asarray(v).dtype) for v in item]
        if isinstance(item, list)
        else as_dtype(np.asarray(item).dtype)
        for item in case.inputs
    ]


def describe_dtype(attrs: dict[str, Any], inputs: list[DType | list[DType]]) -> str:
    """The dtype a case is reported under: its ``T``, else its type attrs in order
    (``float32->int32`` for a Cast), else its first input's."""
    if isinstance(attrs.get("T"), DType):
        return str(attrs["T"].name)
    typed = [v.name for k, v in attrs.items() if isinstance(v, DType) and not k.startswith("_")]
    if typed:
        return "->".join(typed)
    for item in inputs:
        first = item[0] if isinstance(item, list) and item else item
        if isinstance(first, DType):
            return first.name
    return "none"


@dataclass(frozen=True, slots=True)
class KernelCase:
    """One case of the table that has a kernel on the device."""

    case: Case
    dtype: str
    registration: KernelRegistration

    @property
    def op(self) -> str:
        return self.case.op

    @property
    def label(self) -> str:
        return self.case.label


@dataclass(frozen=True, slots=True)
class NoKernel:
    """A case the device has no kernel for, and why (the registry's own words)."""

    op: str
    dtype: str
    label: str
    reason: str


@dataclass
class KitPlan:
    """The registry, the device under test, and what runs on it."""

    registry: Registry
    device_type: str
    devices: DeviceMgr
    """Every device the registry creates; the kit's checks use these, never make their own."""
    kernel_cases: list[KernelCase] = field(default_factory=list)
    no_kernel: list[NoKernel] = field(default_factory=list)
    broken: list[tuple[Case, str]] = field(default_factory=list)
    """Cases whose kernel lookup itself failed (a priority tie): failures, not gaps."""
    error_cases: list[KernelCase] = field(default_factory=list)
    """Bad inputs (``kernloom.testing.cases.kit_edges.error_cases``) for an op with a kernel
    on the device: the run must fail with ``InvalidArgumentError``."""
    only_plugin: str | None = None
    """Check only the kernels this plugin registered (entry-point or distribution name):
    a kernel library's own, on a device another plugin provides."""

    @classmethod
    def build(
        cls, registry: Registry, device_type: str, *, only_plugin: str | None = None
    ) -> KitPlan:
        """Create the devices and sort the case table into what runs and what has no kernel.

        Raises ``KernloomError`` naming the type and what is installed when no plugin
        provides a device of ``device_type``.
        """
        devices = registry.create_devices(DeviceOptions())
        found = [d for d in devices if d.device_type == device_type]
        if not found:
            types = sorted({d.device_type for d in devices})
            raise KernloomError(
                f"--kernloom-device {device_type}: no device of type {device_type} was created; "
                f"devices: {', '.join(types) or '(none)'}. Install the plugin that provides "
                f"{device_type} (`kernloom devices` lists what the installed plugins create), "
                f"or give the kit an isolated registry through the pytest_kernloom_registry hook."
            )
        plan = cls(registry, device_type, devices, only_plugin=only_plugin)
        if only_plugin is not None and not any(plan._mine(r) for r in plan.registrations()):
            shadowed = shadowed_factory(registry, device_type, only_plugin)
            hint = (
                f"; its {device_type} factory is shadowed by another plugin's, whose devices "
                f"its kernels do not run on: select it with "
                f"{DEVICE_FACTORY}={device_type}={only_plugin} (or in the registry the "
                f"pytest_kernloom_registry hook or --kernloom-registry gives the kit)"
                if shadowed is not None
                else ""
            )
            raise KernloomError(
                f"--kernloom-plugin {only_plugin}: no kernel for {device_type} comes from a "
                f"plugin of that name; plugins: "
                + ", ".join(sorted({r.name for r in registry.plugins}))
                + hint
            )
        table = list(cases())
        labelled = {(c.op, c.label) for c in table if c.label}
        for case in table:
            plan._sort(case)
            if not case.label:
                # A label the table has no case for is checked on the op's plain cases.
                for label in sorted(plan.labels(case.op)):
                    if (case.op, label) not in labelled:
                        plan._sort(replace(case, label=label, id=f"{case.id}[{label}]"))
        for case in error_cases():
            plan._sort(case, errors=True)
        return plan

    def _mine(self, registration: KernelRegistration) -> bool:
        origin = registration.origin
        return self.only_plugin in (origin.plugin, origin.distribution)

    def _sort(self, case: Case, *, errors: bool = False) -> None:
        op_def = self.registry.op_def(case.op)
        inputs = case_dtypes(case)
        attrs = op_def.infer_attrs(inputs, case.attrs, NODE)
        dtype = describe_dtype(attrs, inputs)
        if case.label:
            if case.label not in self.labels(case.op):
                return  # a label this device does not have: not its business
            attrs[KERNEL_LABEL_ATTR] = case.label
        node = NodeDef(name=NODE, op=case.op, attrs=attrs)
        try:
            found = self.registry.find_kernel(node, self.device_type, self.device.backend)
        except NoKernelError as exc:
            reason = str(exc).split(". Registered kernels", 1)[0]
            if self.only_plugin is None and not errors:
                self.no_kernel.append(NoKernel(case.op, dtype, case.label, reason))
            return
        except KernloomError as exc:
            if not errors:
                self.broken.append((case, str(exc)))
            return
        if self.only_plugin is not None and not self._mine(found):
            return  # another plugin's kernel: not what this run checks
        undeclared = [a for a in case.declared if not _declares(found, a, attrs[a])]
        if undeclared:
            if self.only_plugin is None and not errors:
                reason = f"its kernel does not declare {', '.join(undeclared)} of this case"
                self.no_kernel.append(NoKernel(case.op, dtype, case.label, reason))
            return
        (self.error_cases if errors else self.kernel_cases).append(KernelCase(case, dtype, found))

    @property
    def device(self) -> Device:
        """The device under test: the first of its type."""
        return next(d for d in self.devices if d.device_type == self.device_type)

    # -- what the device registers ---------------------------------------------------------------

    def registrations(self) -> Iterator[KernelRegistration]:
        """Every kernel registered for the device's type and backend (but the kit's own)."""
        for registration in self.registry.kernels.kernels():
            kernel_def = registration.kernel_def
            if registration.origin.plugin == PROBE_PLUGIN:
                continue
            if kernel_def.device_type != self.device_type:
                continue
            if kernel_def.backend is not None and kernel_def.backend != self.device.backend:
                continue
            yield registration

    def labels(self, op: str) -> set[str]:
        """The labels of ``op``'s kernels on the device."""
        return {r.kernel_def.label for r in self.registrations() if r.kernel_def.op == op} - {""}

    def claimed_dtypes(self) -> list[DType]:
        """Every dtype a kernel of the device is registered for, in a fixed order."""
        claimed: dict[str, DType] = {}
        for registration in self.registrations():
            for values in registration.kernel_def.constraints.values():
                for value in values:
                    if isinstance(value, DType) and value.numpy_dtype.kind != "O":  # not resource
                        claimed.setdefault(value.name, value)
        return [claimed[name] for name in sorted(claimed)]

    def ops_without_cases(self) -> list[str]:
        """Ops the device has kernels for (from the plugin checked) that the case table does
        not cover."""
        covered = {kc.op for kc in self.kernel_cases}
        ops = {
            r.kernel_def.op
            for r in self.registrations()
            if self.only_plugin is None or self._mine(r)
        }
        return sorted(ops - covered)


def _declares(found: KernelRegistration, attr: str, value: Any) -> bool:
    """Whether the kernel lists ``value`` among its constraints on ``attr``."""
    allowed = found.kernel_def.constraints.get(attr)
    return allowed is not None and constraint_value(value) in allowed
