"""Resource-variable kernels for any device: the handle, reads and (atomic) assignments.

The logic (lookup, initialisation, dtype and shape checks, the per-variable lock) is the
same everywhere; only four array operations depend on the device's array library, and a
plugin passes them as ``VariableArrays`` (``NUMPY_ARRAYS`` for host memory). Handles
live in host memory on every device, as TensorFlow's GPU resource kernels declare.

Every assignment stores a new array -- a copy for ``AssignVariableOp``, the sum for the
add/sub forms -- so a value read earlier in a step, or fetched by the caller, never
changes under its holder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernloom.dtypes import DType, as_dtype
from kernloom.errors import NotFoundError
from kernloom.framework.kernel_registry import KernelLibrary
from kernloom.framework.op_kernel import OpKernel, OpKernelConstruction, OpKernelContext
from kernloom.framework.resource_mgr import DEFAULT_CONTAINER
from kernloom.framework.variable import ResourceHandle, Var, handle_of, handle_tensor
from kernloom.shapes import as_shape

__all__ = ["NUMPY_ARRAYS", "VariableArrays", "register_variable_kernels"]


@dataclass(frozen=True, slots=True)
class VariableArrays:
    """What the variable kernels need of a device's array library."""

    dtype_of: Callable[[Any], DType]
    copy: Callable[[Any], Any]
    add: Callable[[Any, Any], Any]
    subtract: Callable[[Any, Any], Any]


def _numpy_add(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):  # wrap-around, as the elementwise kernels do
        return np.add(a, b)


def _numpy_subtract(a: Any, b: Any) -> Any:
    with np.errstate(all="ignore"):
        return np.subtract(a, b)


NUMPY_ARRAYS = VariableArrays(
    dtype_of=lambda value: as_dtype(np.asarray(value).dtype),
    copy=lambda value: np.array(value, copy=True),
    add=_numpy_add,
    subtract=_numpy_subtract,
)


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


def _checked_value(ctx: OpKernelContext, var: Var, arrays: VariableArrays) -> Any:
    value = ctx.input(1)
    dtype = arrays.dtype_of(value)
    if dtype is not var.dtype:
        raise ctx.fail(
            f"cannot assign a {dtype.name} value to variable {var.name!r} of dtype {var.dtype.name}"
        )
    if not var.shape.is_compatible_with(value.shape):
        raise ctx.fail(
            f"cannot assign a value of shape {list(value.shape)} to variable {var.name!r} "
            f"of shape {var.shape}"
        )
    return value


def _assign(arrays: VariableArrays) -> Callable[[OpKernelContext], None]:
    def assign_variable(ctx: OpKernelContext) -> None:
        var = _var(ctx)
        _check_dtype(ctx, var)
        value = arrays.copy(_checked_value(ctx, var, arrays))
        with var.lock:
            var.value = value

    return assign_variable


def _update(ctx: OpKernelContext, sign: int, arrays: VariableArrays) -> None:
    var = _var(ctx)
    _check_dtype(ctx, var)
    delta = _checked_value(ctx, var, arrays)
    with var.lock:
        old = var.value
        if old is None:
            raise _uninitialised(ctx, var)
        if tuple(old.shape) != tuple(delta.shape):
            raise ctx.fail(
                f"cannot {'add' if sign > 0 else 'subtract'} a value of shape "
                f"{list(delta.shape)} to variable {var.name!r} of shape {list(old.shape)}"
            )
        var.value = arrays.add(old, delta) if sign > 0 else arrays.subtract(old, delta)


def _updater(sign: int, arrays: VariableArrays) -> Callable[[OpKernelContext], None]:
    def update(ctx: OpKernelContext) -> None:
        _update(ctx, sign, arrays)

    update.__qualname__ = "assign_add_variable" if sign > 0 else "assign_sub_variable"
    return update


def register_variable_kernels(
    lib: KernelLibrary,
    device_type: str,
    arrays: VariableArrays,
    *,
    backend: str | None = None,
    types: tuple[DType, ...] | None = None,
) -> None:
    """The six resource-variable kernels for ``device_type``; ``types`` limits the
    variables' dtypes to those the array library handles (all when None)."""
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
    kernel("AssignVariableOp", ("resource",), every)(_assign(arrays))
    kernel("AssignAddVariableOp", ("resource",), numeric)(_updater(1, arrays))
    kernel("AssignSubVariableOp", ("resource",), numeric)(_updater(-1, arrays))
