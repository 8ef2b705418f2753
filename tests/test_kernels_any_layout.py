"""Every CPU kernel gives the same outputs whatever the memory layout of its inputs.

On the CPU device values are numpy arrays that need not be in C order: the torch plugin's
convolutions and poolings return NCHW images in NHWC memory, Transpose, Pad, ConcatV2 and
the elementwise kernels keep their inputs' memory order, and Reshape and the slicing
kernels return views. So a kernel may see its inputs in any dense axis order, or as a
strided view with gaps. Each check here runs one kernel on C-order inputs, then on the
same values stored otherwise (``layout_helpers.in_order``: every axis permutation for the
ranks up to 4, or a few of them; views of a larger buffer taken with a step), and asserts
the outputs are the same: equal for the ops that compute each element the same way
whatever the layout, close (1e-5 relative) where the order of a sum may change.

Three kernels per op where they exist: the default registry's (the torch plugin's CPU
kernels where they outrank numpy's: oneDNN convolutions, packed products, torch's
softmax, concat and transpose), the numpy plugin's alone, and the torch kernels labelled
``torch``. The reference table (``kernloom.testing.cases``) gives every op its inputs;
the targeted tests below add the shapes that take the size-dependent paths (torch's
fused elementwise above ``SMALL_ELEMENTWISE``, softmax over short rows, products for the
GEMM libraries, convolutions with real channel counts).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_helpers import in_order
from runtime_helpers import make_registry

import kernloom as kl
from kernloom.registry import Registry, default_registry
from kernloom.testing import run_kernel
from kernloom.testing.cases import Case, cases
from kernloom_gpu_torch.kernels import CPU_LABEL, CPU_LABELLED_OPS

Array = np.ndarray[Any, Any]
Inputs = list[Any]

DEFAULT = default_registry()
NUMPY = make_registry()
"""The numpy plugin alone: its kernels, which the torch plugin's outrank in ``DEFAULT``."""

INEXACT = {
    "AvgPool",
    "BatchMatMulV2",
    "Conv2D",
    "Conv2DBackpropInput",
    "Cumsum",
    "DepthwiseConv2dNative",
    "Einsum",
    "FusedBatchNormV3",
    "LRN",
    "LogSoftmax",
    "MatMul",
    "Mean",
    "Prod",
    "ResizeBilinear",
    "Softmax",
    "Sum",
    "_FusedConv2D",
    "_FusedElementwise",
    "_FusedMatMul",
}
"""Ops whose float results may differ in the last bits with the layout: the order of a
sum (a reduction, a product, a convolution's taps) or a library's blocking follows it."""

TRANSCENDENTAL = {
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atan2",
    "Atanh",
    "Cos",
    "Cosh",
    "Elu",
    "Erf",
    "Erfc",
    "Exp",
    "Expm1",
    "Log",
    "Log1p",
    "Pow",
    "Selu",
    "Sigmoid",
    "Sin",
    "Sinh",
    "Softplus",
    "Tan",
    "Tanh",
    "Xlogy",
    "Xlog1py",
}
"""Functions whose vectorized loop (contiguous operands) and strided loop (any other)
may round differently, in torch (SLEEF) and in numpy's SIMD ufuncs alike: one ulp apart
is the same value computed, not a layout bug."""


# -- layouts ------------------------------------------------------------------------------


def gappy(value: Array, offset: int = 1) -> Array:
    """``value``'s values as a view of a larger buffer, every other element along each
    axis from ``offset`` on (strides with gaps, a start not at the buffer's start)."""
    big = np.zeros(tuple(2 * n + offset for n in value.shape), value.dtype)
    view = big[tuple(slice(offset, None, 2) for _ in value.shape)]
    view[...] = value
    return view


def flipped(value: Array) -> Array:
    """``value``'s values as a view with every stride negative (``x[::-1, ::-1]``)."""
    index = (slice(None, None, -1),) * value.ndim
    return np.ascontiguousarray(value[index])[index]


def orders(rank: int) -> list[tuple[int, ...]]:
    """The memory orders to try for a rank: every permutation up to rank 4, else the
    reversed, the channels-last and a rotated one."""
    if rank <= 4:
        return [p for p in itertools.permutations(range(rank)) if p != tuple(range(rank))]
    axes = list(range(rank))
    return [tuple(axes[::-1]), (0, *axes[2:], 1), (*axes[1:], 0)]


def channels_last(rank: int) -> list[int]:
    """``[0, 2, ..., rank-1, 1]``: an NCHW image in NHWC memory, as oneDNN gives it."""
    return [0, *range(2, rank), 1] if rank > 2 else list(range(rank))[::-1]


def _map(inputs: Inputs, fn: Callable[[int, Array], Array]) -> Inputs:
    """``fn(position, array)`` of every array in ``inputs`` (list arguments element-wise)."""
    out: Inputs = []
    position = 0
    for item in inputs:
        if isinstance(item, list):
            out.append([fn(position + k, np.asarray(v)) for k, v in enumerate(item)])
            position += len(item)
        else:
            out.append(fn(position, np.asarray(item)))
            position += 1
    return out


def _arrays(inputs: Inputs) -> list[Array]:
    return [np.asarray(v) for item in inputs for v in (item if isinstance(item, list) else [item])]


def variants(inputs: Inputs, *, every_order: bool) -> Iterator[tuple[str, Inputs]]:
    """``inputs`` with the same values in other layouts, named: every input of the highest
    rank in each memory order (``every_order``) or in the reversed, channels-last and
    rotated orders; each input alone reversed (operands in differing layouts); every
    input a gappy view, and a gappy view of the reversed order."""
    arrays = _arrays(inputs)
    top = max((a.ndim for a in arrays), default=0)
    if top < 1:
        return
    if top >= 2:
        axes = list(range(top))
        tried = (
            orders(top)
            if every_order
            else [tuple(axes[::-1]), tuple(channels_last(top)), (*axes[1:], 0)]
        )

        def reversed_order(a: Array) -> Array:
            return in_order(a, list(range(a.ndim))[::-1]) if a.ndim >= 2 else a

        for order in dict.fromkeys(tried):
            yield (
                f"order{list(order)}",
                _map(
                    inputs,
                    lambda _, a, o=order: (
                        in_order(a, list(o)) if a.ndim == top else reversed_order(a)
                    ),
                ),
            )
        big = [i for i, a in enumerate(arrays) if a.ndim >= 2]
        if len(big) > 1:
            for i in big:
                yield (
                    f"only-input{i}-reversed",
                    _map(inputs, lambda k, a, i=i: reversed_order(a) if k == i else a),
                )
        yield "gappy-reversed", _map(inputs, lambda _, a: gappy(reversed_order(a)) if a.ndim else a)
    yield "gappy", _map(inputs, lambda _, a: gappy(a) if a.ndim else a)
    yield "flipped", _map(inputs, lambda _, a: flipped(a) if a.ndim else a)


# -- running and comparing ----------------------------------------------------------------


def assert_same(got: list[Array], want: list[Array], exact: bool, what: str) -> None:
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        where = f"{what}, output {k}"
        assert g.shape == w.shape, f"{where}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{where}: dtype {g.dtype} != {w.dtype}"
        if exact or g.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w, err_msg=where)
        else:
            tol = 4e-3 if g.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=where)


def _kernels(op: str, label: str) -> list[tuple[str, Registry, str]]:
    """(name, registry, label) of each kernel of ``op`` to check."""
    kernels = [("default", DEFAULT, label), ("numpy", NUMPY, label)]
    if not label and op in CPU_LABELLED_OPS:
        kernels.append((CPU_LABEL, DEFAULT, CPU_LABEL))
    return kernels


def check_layouts(
    op: str,
    inputs: Inputs,
    attrs: dict[str, Any] | None = None,
    *,
    label: str = "",
    exact: bool | None = None,
    every_order: bool = True,
    kernels: Sequence[tuple[str, Registry, str]] | None = None,
    expected: list[Array] | None = None,
) -> int:
    """Run ``op`` on ``inputs`` in C order and in each of ``variants``, with each kernel
    of ``kernels`` (default: ``_kernels``); the outputs must match the C-order run's
    (and ``expected`` where given). Kernels that refuse the C-order inputs (no kernel for
    the dtype, an error case) are skipped. The number of kernels run."""
    exact = op not in INEXACT | TRANSCENDENTAL if exact is None else exact
    ran = 0
    for name, registry, kernel_label in kernels or _kernels(op, label):
        try:
            base = run_kernel(op, inputs, attrs, registry=registry, label=kernel_label).outputs
        except (kl.KernloomError, ValueError, TypeError):
            continue
        ran += 1
        if expected is not None:
            assert_same(base, expected, False, f"{op} [{name}] C order vs reference")
        for variant, values in variants(inputs, every_order=every_order):
            what = f"{op} [{name}] {variant}"
            try:
                got = run_kernel(op, values, attrs, registry=registry, label=kernel_label).outputs
            except Exception as e:  # a crash only for this layout is the bug reported
                raise AssertionError(f"{what}: {type(e).__name__}: {e}") from e
            assert_same(got, base, exact, what)
    return ran


# -- the whole reference table, three layouts each ----------------------------------------

_SKIP_OPS = {"Const", "Placeholder", "PlaceholderWithDefault", "Identity", "IdentityN"}


def _table() -> dict[str, list[Case]]:
    table: dict[str, list[Case]] = {}
    for case in cases():
        if case.op not in _SKIP_OPS and any(a.ndim for a in _arrays(case.inputs)):
            table.setdefault(case.op, []).append(case)
    return table


TABLE = _table()


@pytest.mark.parametrize("op", sorted(TABLE))
def test_every_case_of_the_table_gives_the_same_outputs_in_any_layout(op: str) -> None:
    """The reference table's cases of ``op`` (every dtype, attr and edge it covers), in the
    reversed, channels-last and rotated orders, with operands in differing orders, and as
    gappy views, on each kernel of the op."""
    ran = 0
    for case in TABLE[op]:
        ran += check_layouts(case.op, case.inputs, case.attrs, label=case.label, every_order=False)
    assert ran > 0, f"no CPU kernel ran any case of {op}"


# -- targeted: every memory order, and the shapes of the size-dependent paths -------------

RNG = np.random.default_rng(7)


def floats(*shape: int, dtype: Any = np.float32) -> Array:
    return RNG.standard_normal(shape).astype(dtype)


def i32(*values: Any) -> Array:
    return np.array(values, np.int32)


@pytest.mark.parametrize("op", ["AddV2", "Sub", "Mul", "Maximum", "SquaredDifference", "Pow"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_binary_ops_broadcast_between_operands_in_differing_orders(op: str, dtype: Any) -> None:
    x = (RNG.uniform(0.5, 2, (2, 3, 4, 5)) * (1 if dtype != np.int32 else 4)).astype(dtype)
    for other in [(2, 3, 4, 5), (1, 3, 1, 5), (2, 1, 4, 1), (4, 5), (5,)]:
        y = (RNG.uniform(0.5, 2, other) * (1 if dtype != np.int32 else 3)).astype(dtype)
        assert check_layouts(op, [x, y]) >= 1
        assert check_layouts(op, [y, x]) >= 1


@pytest.mark.parametrize("op", ["Relu", "Tanh", "Sigmoid", "Exp", "Neg", "Abs", "Square", "Relu6"])
def test_unary_ops_in_every_order(op: str) -> None:
    check_layouts(op, [floats(2, 3, 4, 5)])
    check_layouts(op, [floats(2, 16, 24, 40)], every_order=False)  # torch's larger paths


@pytest.mark.parametrize("op", ["Equal", "NotEqual", "Less", "GreaterEqual"])
def test_comparisons_in_every_order(op: str) -> None:
    x = RNG.integers(0, 3, (2, 3, 4, 5)).astype(np.float32)
    check_layouts(op, [x, RNG.integers(0, 3, (2, 3, 4, 5)).astype(np.float32)])
    check_layouts(op, [x, RNG.integers(0, 3, (3, 1, 5)).astype(np.float32)])


def test_select_and_select_v2_in_every_order() -> None:
    cond = RNG.random((2, 3, 4, 5)) < 0.5
    a, b = floats(2, 3, 4, 5), floats(2, 3, 4, 5)
    check_layouts("Select", [cond, a, b])
    check_layouts("Select", [cond[:, 0, 0, 0], a, b])  # a vector picking rows
    check_layouts("SelectV2", [cond, a, b])
    check_layouts("SelectV2", [RNG.random((3, 1, 5)) < 0.5, a, floats(1, 4, 5)])


@pytest.mark.parametrize("dst", [kl.int32, kl.float64, kl.bool_, kl.float16])
def test_cast_in_every_order(dst: kl.DType) -> None:
    check_layouts("Cast", [floats(2, 3, 4, 5) * 3], {"DstT": dst})


REDUCTION_AXES = [[0], [1], [3], [-1], [1, 2], [0, 3], [0, 1, 2, 3], []]


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min", "Prod", "All", "Any"])
def test_reductions_in_every_order(op: str) -> None:
    if op in ("All", "Any"):
        x: Array = RNG.random((2, 3, 4, 5)) < (0.8 if op == "All" else 0.1)
    elif op == "Prod":
        x = RNG.uniform(0.8, 1.25, (2, 3, 4, 5)).astype(np.float32)
    else:
        x = floats(2, 3, 4, 5)
    for axes in REDUCTION_AXES:
        for keep in (False, True):
            check_layouts(op, [x, i32(*axes)], {"keep_dims": keep})
    for axes in ([0, 2], [3]):  # larger: torch's reductions' own paths
        check_layouts(
            op,
            [x.repeat(4, axis=1).repeat(8, axis=2), i32(*axes)],
            {"keep_dims": False},
            every_order=False,
        )


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_max_and_min_in_every_order(op: str) -> None:
    x = RNG.integers(0, 5, (2, 3, 4, 5)).astype(np.float32)  # ties: the first index wins
    for axis in range(-1, 4):
        check_layouts(op, [x, np.int32(axis)], {"output_type": kl.int64})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_in_every_order(op: str, dtype: Any) -> None:
    check_layouts(op, [floats(2, 3, 4, 5, dtype=dtype)])
    # short rows over many of them: torch's transposed path (``TRANSPOSED_MIN_SIZE``)
    check_layouts(op, [floats(64, 32, 8, dtype=dtype)])
    check_layouts(op, [floats(4096, 4, dtype=dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 7, 5), (4, 256, 128), (64, 256, 128), (300, 64, 96)])
def test_matmul_with_transposes_in_every_order(dtype: Any, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    a, b = floats(m, k, dtype=dtype), floats(k, n, dtype=dtype)
    for ta, tb in itertools.product((False, True), repeat=2):
        inputs = [a.T.copy() if ta else a, b.T.copy() if tb else b]
        check_layouts("MatMul", inputs, {"transpose_a": ta, "transpose_b": tb}, expected=[a @ b])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_matmul_with_adjoints_in_every_order(dtype: Any) -> None:
    x, y = floats(2, 3, 4, 5, dtype=dtype), floats(2, 3, 5, 6, dtype=dtype)
    for adj_x, adj_y in itertools.product((False, True), repeat=2):
        inputs = [
            np.swapaxes(x, -1, -2).copy() if adj_x else x,
            np.swapaxes(y, -1, -2).copy() if adj_y else y,
        ]
        check_layouts("BatchMatMulV2", inputs, {"adj_x": adj_x, "adj_y": adj_y}, expected=[x @ y])
    check_layouts("BatchMatMulV2", [x, floats(5, 6, dtype=dtype)])  # a broadcast operand
    check_layouts(
        "BatchMatMulV2",
        [floats(8, 64, 128, dtype=dtype), floats(8, 128, 32, dtype=dtype)],
        every_order=False,
    )


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_add_in_every_order(data_format: str, dtype: Any) -> None:
    channels = 5 if data_format == "NHWC" else 3
    x = floats(2, 3, 4, 5, dtype=dtype)
    check_layouts("BiasAdd", [x, floats(channels, dtype=dtype)], {"data_format": data_format})


def _image(data_format: str, n: int, h: int, w: int, c: int, dtype: Any) -> Array:
    x = floats(n, h, w, c, dtype=dtype)
    return x if data_format == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _strides(data_format: str, s: int) -> list[int]:
    return [1, s, s, 1] if data_format == "NHWC" else [1, 1, s, s]


FORMATS = ["NHWC", "NCHW"]
FLOAT_TYPES = [np.float32, np.float64]


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize(("stride", "padding"), [(1, "SAME"), (2, "VALID"), (2, "SAME")])
def test_conv2d_in_every_order(data_format: str, dtype: Any, stride: int, padding: str) -> None:
    x = _image(data_format, 2, 9, 10, 16, dtype)
    f = floats(3, 3, 16, 8, dtype=dtype)
    attrs = {
        "strides": _strides(data_format, stride),
        "padding": padding,
        "data_format": data_format,
    }
    assert check_layouts("Conv2D", [x, f], attrs) >= 2


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_depthwise_conv2d_in_every_order(data_format: str, dtype: Any) -> None:
    x = _image(data_format, 2, 9, 10, 8, dtype)
    f = floats(3, 3, 8, 2, dtype=dtype)
    for stride in (1, 2):
        attrs = {
            "strides": _strides(data_format, stride),
            "padding": "SAME",
            "data_format": data_format,
        }
        assert check_layouts("DepthwiseConv2dNative", [x, f], attrs) >= 2


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("fused_ops", [["BiasAdd"], ["BiasAdd", "Relu"], ["BiasAdd", "Relu6"]])
def test_fused_conv2d_in_every_order(data_format: str, dtype: Any, fused_ops: list[str]) -> None:
    x = _image(data_format, 2, 9, 10, 16, dtype)
    f, bias = floats(3, 3, 16, 8, dtype=dtype), floats(8, dtype=dtype)
    attrs = {
        "strides": _strides(data_format, 1),
        "padding": "SAME",
        "data_format": data_format,
        "fused_ops": fused_ops,
    }
    check_layouts("_FusedConv2D", [x, f, [bias]], attrs)


@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_pooling_in_every_order(op: str, data_format: str, dtype: Any) -> None:
    x = _image(data_format, 2, 9, 10, 16, dtype)
    for k, s, padding in [(2, 2, "VALID"), (3, 2, "SAME"), (3, 1, "SAME")]:
        attrs = {
            "ksize": _strides(data_format, k),
            "strides": _strides(data_format, s),
            "padding": padding,
            "data_format": data_format,
        }
        assert check_layouts(op, [x], attrs) >= 2


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_lrn_in_every_order(dtype: Any) -> None:
    for radius in (2, 5):
        attrs = {"depth_radius": radius, "bias": 1.0, "alpha": 0.1, "beta": 0.75}
        check_layouts("LRN", [floats(2, 5, 6, 16, dtype=dtype)], attrs)


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("is_training", [False, True])
def test_fused_batch_norm_in_every_order(data_format: str, dtype: Any, is_training: bool) -> None:
    x = _image(data_format, 2, 5, 6, 8, dtype)
    scale, offset = floats(8) + 2, floats(8)
    mean, variance = (
        (floats(8), np.abs(floats(8)) + 0.5) if not is_training else (floats(0), floats(0))
    )
    attrs = {"data_format": data_format, "is_training": is_training, "epsilon": 0.001}
    check_layouts("FusedBatchNormV3", [x, scale, offset, mean, variance], attrs, exact=False)


def test_reshape_transpose_and_concat_in_every_order() -> None:
    x = floats(2, 3, 4, 5)
    for shape in ([6, 20], [-1], [2, 60], [5, 4, 3, 2], [120, 1]):
        check_layouts("Reshape", [x, i32(*shape)])
    for perm in itertools.permutations(range(4)):
        check_layouts(
            "Transpose", [x, i32(*perm)], every_order=perm in ((0, 2, 3, 1), (3, 2, 1, 0))
        )
    for dtype in (np.float32, np.float64, np.int32):
        y = x.astype(dtype)
        for axis in range(4):
            z = np.concatenate([y, y[:, :, :, :2]], axis=3)[:, :, :, :5]
            check_layouts("ConcatV2", [[y, z, y], np.int32(axis)])
            check_layouts(
                "ConcatV2", [[y, y.repeat(2, axis=axis)], np.int32(axis)], every_order=False
            )


def test_pads_in_every_order() -> None:
    x = floats(2, 3, 4, 5)
    paddings = i32([0, 1], [2, 0], [1, 1], [0, 2])
    check_layouts("Pad", [x, paddings])
    check_layouts("PadV2", [x, paddings, np.float32(7)])
    small = i32([0, 1], [1, 0], [1, 1], [0, 2])
    for mode in ("REFLECT", "SYMMETRIC"):
        check_layouts("MirrorPad", [x, small], {"mode": mode})


def test_slices_in_every_order() -> None:
    x = floats(3, 4, 5, 6)
    check_layouts("Slice", [x, i32(1, 0, 2, 1), i32(2, -1, 2, 4)])
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0}
    check_layouts(
        "StridedSlice",
        [x, i32(0, 3, 1, 0), i32(3, 0, 5, 6), i32(2, -1, 2, 3)],
        {**masks, "shrink_axis_mask": 0},
    )
    check_layouts(
        "StridedSlice",
        [x, i32(1, 0, 0, 5), i32(2, 4, 5, 6), i32(1, 1, 1, 1)],
        {**masks, "shrink_axis_mask": 0b1001},
    )


def test_gather_tile_pack_unpack_split_squeeze_in_every_order() -> None:
    x = floats(3, 4, 5, 6)
    for axis in range(4):
        check_layouts("GatherV2", [x, i32(2, 0, 2), np.int32(axis)])
        check_layouts("GatherV2", [x, i32([1, 0], [2, 2]), np.int32(axis)])
        check_layouts("Unpack", [x], {"num": x.shape[axis], "axis": axis})
        check_layouts("Pack", [[x, x * 2]], {"axis": axis})
        check_layouts(
            "Cumsum", [x, np.int32(axis)], {"exclusive": axis % 2 == 1, "reverse": axis > 1}
        )
        check_layouts("ReverseV2", [x, i32(axis)])
    check_layouts("Split", [np.int32(1), x], {"num_split": 2})
    check_layouts("Split", [np.int32(3), x], {"num_split": 3})
    check_layouts("SplitV", [x, i32(1, 3, 1), np.int32(2)], {"num_split": 3})
    check_layouts("Tile", [x, i32(1, 2, 1, 3)])
    check_layouts("Squeeze", [floats(3, 1, 5, 1)], {"squeeze_dims": []})
    check_layouts("Squeeze", [floats(3, 1, 5, 1)], {"squeeze_dims": [1]})
    check_layouts("ExpandDims", [floats(3, 4, 5), np.int32(1)])
    check_layouts("BroadcastTo", [floats(3, 1, 5), i32(2, 3, 4, 5)])


def test_top_k_one_hot_and_where_in_every_order() -> None:
    x = RNG.permutation(120).reshape(2, 3, 4, 5).astype(np.float32)
    for k in (1, 3, 5):
        check_layouts("TopKV2", [x, np.int32(k)])
    labels = RNG.integers(-1, 5, (3, 4, 5)).astype(np.int32)
    for axis in (-1, 0, 1):
        check_layouts("OneHot", [labels, np.int32(5), np.float32(1), np.float32(0)], {"axis": axis})
    check_layouts("Where", [RNG.random((2, 3, 4, 5)) < 0.3])
    check_layouts("Where", [floats(3, 4, 5) > 0])


@pytest.mark.parametrize("op", ["ResizeBilinear", "ResizeBicubic", "ResizeNearestNeighbor"])
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_resizes_in_every_order(op: str, dtype: Any) -> None:
    x = floats(2, 5, 6, 3, dtype=dtype)
    for size, align, half in [
        ((10, 12), False, False),
        ((3, 4), False, True),
        ((7, 9), True, False),
    ]:
        attrs = {"align_corners": align, "half_pixel_centers": half}
        check_layouts(op, [x, i32(*size)], attrs)


@pytest.mark.parametrize("data_format", FORMATS)
def test_space_to_depth_and_back_in_every_order(data_format: str) -> None:
    attrs = {"block_size": 2, "data_format": data_format}
    check_layouts("SpaceToDepth", [_image(data_format, 2, 4, 6, 3, np.float32)], attrs)
    check_layouts("DepthToSpace", [_image(data_format, 2, 2, 3, 12, np.float32)], attrs)


@settings(max_examples=40, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=2, max_size=5),
    data=st.data(),
    op=st.sampled_from(["AddV2", "Mul", "Sum", "Max", "Transpose", "Reshape", "Softmax", "Relu"]),
)
def test_a_drawn_order_of_a_drawn_shape_gives_the_c_order_outputs(
    dims: list[int], data: Any, op: str
) -> None:
    rank = len(dims)
    order = list(data.draw(st.permutations(range(rank))))
    x = floats(*dims)
    y = in_order(x, order)
    z = gappy(y)
    extra: list[Any] = []
    attrs: dict[str, Any] = {}
    if op in ("AddV2", "Mul"):
        extra = [floats(*dims[data.draw(st.integers(0, rank - 1)) :])]
    elif op in ("Sum", "Max"):
        axes = data.draw(st.lists(st.integers(0, rank - 1), unique=True))
        extra, attrs = [i32(*axes)], {"keep_dims": data.draw(st.booleans())}
    elif op == "Transpose":
        extra = [i32(*data.draw(st.permutations(range(rank))))]
    elif op == "Reshape":
        extra = [i32(-1, dims[-1])]
    for name, registry, label in _kernels(op, ""):
        want = run_kernel(op, [x, *extra], attrs, registry=registry, label=label).outputs
        for value in (y, z):
            got = run_kernel(op, [value, *extra], attrs, registry=registry, label=label).outputs
            assert_same(
                got, want, op not in INEXACT | TRANSCENDENTAL, f"{op} [{name}] order {order}"
            )


# -- graphs: the fused elementwise kernel, and views that later kernels must not overwrite --


def _session_run(
    build: Callable[[kl.Tensor], Any],
    feed: Array,
    *,
    optimize: bool,
    registry: Registry | None = None,
) -> tuple[Any, kl.RunMetadata]:
    g = kl.Graph(registry) if registry is not None else kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(feed.dtype), list(feed.shape), name="x")
        fetches = build(x)
    metadata = kl.RunMetadata()
    with kl.Session(g, kl.SessionConfig(graph_optimizer=optimize)) as session:
        out = session.run(fetches, {x: feed}, kl.RunOptions(trace=True), metadata)
    return out, metadata


def _scale_shift_relu(x: kl.Tensor) -> kl.Tensor:
    scale = kl.constant(np.linspace(0.5, 1.5, 40, dtype=np.float32))
    shift = kl.constant(np.linspace(-1, 1, 40, dtype=np.float32))
    return kl.ops.relu(kl.ops.add(kl.ops.mul(kl.ops.tanh(x), scale), shift)) * 2.0


@pytest.mark.parametrize("registry", [None, NUMPY], ids=["default", "numpy"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 40), (2, 16, 32, 40)], ids=["small", "large"])
def test_a_fused_elementwise_chain_of_a_non_c_order_feed_matches_numpy(
    registry: Registry | None, shape: tuple[int, ...]
) -> None:
    """The optimizer fuses the chain into one ``_FusedElementwise`` (numpy's kernel or,
    above ``SMALL_ELEMENTWISE``, torch's): fed in channels-first memory, reversed, or as a
    gappy view, it gives what the unoptimized graph and numpy give."""
    x = floats(*shape)
    scale = np.linspace(0.5, 1.5, 40, dtype=np.float32)
    shift = np.linspace(-1, 1, 40, dtype=np.float32)
    want = np.maximum(np.tanh(x) * scale + shift, 0) * 2
    for feed in (x, in_order(x, [0, 3, 1, 2]), in_order(x, [3, 2, 1, 0]), gappy(x)):
        keep = feed.copy()
        fused, metadata = _session_run(_scale_shift_relu, feed, optimize=True, registry=registry)
        plain, _ = _session_run(_scale_shift_relu, feed, optimize=False, registry=registry)
        assert metadata.step_stats is not None
        assert "_FusedElementwise" in {n.op for n in metadata.step_stats.nodes}
        np.testing.assert_allclose(fused, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(plain, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(feed, keep)


def _views_then_in_place(x: kl.Tensor) -> list[kl.Tensor]:
    """Views of a fed value and of a computed one, each read by an elementwise op whose
    output could reuse a buffer, and fetched beside it."""
    t = kl.ops.mul(x, 3.0)  # a buffer of the step's own, which forwarding could reuse
    flat = kl.ops.reshape(x, [-1])
    shuffled = kl.ops.transpose(t, [0, 2, 3, 1])
    part = kl.ops.slice(t, [0, 1, 0, 0], [-1, 2, -1, -1])
    return [
        kl.ops.relu(flat + 1.0),
        shuffled,
        kl.ops.add(t, 1.0),  # t's last reader but for the views above
        part,
        kl.ops.neg(kl.ops.transpose(x, [3, 2, 1, 0])),
        kl.ops.strided_slice(x, [0, 0, 0, 1], [2, 4, 5, 6], [1, 2, 1, 2]) * 2.0,
    ]


@pytest.mark.parametrize("optimize", [False, True])
def test_views_of_non_c_order_values_are_never_overwritten_by_later_kernels(optimize: bool) -> None:
    x = RNG.uniform(-1, 1, (2, 4, 5, 6)).astype(np.float32)
    t = x * 3
    want = [
        np.maximum(x.reshape(-1) + 1, 0),
        t.transpose(0, 2, 3, 1),
        t + 1,
        t[:, 1:3],
        -x.transpose(3, 2, 1, 0),
        x[:2, ::2, :, 1:6:2] * 2,
    ]
    for feed in (x, in_order(x, [0, 2, 3, 1]), in_order(x, [3, 1, 0, 2]), gappy(x)):
        keep = feed.copy()
        for registry in (None, NUMPY):
            got, _ = _session_run(_views_then_in_place, feed, optimize=optimize, registry=registry)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(feed, keep)


def _small_cnn(data_format: str, dtype: Any) -> Callable[[kl.Tensor], list[kl.Tensor]]:
    """A small network on constant weights (what the oneDNN convolutions and the packed
    products cache), each kernel reading what the one before it wrote in whatever layout
    it chose: convolutions, batch norm, pooling, a channel concat, a pad, a flatten and a
    product, softmax."""

    def const(*shape: int) -> kl.Tensor:
        rng = np.random.default_rng(shape)  # the same weights in each graph built
        return kl.constant((rng.standard_normal(shape) * 0.3).astype(dtype))

    channel = 3 if data_format == "NHWC" else 1
    window = [1, 3, 3, 1] if data_format == "NHWC" else [1, 1, 3, 3]
    step = [1, 2, 2, 1] if data_format == "NHWC" else [1, 1, 2, 2]
    ones = [1, 1, 1, 1]

    def build(x: kl.Tensor) -> list[kl.Tensor]:
        conv: dict[str, Any] = {"padding": "SAME", "data_format": data_format}
        y = kl.ops.conv2d(x, const(3, 3, 8, 16), strides=ones, **conv)
        y = kl.ops.relu(kl.ops.bias_add(y, const(16), data_format=data_format))
        if dtype == np.float32:
            stats = [kl.constant(np.linspace(0.5 + k, 1.5, 16, dtype=dtype)) for k in range(4)]
            y = kl.ops.fused_batch_norm_v3(y, *stats, data_format=data_format, is_training=False)[0]
        pooled = kl.ops.max_pool(y, ksize=window, strides=step, **conv)
        branch = kl.ops.depthwise_conv2d_native(pooled, const(3, 3, 16, 1), strides=ones, **conv)
        joined = kl.ops.concat_v2([pooled, kl.ops.sigmoid(branch)], channel)
        z = kl.ops.avg_pool(
            joined, ksize=window, strides=step, padding="VALID", data_format=data_format
        )
        z = kl.ops.conv2d(z, const(1, 1, 32, 8), strides=ones, **conv)
        flat = kl.ops.reshape(z, [int(z.shape[0]), -1])
        logits = kl.ops.mat_mul(flat, const(int(flat.shape[1]), 10))
        spatial = [1, 2] if data_format == "NHWC" else [2, 3]
        return [kl.ops.softmax(logits), kl.ops.mean(joined, spatial), z]

    return build


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_a_small_cnn_fed_in_any_layout_gives_the_numpy_kernels_outputs(
    data_format: str, dtype: Any
) -> None:
    x = floats(2, 12, 14, 8, dtype=dtype)
    if data_format == "NCHW":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    build = _small_cnn(data_format, dtype)
    want, _ = _session_run(build, x, optimize=False, registry=NUMPY)
    for feed in (
        x,
        in_order(x, [0, 2, 3, 1]),
        in_order(x, [0, 3, 1, 2]),
        in_order(x, [3, 2, 1, 0]),
        gappy(x),
    ):
        for registry in (None, NUMPY):
            for optimize in (False, True):
                got, _ = _session_run(build, feed, optimize=optimize, registry=registry)
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


BROADCAST_VIEW_CASES: list[tuple[str, list[Any], dict[str, Any]]] = [
    ("Relu", [], {}),
    ("AddV2", [floats(5)], {}),
    ("Softmax", [], {}),
    ("Sum", [i32(1, 2)], {"keep_dims": False}),
    ("Max", [i32(0)], {"keep_dims": True}),
    ("Transpose", [i32(0, 3, 1, 2)], {}),
    ("Reshape", [i32(6, -1)], {}),
    ("ConcatV2", [], {}),
    ("Pad", [i32([0, 0], [1, 0], [0, 1], [0, 0])], {}),
    ("Cumsum", [np.int32(1)], {"exclusive": False, "reverse": False}),
    ("Cast", [], {"DstT": kl.float64}),
    ("Conv2D", [floats(3, 3, 5, 4)], {"strides": [1, 1, 1, 1], "padding": "SAME"}),
    ("MaxPool", [], {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}),
    ("AvgPool", [], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}),
    ("BiasAdd", [floats(5)], {}),
    ("LRN", [], {"depth_radius": 1}),
    ("MatMul", [], {}),
]


@pytest.mark.parametrize(
    ("op", "rest", "attrs"), BROADCAST_VIEW_CASES, ids=[c[0] for c in BROADCAST_VIEW_CASES]
)
def test_a_broadcast_view_with_zero_strides_reads_as_its_copy(
    op: str, rest: list[Any], attrs: dict[str, Any]
) -> None:
    """A fed ``np.broadcast_to`` (stride 0 along the repeated axis) is read as the C-order
    copy of the same values."""
    shape = (20, 30) if op == "MatMul" else (2, 3, 4, 5)
    view = np.broadcast_to(floats(1, *shape[1:]), shape)
    copy = np.ascontiguousarray(view)
    if op == "ConcatV2":
        inputs, copied = [[view, view], np.int32(3)], [[copy, copy], np.int32(3)]
    elif op == "MatMul":
        weight = floats(30, 7)
        inputs, copied = [view, weight], [copy, weight]
    else:
        inputs, copied = [view, *rest], [copy, *rest]
    for name, registry, label in _kernels(op, ""):
        want = run_kernel(op, copied, attrs, registry=registry, label=label).outputs
        got = run_kernel(op, inputs, attrs, registry=registry, label=label).outputs
        exact = op not in INEXACT | TRANSCENDENTAL
        assert_same(got, want, exact, f"{op} [{name}] broadcast view")


def _kept_layout_chains(t: kl.Tensor) -> list[kl.Tensor]:
    """Kernels that keep their input's memory order (Transpose's copy, Pad, ConcatV2, the
    elementwise ops), each read by one that may run in place in its input's buffer
    (Softmax's and the ufuncs' direct entries)."""
    shift = kl.constant(np.linspace(-1, 1, 7, dtype=np.float32))
    a = kl.ops.transpose(t, [0, 3, 1, 2])
    return [
        kl.ops.softmax(a),
        kl.ops.relu(kl.ops.neg(kl.ops.add(kl.ops.transpose(t, [0, 2, 1, 3]), shift))),
        kl.ops.log_softmax(kl.ops.mul(kl.ops.pad(t, [[0, 0], [1, 1], [0, 2], [0, 0]]), 2.0)),
        kl.ops.softmax(kl.ops.sub(kl.ops.concat_v2([t, t], 3), 1.0)),
        kl.ops.sum(kl.ops.square(a), [1]),
    ]


def _softmax(z: Array) -> Array:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)  # type: ignore[no-any-return]


def test_chains_of_layout_keeping_kernels_and_in_place_ones_match_numpy() -> None:
    x = floats(2, 6, 5, 7)
    shift = np.linspace(-1, 1, 7, dtype=np.float32)
    a = x.transpose(0, 3, 1, 2)
    padded = np.pad(x, [[0, 0], [1, 1], [0, 2], [0, 0]]) * 2
    want = [
        _softmax(a),
        np.maximum(-(x.transpose(0, 2, 1, 3) + shift), 0),
        np.log(_softmax(padded)),
        _softmax(np.concatenate([x, x], 3) - 1),
        (a * a).sum(1),
    ]
    for order in ([0, 1, 2, 3], [0, 2, 3, 1], [0, 3, 1, 2], [3, 2, 1, 0], [1, 0, 3, 2]):
        for feed in (in_order(x, order), gappy(in_order(x, order))):
            for registry in (None, NUMPY):
                for optimize in (False, True):
                    got, _ = _session_run(
                        _kept_layout_chains, feed, optimize=optimize, registry=registry
                    )
                    for g, w in zip(got, want, strict=True):
                        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
