"""Resource-variable kernels: the handle, reads and (atomic) assignments.

Every assignment stores a new array -- a copy for ``AssignVariableOp``, the sum for the
add/sub forms -- so a value read earlier in a step, or fetched by the caller, never
changes under its holder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernloom import KernelLibrary, OpKernel, OpKernelConstruction, OpKernelContext
from kernloom.errors import NotFoundError
from kernloom.framework.resource_mgr import DEFAULT_CONTAINER
from kernloom.framework.variable import ResourceHandle, Var, handle_of, handle_tensor
from kernloom.shapes import as_shape

__all__ = ["register"]

CPU = "CPU"


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
    return ctx.fail(
        f"variable {var.name!r} was never initialised; run its initializer first "
        f"(session.run(variable.initializer) or kl.variables_initializer())"
    )


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


def _checked_value(ctx: OpKernelContext, var: Var) -> np.ndarray[Any, Any]:
    value = np.asarray(ctx.input(1))
    if value.dtype != var.dtype.numpy_dtype:
        raise ctx.fail(
            f"cannot assign a {value.dtype} value to variable {var.name!r} of dtype "
            f"{var.dtype.name}"
        )
    if not var.shape.is_compatible_with(value.shape):
        raise ctx.fail(
            f"cannot assign a value of shape {list(value.shape)} to variable {var.name!r} "
            f"of shape {var.shape}"
        )
    return value


def assign_variable(ctx: OpKernelContext) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    value = _checked_value(ctx, var)
    with var.lock:
        var.value = value.copy()


def _update(ctx: OpKernelContext, sign: int) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    delta = _checked_value(ctx, var)
    with var.lock:
        old = var.value
        if old is None:
            raise _uninitialised(ctx, var)
        if old.shape != delta.shape:
            raise ctx.fail(
                f"cannot {'add' if sign > 0 else 'subtract'} a value of shape "
                f"{list(delta.shape)} to variable {var.name!r} of shape {list(old.shape)}"
            )
        with np.errstate(all="ignore"):  # wrap-around, as the elementwise kernels do
            var.value = np.add(old, delta) if sign > 0 else np.subtract(old, delta)


def assign_add_variable(ctx: OpKernelContext) -> None:
    _update(ctx, 1)


def assign_sub_variable(ctx: OpKernelContext) -> None:
    _update(ctx, -1)


def register(lib: KernelLibrary) -> None:
    lib.kernel("VarHandleOp", device=CPU)(VarHandleKernel)
    for op, fn in (
        ("ReadVariableOp", read_variable),
        ("VarIsInitializedOp", var_is_initialized),
        ("AssignVariableOp", assign_variable),
        ("AssignAddVariableOp", assign_add_variable),
        ("AssignSubVariableOp", assign_sub_variable),
    ):
        lib.kernel(op, device=CPU, expensive=False)(fn)
