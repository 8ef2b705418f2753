"""Mutation testing of the conformance kit: a kit that passes a broken device is a broken
promise.

``PLUGIN`` is a small, correct ACME device plugin (its own buffer class, not host memory;
or, with ``HOST_MEMORY``, numpy arrays in host memory as on the numpy CPU device) with
kernels for the ops the mutants touch. Each mutant plants ONE bug a vendor might make
(``MUTANT = "name"``); the kit must fail on it, and its message must say what is wrong
(the op, case or check, and the dtype where there is one). The correct plugin must pass
every check the mutants are run with.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

import kernloom.testing.conformance  # noqa: F401  (imported once: see the plugins' kit tests)

pytest_plugins = ["pytester"]

PLUGIN = '''
import threading
import time
import types

import numpy as np

import kernloom.plugin as klp
from kernloom.testing.cases.nn import conv2d_reference

ACME = "ACME"
MUTANT = ""
HOST_MEMORY = False
KERNEL_DEVICE = ACME  # the device type the kernels are registered for
FLOATS = ["float32", "float64"]
NUMBERS = ["float32", "float64", "int32", "int8"]


def bug(name):
    return MUTANT == name


class AcmeBuffer:
    """Device memory: the scaffold's buffer, a numpy array inside."""

    __slots__ = ("__weakref__", "array", "_shape")

    def __init__(self, array, shape=None):
        self.array = array
        self._shape = shape

    @property
    def shape(self):
        if bug("stale_shape") and self._shape is not None:
            return self._shape  # the shape allocated, whatever the kernel put in
        return self.array.shape

    dtype = property(lambda self: self.array.dtype)
    nbytes = property(lambda self: self.array.nbytes)


_POOL = {}


class AcmeDevice(klp.Device):
    memory_is_host = HOST_MEMORY

    def _allocate(self, shape, dtype):
        np_dtype = np.float32 if bug("allocate_ignores_dtype") else dtype.numpy_dtype
        if HOST_MEMORY:
            return np.empty(shape, np_dtype)
        if bug("pooled_copy_to_host"):
            free = _POOL.get((shape, np.dtype(np_dtype)))
            if free:
                return AcmeBuffer(free.pop())
        return AcmeBuffer(np.empty(shape, np_dtype), shape)

    def holds(self, dtype):
        if bug("holds_raises") and dtype.name == "int8":
            raise TypeError("no int8 on this firmware")  # not a KitFailure: a plugin crash
        return not (bug("holds_denies_int8") and dtype.name == "int8")

    def copy_from_host(self, array):
        if HOST_MEMORY:
            return array
        if bug("shared_copy_from_host"):
            return AcmeBuffer(np.asarray(array))  # no copy: the caller's memory
        if bug("allocate_ignores_dtype"):
            return AcmeBuffer(np.array(array, copy=True))
        buffer = self.allocate(np.shape(array), np.asarray(array).dtype)
        buffer.array[...] = array
        return buffer

    def copy_to_host(self, value):
        if HOST_MEMORY:
            return np.asarray(value)
        if bug("pooled_copy_to_host"):
            # No copy: the host array is the device buffer, which goes back to the pool
            # (and is written again) as soon as the runtime drops the value.
            import weakref

            weakref.finalize(
                value, _POOL.setdefault((value.shape, value.dtype), []).append, value.array
            )
            return value.array
        if bug("unified_copy_to_host"):
            return value.array  # host-visible device memory, handed out without a copy
        if bug("async_copy_to_host"):
            host = np.zeros(value.array.shape, value.array.dtype)
            source = value.array.copy()

            def finish():
                time.sleep(0.05)
                host[...] = source

            threading.Thread(target=finish, daemon=True).start()
            return host  # returned before the transfer finished
        return value.array.copy()

    def may_overwrite(self, value):
        if HOST_MEMORY:
            return isinstance(value, np.ndarray) and value.flags.owndata and value.flags.writeable
        return isinstance(value, AcmeBuffer) and value.array.flags.writeable

    def is_device_value(self, value):
        return isinstance(value, np.ndarray if HOST_MEMORY else AcmeBuffer)


class AcmeFactory(klp.DeviceFactory):
    def list_physical_devices(self):
        return ["/physical_device:ACME:0"]

    def create_devices(self, options, name_prefix=klp.LOCAL_PREFIX):
        return [
            AcmeDevice(
                klp.DeviceAttributes(
                    name=klp.full_device_name(name_prefix, ACME, i),
                    device_type=ACME,
                    backend="acme",
                    memory_limit=options.memory_limit.get(ACME, 1 << 30),
                )
            )
            for i in range(klp.device_count_for(options, ACME, 1))
        ]


def arr(ctx, i):
    value = ctx.input(i)
    if isinstance(value, AcmeBuffer):
        value = value.array
    value = np.asarray(value)
    if bug("strides_ignored") and not value.flags.c_contiguous:
        # A C kernel handed the data pointer, walking it as if the array were contiguous.
        strides = [value.itemsize] * value.ndim
        for axis in range(value.ndim - 2, -1, -1):
            strides[axis] = strides[axis + 1] * value.shape[axis + 1]
        value = np.lib.stride_tricks.as_strided(value, value.shape, strides)
    return value


def out(ctx, result, index=0, dtype=None):
    result = np.asarray(result)
    if dtype is None:
        dtype = ctx.signature.output_dtypes[index].numpy_dtype
    buffer = ctx.allocate_output(index, result.shape)
    (buffer if HOST_MEMORY else buffer.array)[...] = result.astype(dtype, copy=False)
    return buffer


lib = klp.KernelLibrary()
SCRATCH = {}


def binary(op, fn, types, inplace_form=None):
    @lib.kernel(op, device=KERNEL_DEVICE, type_constraints={"T": types}, inplace_form=inplace_form)
    def kernel(ctx):
        x, y = arr(ctx, 0), arr(ctx, 1)
        if bug("add_size1_as_scalar") and op == "Add" and (x.size == 1 or y.size == 1):
            # "a one-element operand is a scalar": the result takes the other's shape
            big, small = (x, y) if y.size == 1 else (y, x)
            scalar = small.reshape(())
            return out(ctx, fn(big, scalar) if small is y else fn(scalar, big))
        if bug("float64_result") and op == "Add" and x.dtype == np.float32:
            result = x.astype(np.float64) + y
            ctx.set_output(0, result if HOST_MEMORY else AcmeBuffer(result))
            return
        if bug("writes_input") and op == "Add" and x.shape == y.shape and x.dtype.kind == "f":
            np.add(x, y, out=x)  # in place, without asking the runtime
            ctx.set_output(0, ctx.input(0))
            return
        same = x.shape == np.broadcast_shapes(x.shape, y.shape)
        if bug("shared_copy_from_host") and op == "Add" and same:
            # A correct kernel that writes in place into an input the runtime forwards:
            # safe only if copy_from_host really copied.
            buffer = ctx.forward_input_or_allocate_output([0, 1], 0, x.shape)
            target = buffer if HOST_MEMORY else buffer.array
            np.add(x, y, out=target, casting="unsafe")
            return
        if bug("not_thread_safe") and op == "Add":
            shape = np.broadcast_shapes(x.shape, y.shape)
            scratch = SCRATCH.setdefault((x.shape, y.shape), np.empty(shape, x.dtype))
            np.add(x, y, out=scratch)
            time.sleep(0.0005)
            return out(ctx, scratch.copy())
        if bug("int_saturates") and op in ("Add", "Mul") and x.dtype.kind == "i":
            info = np.iinfo(x.dtype)
            wide = fn(x.astype(np.int64), y.astype(np.int64))
            return out(ctx, np.clip(wide, info.min, info.max))
        if bug("maximum_nan") and op == "Maximum":
            return out(ctx, np.where(x > y, x, y))
        if bug("floordiv_truncates") and op == "FloorDiv" and x.dtype.kind == "i":
            return out(ctx, np.trunc(x / y))
        if bug("floormod_truncates") and op == "FloorMod" and x.dtype.kind == "i":
            return out(ctx, np.fmod(x, y))
        if op in ("FloorDiv", "FloorMod") and x.dtype.kind == "i" and np.any(y == 0):
            raise klp.InvalidArgumentError("Integer division by zero")
        with np.errstate(all="ignore"):
            result = fn(x, y)
        out(ctx, result)


binary("Add", np.add, NUMBERS)
# In host memory, Sub declares its in-place form (OpKernel.inplace_form): the ufunc.
SUB_FORM = (np.add if bug("inplace_form_wrong") else np.subtract) if HOST_MEMORY else None
binary("Sub", np.subtract, NUMBERS, inplace_form=SUB_FORM)
binary("Mul", np.multiply, NUMBERS)
binary("Maximum", np.maximum, NUMBERS)
binary("FloorDiv", np.floor_divide, ["int32"])
binary("FloorMod", np.mod, ["int32"])


@lib.kernel("Less", device=KERNEL_DEVICE, type_constraints={"T": ["int32", "float32"]})
def less(ctx):
    out(ctx, np.less(arr(ctx, 0), arr(ctx, 1)))


@lib.kernel("Relu", device=KERNEL_DEVICE, type_constraints={"T": FLOATS})
def relu(ctx):
    x = arr(ctx, 0)
    if bug("relu_nan"):
        return out(ctx, np.where(x > 0, x, 0))
    if bug("relu_view") and x.size and x.min() >= 0:
        return ctx.set_output(0, ctx.input(0))  # nothing to clamp: the input is the result
    out(ctx, np.maximum(x, 0))


def _axes(ctx, x):
    axes = np.asarray(ctx.input(1)).reshape(-1)
    if axes.size and (axes.max() >= max(x.ndim, 1) or axes.min() < -max(x.ndim, 1)):
        if bug("bare_exception"):
            raise Exception("bad axis")
        raise klp.InvalidArgumentError(f"reduction index {axes.max()} out of range")
    return tuple(sorted({int(a) % x.ndim for a in axes})) if x.ndim else ()


REDUCTION = dict(
    device=KERNEL_DEVICE, host_memory=["reduction_indices"], type_constraints={"T": FLOATS}
)


@lib.kernel("Sum", **REDUCTION)
def sum_(ctx):
    x = arr(ctx, 0)
    keep = ctx.attr("keep_dims") and not bug("sum_ignores_keep_dims")
    result = np.sum(x, axis=_axes(ctx, x), keepdims=keep)
    if bug("stale_shape"):
        buffer = ctx.allocate_output(0, np.sum(x, axis=_axes(ctx, x)).shape)
        buffer.array = np.asarray(result, x.dtype)  # the buffer keeps its first shape
        return
    out(ctx, result)


@lib.kernel("Mean", **REDUCTION)
def mean(ctx):
    x = arr(ctx, 0)
    axes = _axes(ctx, x)
    total = np.sum(x.astype(np.float64), axis=axes, keepdims=ctx.attr("keep_dims"))
    count = int(np.prod([x.shape[a] for a in axes]))
    if bug("mean_empty_is_zero"):
        count = max(count, 1)
    with np.errstate(all="ignore"):
        out(ctx, total / count)


@lib.kernel("MatMul", device=KERNEL_DEVICE, type_constraints={"T": FLOATS})
def matmul(ctx):
    a, b = arr(ctx, 0), arr(ctx, 1)
    a = a.T if ctx.attr("transpose_a") else a
    b = b.T if ctx.attr("transpose_b") and not bug("matmul_ignores_transpose_b") else b
    if a.shape[1] != b.shape[0]:
        raise klp.InvalidArgumentError(f"inner dimensions differ: {a.shape} x {b.shape}")
    out(ctx, a.astype(np.float64) @ b.astype(np.float64))


@lib.kernel("Softmax", device=KERNEL_DEVICE, type_constraints={"T": FLOATS})
def softmax(ctx):
    x = arr(ctx, 0).astype(np.float64)
    axis = 0 if bug("softmax_axis0") else -1
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
        out(ctx, e / e.sum(axis=axis, keepdims=True))


@lib.kernel("Conv2D", device=KERNEL_DEVICE, type_constraints={"T": FLOATS})
def conv2d(ctx):
    x, f = arr(ctx, 0), arr(ctx, 1)
    names = ("strides", "padding", "dilations", "data_format", "explicit_paddings")
    attrs = {k: ctx.attr(k) for k in names}
    nhwc_same = attrs["padding"] == "SAME" and attrs["data_format"] == "NHWC"
    if bug("conv_same_pads_start") and nhwc_same:
        pads = []
        for axis in (1, 2):
            size, stride = x.shape[axis], attrs["strides"][axis]
            span = (f.shape[axis - 1] - 1) * attrs["dilations"][axis] + 1
            total = max((-(-size // stride) - 1) * stride + span - size, 0)
            pads.append((total, 0))  # all of it before, none after
        x = np.pad(x, [(0, 0), *pads, (0, 0)])
        attrs = {**attrs, "padding": "VALID"}
    out(ctx, conv2d_reference(attrs)(x, f))


class ZeroTimes(klp.GraphPass):
    """x * 0 is 0 (it is not: NaN * 0 and inf * 0 are NaN)."""

    name = "acme_zero_times"

    def run(self, graph, ctx):
        def zero(tensor):
            node = tensor.node
            return node.op == "Const" and not np.any(np.asarray(node.attrs["value"]))

        hits = {
            n.name: n for n in graph.nodes
            if n.op == "Mul" and n.name not in ctx.preserved and any(zero(t) for t in n.inputs)
            and n.outputs[0].shape.is_fully_defined()
        }
        if not hits:
            return graph
        rewriter = klp.GraphRewriter(graph)
        for node in graph.nodes:
            if node.name not in hits:
                rewriter.copy(node)
                continue
            tensor = node.outputs[0]
            zeros = np.zeros(tensor.shape.as_tuple(), tensor.dtype.numpy_dtype)
            const = rewriter.add(
                "Const",
                [],
                {"value": zeros, "dtype": tensor.dtype},
                name=node.name,
                exact_name=True,
                device=node.requested_device,
            )
            rewriter.alias(node, const.outputs, const)
        return rewriter.finish(ctx.preserved)


@klp.hookimpl
def kernloom_register(registry):
    registry.register_device_factory(ACME, AcmeFactory(), priority=100)
    registry.register_kernels(lib)
    if bug("graph_pass_zero_times"):
        registry.register_graph_pass(ZeroTimes(), device_type=ACME)


plugin = types.SimpleNamespace(kernloom_register=kernloom_register, KERNLOOM_API=">=1.0,<2")


def pytest_kernloom_registry(config):
    registry = klp.Registry()
    registry.register_plugin(plugin, name="acme")
    return registry
'''


def _project(pytester: pytest.Pytester, **settings: object) -> None:
    text = PLUGIN
    for name, value in settings.items():
        assert f"\n{name} = " in text, name
        text = text.replace(f"\n{name} = ", f"\n{name} = {value!r}  # was: ", 1)
    pytester.makeconftest(textwrap.dedent(text))


def _kit(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, object]]:
    path = pytester.path / "kit.json"
    result = pytester.runpytest(
        "--kernloom-device", "ACME", "-p", "no:cacheprovider", "--kernloom-report", str(path), *args
    )
    data: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
    return result, data


# (mutant, HOST_MEMORY, -k expression, what the failure message must say)
MUTANTS: list[Any] = [
    ("add_size1_as_scalar", False, "Add", ["Add float64 on ACME", "output 0 has shape"]),
    ("float64_result", False, "Add", ["Add float32 on ACME", "output 0 with dtype float64"]),
    ("writes_input", False, "Add", ["Add float32 on ACME", "wrote into input 0"]),
    ("writes_input", True, "Add", ["Add float32 on ACME", "wrote into input 0"]),
    pytest.param(
        "relu_view",
        True,
        "Relu",
        ["Relu float32 on ACME", "shares memory with input 0"],
        marks=pytest.mark.xfail(
            strict=True, reason="kit gap: the fetched output never shares the caller's memory"
        ),
    ),
    ("maximum_nan", False, "Maximum", ["Maximum float32 on ACME", "case 'Maximum-float32-nan'"]),
    ("relu_nan", False, "Relu", ["Relu float32 on ACME", "case 'Relu-float32-nan'"]),
    ("mean_empty_is_zero", False, "Mean", ["Mean float32 on ACME", "Mean-float32-empty"]),
    ("floordiv_truncates", False, "FloorDiv", ["FloorDiv int32 on ACME", "differs"]),
    ("floormod_truncates", False, "FloorMod", ["FloorMod int32 on ACME", "differs"]),
    ("sum_ignores_keep_dims", False, "Sum", ["Sum float32 on ACME", "True'"]),
    ("matmul_ignores_transpose_b", False, "MatMul", ["MatMul float32 on ACME", "True-True"]),
    ("softmax_axis0", False, "Softmax", ["Softmax float32 on ACME", "differs"]),
    ("conv_same_pads_start", False, "Conv2D", ["Conv2D float32 on ACME", "same", "differs"]),
    ("strides_ignored", True, "kernels", ["non-contiguous", "differs"]),
    ("pooled_copy_to_host", False, "device", ["copy_to_host", "changed after"]),
    ("async_copy_to_host", False, "device", ["float32 copy of a 3x4 array", "values changed"]),
    (
        "unified_copy_to_host",
        False,
        "device",
        [
            "copy of a 3x4 array",
            "copy_to_host returned changed the device's value",
            "shares memory",
        ],
    ),
    pytest.param(
        "shared_copy_from_host",
        False,
        "Add",
        ["Add", "the caller's feed"],
        marks=pytest.mark.xfail(
            strict=True, reason="kit gap: the runtime never forwards a fed value to a kernel"
        ),
    ),
    ("allocate_ignores_dtype", False, "device", ["allocation", "dtype float32, expected int32"]),
    ("holds_denies_int8", False, "device", ["holds(int8) is False", "registered for int8"]),
    # A check that the plugin's own code crashes: one line naming the check and the error
    # (it was pytest's traceback, and the summary read "cls = <class CallInfo>").
    ("holds_raises", False, "device", ["device check '", "TypeError: no int8 on this firmware"]),
    ("not_thread_safe", False, "executor", ["run from 8 threads at once", "wrong result"]),
    ("graph_pass_zero_times", False, "executor", ["graph pass 'acme_zero_times'", "changed"]),
    ("bare_exception", False, "Sum", ["Sum float32 on ACME", "InvalidArgumentError"]),
    ("int_saturates", False, "Add or Mul", ["int8 on ACME", "wraps", "differs"]),
    ("stale_shape", False, "Sum", ["Sum float32 on ACME", "value_shape"]),
    (
        "inplace_form_wrong",
        True,
        "Sub",
        ["Sub float32 on ACME", "plugin 'acme'", "case 'Sub-float32", "in-place form"],
    ),
]


def test_the_correct_plugin_passes_every_check_the_mutants_fail(
    pytester: pytest.Pytester,
) -> None:
    for host in (False, True):
        _project(pytester, HOST_MEMORY=host)
        result, data = _kit(pytester)
        assert result.ret == 0, result.stdout.str()
        summary = data["summary"]
        assert isinstance(summary, dict)
        assert summary["failures"] == []


def _id(mutant: Any) -> str:
    values = mutant.values if hasattr(mutant, "values") else mutant
    return f"{values[0]}{'-host' if values[1] else ''}"


@pytest.mark.parametrize(
    ("mutant", "host", "select", "expected"),
    MUTANTS,
    ids=[_id(m) for m in MUTANTS],
)
def test_the_kit_fails_a_mutant_naming_what_is_wrong(
    pytester: pytest.Pytester, mutant: str, host: bool, select: str, expected: list[str]
) -> None:
    _project(pytester, MUTANT=mutant, HOST_MEMORY=host)
    result, _ = _kit(pytester, "-k", select)
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    for text in expected:
        assert text in output, f"{text!r} not in the kit's output:\n{output}"


def test_kernels_for_a_device_type_no_factory_creates_fail_the_kit(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester, KERNEL_DEVICE="ACME_NPU")  # the factory makes ACME
    result, _ = _kit(pytester, "-k", "device")
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert "registers kernels for device type 'ACME_NPU'" in output, output
