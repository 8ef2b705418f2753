"""``KernelDef``: which op a kernel implements, where, and for which attr values.

A kernel is chosen for a node on a device when its ``device_type`` (and ``backend``, if
it names one) match the device, its ``constraints`` hold for the node's attrs and its
``label`` equals the node's ``_kernel`` attr; among those, the highest ``priority``
wins. ``host_memory_args`` are inputs or outputs the kernel reads or writes in host
memory even on an accelerator (shapes, axes): the runtime moves them there.
"""

from __future__ import annotations

from typing import Any, final

from pydantic import BaseModel, ConfigDict, Field

from kernloom.dtypes import as_dtype
from kernloom.errors import InvalidArgumentError
from kernloom.framework.attr import format_attr_value
from kernloom.framework.device_name import is_valid_device_type

__all__ = ["KernelDef", "KernelDefBuilder", "constraint_value"]


class KernelDef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    op: str
    device_type: str
    constraints: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    """Attr name -> the values this kernel accepts (DTypes for type attrs)."""
    host_memory_args: tuple[str, ...] = ()
    label: str = ""
    priority: int = 0
    backend: str | None = None
    """The array library the kernel needs (``numpy``, ``cupy``, ``torch``), or None for any
    device of ``device_type``."""

    def describe(self) -> str:
        """``MatMul on CPU [label 'einsum'] {T in float32, float64} priority 0``."""
        parts = [f"{self.op} on {self.device_type}"]
        if self.backend:
            parts.append(f"backend {self.backend}")
        if self.label:
            parts.append(f"label {self.label!r}")
        for attr, values in sorted(self.constraints.items()):
            parts.append(f"{attr} in {{{', '.join(format_attr_value(v) for v in values)}}}")
        if self.host_memory_args:
            parts.append(f"host memory: {', '.join(self.host_memory_args)}")
        parts.append(f"priority {self.priority}")
        return " ".join(parts[:1]) + (", " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def constraint_value(value: Any) -> Any:
    """An attr value as constraints hold and compare it: a list as a tuple (hashable, and
    equal whichever sequence type a node or a registration used)."""
    return tuple(value) if isinstance(value, list | tuple) else value


@final
class KernelDefBuilder:
    """``KernelDefBuilder("MatMul").device("CPU").type_constraint("T", [...]).label("x")``."""

    def __init__(self, op: str) -> None:
        if not isinstance(op, str) or not op:
            raise InvalidArgumentError(f"a kernel's op must be an op name, got {op!r}")
        self._fields: dict[str, Any] = {"op": op, "constraints": {}, "host_memory_args": ()}

    def device(self, device_type: str) -> KernelDefBuilder:
        if not isinstance(device_type, str) or not is_valid_device_type(device_type):
            raise InvalidArgumentError(
                f"kernel for {self._fields['op']}: device type {device_type!r} must be an "
                f"upper-case name such as CPU or GPU"
            )
        self._fields["device_type"] = device_type
        return self

    def type_constraint(self, attr: str, dtypes: object) -> KernelDefBuilder:
        items = [dtypes] if not isinstance(dtypes, list | tuple | set | frozenset) else list(dtypes)
        try:
            values = tuple(as_dtype(d) for d in items)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"kernel for {self._fields['op']}: type constraint on {attr!r}: {exc}"
            ) from None
        return self._constrain(attr, values)

    def attr_constraint(self, attr: str, values: object) -> KernelDefBuilder:
        """The values of ``attr`` this kernel accepts. For a list attr each value is a
        whole list (``[["BiasAdd"], ["BiasAdd", "Relu"]]`` for ``fused_ops``), kept as a
        tuple: a kernel names the exact forms it implements, as TensorFlow's
        ``AttrConstraint`` does."""
        items = values if isinstance(values, list | tuple | set | frozenset) else [values]
        return self._constrain(attr, tuple(constraint_value(v) for v in items))

    def _constrain(self, attr: str, values: tuple[Any, ...]) -> KernelDefBuilder:
        if not values:
            raise InvalidArgumentError(
                f"kernel for {self._fields['op']}: constraint on {attr!r} allows no value"
            )
        self._fields["constraints"][attr] = values
        return self

    def host_memory(self, *args: str) -> KernelDefBuilder:
        self._fields["host_memory_args"] = (*self._fields["host_memory_args"], *args)
        return self

    def label(self, label: str) -> KernelDefBuilder:
        if not isinstance(label, str):
            raise InvalidArgumentError(f"a kernel label must be a string, got {label!r}")
        self._fields["label"] = label
        return self

    def priority(self, priority: int) -> KernelDefBuilder:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidArgumentError(f"a kernel priority must be an int, got {priority!r}")
        self._fields["priority"] = priority
        return self

    def backend(self, backend: str) -> KernelDefBuilder:
        self._fields["backend"] = backend
        return self

    def build(self) -> KernelDef:
        if "device_type" not in self._fields:
            raise InvalidArgumentError(
                f"kernel for {self._fields['op']} names no device type; call .device('CPU')"
            )
        return KernelDef(**self._fields)
