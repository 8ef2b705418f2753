"""Resource-variable kernels for any device: the handle, reads and (atomic) assignments.

The logic (lookup, initialisation, dtype and shape checks, the per-variable lock) is the
same everywhere; what depends on the device's array type -- a value's dtype and shape, a
copy, an addition -- is asked of the device through its array protocol
(``Device.value_dtype``, ``value_shape``, ``copy_value``, ``update_value``), so the same
kernels serve every device. Handles live in host memory on every device, as
TensorFlow's GPU resource kernels declare.

Every assignment stores a new array -- a copy for ``AssignVariableOp``, the sum for the
add/sub forms -- so a value read earlier in a step, or fetched by the caller, never
changes under its holder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom.dtypes import DType
from kernloom.errors import Hint, NotFoundError, Setting
from kernloom.framework.kernel_registry import KernelLibrary
from kernloom.framework.op_kernel import OpKernel, OpKernelConstruction, OpKernelContext
from kernloom.framework.resource_mgr import DEFAULT_CONTAINER
from kernloom.framework.variable import ResourceHandle, Var, handle_of, handle_tensor
from kernloom.shapes import as_shape

__all__ = ["register_variable_kernels"]


class VarHandleKernel(OpKernel):
    """The handle; creates the (uninitialised) variable in the step's ResourceMgr."""

    is_expensive = False

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._handle = ResourceHandle(
            ctx.attr("container") or DEFAULT_CONTAINER,
            ctx.attr("shared_name") or ctx.node_name,
            ctx.device.name,
            ctx.attr("dtype"),
            as_shape(ctx.attr("shape")),
        )
        self._value = handle_tensor(self._handle)

    def compute(self, ctx: OpKernelContext) -> None:
        handle = self._handle
        var = ctx.resource_mgr.lookup_or_create(
            handle.name,
            Var,
            lambda: Var(handle.name, handle.dtype, handle.shape),
            handle.container,
        )
        if var.dtype is not handle.dtype:
            raise ctx.fail(
                f"variable {handle.name!r} already exists with dtype {var.dtype.name}, but "
                f"this handle declares {handle.dtype.name}; give one of them another name"
            )
        ctx.set_output(0, self._value)


def _var(ctx: OpKernelContext) -> Var:
    handle = handle_of(ctx.input(0))
    try:
        return ctx.resource_mgr.lookup(handle.name, Var, handle.container)
    except NotFoundError:
        raise ctx.fail(
            f"variable {handle.name!r} does not exist in this session (container "
            f"{handle.container!r}); run its VarHandleOp in this session first"
        ) from None


def _uninitialised(ctx: OpKernelContext, var: Var) -> Exception:
    error = ctx.fail(f"variable {var.name!r} was never initialised in this session.")
    error.hint = Hint("Run its initializer first: {init}.", init=Setting("initializer", var.name))
    return error


def _check_dtype(ctx: OpKernelContext, var: Var) -> None:
    dtype = ctx.attr("dtype")
    if dtype is not var.dtype:
        raise ctx.fail(
            f"variable {var.name!r} holds {var.dtype.name}, but this op uses {dtype.name}"
        )


def read_variable(ctx: OpKernelContext) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    value = var.value
    if value is None:
        raise _uninitialised(ctx, var)
    ctx.set_output(0, value)


def var_is_initialized(ctx: OpKernelContext) -> None:
    handle = handle_of(ctx.input(0))
    try:
        var = ctx.resource_mgr.lookup(handle.name, Var, handle.container)
    except NotFoundError:
        ctx.set_output(0, np.array(False))
        return
    ctx.set_output(0, np.array(var.value is not None))


def _checked_value(ctx: OpKernelContext, var: Var) -> Any:
    value = ctx.input(1)
    device = ctx.device
    dtype = device.output_dtype(value)
    if dtype is not var.dtype:
        shown = dtype.name if dtype is not None else type(value).__name__
        raise ctx.fail(
            f"cannot assign a {shown} value to variable {var.name!r} of dtype {var.dtype.name}"
        )
    shape = device.value_shape(value)
    if not var.shape.is_compatible_with(shape):
        raise ctx.fail(
            f"cannot assign a value of shape {shape.as_list()} to variable {var.name!r} "
            f"of shape {var.shape}"
        )
    return value


def assign_variable(ctx: OpKernelContext) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    value = ctx.device.copy_value(_checked_value(ctx, var))
    with var.lock:
        var.value = value


def _update(ctx: OpKernelContext, subtract: bool) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    delta = _checked_value(ctx, var)
    device = ctx.device
    with var.lock:
        old = var.value
        if old is None:
            raise _uninitialised(ctx, var)
        old_shape, delta_shape = device.value_shape(old), device.value_shape(delta)
        if old_shape.as_list() != delta_shape.as_list():
            raise ctx.fail(
                f"cannot {'subtract' if subtract else 'add'} a value of shape "
                f"{delta_shape.as_list()} to variable {var.name!r} of shape {old_shape.as_list()}"
            )
        var.value = device.update_value(old, delta, subtract=subtract)


def assign_add_variable(ctx: OpKernelContext) -> None:
    _update(ctx, subtract=False)


def assign_sub_variable(ctx: OpKernelContext) -> None:
    _update(ctx, subtract=True)


def register_variable_kernels(
    lib: KernelLibrary,
    device_type: str,
    *,
    backend: str | None = None,
    types: tuple[DType, ...] | None = None,
) -> None:
    """The six resource-variable kernels for ``device_type``; ``types`` limits the
    variables' dtypes to those the device's array type handles (all when None)."""
    every = {"dtype": types} if types is not None else None
    numeric = {"dtype": tuple(d for d in types if d.is_numeric)} if types is not None else None

    def kernel(op: str, host_memory: tuple[str, ...], constraints: Any) -> Any:
        return lib.kernel(
            op,
            device=device_type,
            backend=backend,
            host_memory=host_memory,
            type_constraints=constraints,
            expensive=False,
        )

    kernel("VarHandleOp", ("resource",), every)(VarHandleKernel)
    kernel("ReadVariableOp", ("resource",), every)(read_variable)
    kernel("VarIsInitializedOp", ("resource", "is_initialized"), None)(var_is_initialized)
    kernel("AssignVariableOp", ("resource",), every)(assign_variable)
    kernel("AssignAddVariableOp", ("resource",), numeric)(assign_add_variable)
    kernel("AssignSubVariableOp", ("resource",), numeric)(assign_sub_variable)
