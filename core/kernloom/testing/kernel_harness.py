"""Run one kernel on given inputs, without a graph or an executor.

``run_kernel("MatMul", [a, b], {"transpose_b": True})`` infers the type attrs from the
inputs (as the graph builder will), looks the kernel up exactly as the runtime does
(device type, backend, constraints, label, priority), builds it, runs it through the
device and returns the outputs as numpy arrays. Inputs listed in ``forwardable`` are
handed over as device-owned buffers nobody else holds, the way the executor hands over a
value whose last consumer is this node, so buffer forwarding can be tested.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernloom.dtypes import DType, as_dtype
from kernloom.framework.device import Device, DeviceOptions
from kernloom.framework.device_mgr import DeviceMgr
from kernloom.framework.kernel_registry import run_compute
from kernloom.framework.node_def import KERNEL_LABEL_ATTR, NodeDef
from kernloom.framework.op_kernel import OpKernel, OpKernelContext
from kernloom.registry import Registry, default_registry

__all__ = ["KernelRun", "run_kernel"]

_devices: weakref.WeakKeyDictionary[Registry, DeviceMgr] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class KernelRun:
    outputs: list[np.ndarray[Any, Any]]
    forwarded: list[tuple[int, int]]
    """(input, output) pairs whose buffer the kernel reused."""
    kernel: OpKernel
    node: NodeDef


def _device_for(registry: Registry, device: Device | str) -> Device:
    if isinstance(device, Device):
        return device
    mgr = _devices.get(registry)
    if mgr is None:
        mgr = registry.create_devices(DeviceOptions())
        _devices[registry] = mgr
    return mgr.lookup(device)


def run_kernel(
    op: str,
    inputs: Sequence[object],
    attrs: Mapping[str, object] | None = None,
    *,
    registry: Registry | None = None,
    device: Device | str = "CPU:0",
    label: str = "",
    forwardable: Sequence[int] = (),
    name: str | None = None,
) -> KernelRun:
    """Run ``op``'s kernel once. A list argument (``N * T``) takes a Python list of arrays."""
    registry = registry if registry is not None else default_registry()
    target = _device_for(registry, device)
    node_name = name or op.lower()
    op_def = registry.op_def(op)
    arrays: list[np.ndarray[Any, Any] | list[np.ndarray[Any, Any]]] = [
        [np.asarray(v) for v in item] if isinstance(item, list) else np.asarray(item)
        for item in inputs
    ]
    dtypes: list[DType | list[DType]] = [
        [as_dtype(a.dtype) for a in item] if isinstance(item, list) else as_dtype(item.dtype)
        for item in arrays
    ]
    full_attrs = op_def.infer_attrs(dtypes, dict(attrs or {}), node_name)
    if label:
        full_attrs[KERNEL_LABEL_ATTR] = label
    node = NodeDef(name=node_name, op=op, attrs=full_attrs)
    kernel = registry.create_kernel(node, target)
    flat = [a for item in arrays for a in (item if isinstance(item, list) else [item])]
    values: list[Any] = []
    for index, array in enumerate(flat):
        if index in kernel.signature.host_memory_inputs:
            values.append(array)
        elif index in forwardable:
            owned = target.allocate(array.shape, array.dtype)
            owned[...] = array
            values.append(owned)
            del owned  # the context must be the only holder for forwarding to be allowed
        else:
            values.append(target.copy_from_host(array))
    del flat, arrays
    ctx = OpKernelContext(kernel, values, target, forwardable=forwardable)
    del values
    run_compute(kernel, ctx)
    outputs = [
        np.asarray(v) if i in kernel.signature.host_memory_outputs else target.copy_to_host(v)
        for i, v in enumerate(ctx.outputs())
    ]
    return KernelRun(outputs, list(ctx.forwarded), kernel, node)
