"""Conv, MaxPool, AveragePool and LpPool whose pads depend on spatial sizes the model
leaves dynamic (auto_pad=SAME_UPPER / SAME_LOWER, ceil_mode=1): they import, and each
model, imported once, is fed several sizes (odd and even, smaller than the kernel) and
checked against onnxruntime (onnx's reference evaluator where onnxruntime cannot run
it); torch's Conv2d(padding="same"), MaxPool2d and AvgPool2d(ceil_mode=True) exported
with dynamic H and W; LpPool at opsets 7 to 10 (its schemas 1 and 2)."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import FLOAT, INT64, model

import kernloom.onnx as ko
from kernloom.onnx._registry import REGISTRY

RNG = np.random.default_rng(5)
RTOL, ATOL = 1e-4, 1e-5

SIZES_1D = [[9], [8], [2], [1], [13]]
SIZES_2D = [[7, 8], [8, 7], [2, 3], [1, 1], [12, 13]]
SIZES_3D = [[5, 6, 7], [4, 3, 2], [1, 2, 1]]


def _dynamic(rank: int) -> list[int | str | None]:
    """An input shape of ``rank``: a symbolic batch, 2 channels, symbolic spatial sizes."""
    return ["N", 2, *(f"S{i}" for i in range(rank - 2))]


def _window_model(
    op: str, rank: int, opset: int, elem: int = FLOAT, outputs: int = 1, **attrs: Any
) -> onnx.ModelProto:
    """One ``op`` node on an input "x" whose batch and spatial sizes are dynamic; Conv
    takes a 3-output-channel weight (of attrs' kernel_shape, which it then drops) and a
    bias as initializers."""
    inputs = ["x"]
    initializers: dict[str, np.ndarray[Any, Any]] = {}
    if op == "Conv":
        group = int(attrs.get("group", 1))
        kernel = attrs.pop("kernel_shape")
        initializers["w"] = RNG.standard_normal([3 * group, 2 // group, *kernel]).astype(np.float32)
        initializers["b"] = RNG.standard_normal(3 * group).astype(np.float32)
        inputs += ["w", "b"]
    names = ["y", "i"][:outputs]
    node = helper.make_node(op, inputs, names, name="window", **attrs)
    declared: dict[str, Any] = {"y": (elem, None), "i": (INT64, None)}
    return model(
        [node],
        {"x": (elem, _dynamic(rank))},
        {n: declared[n] for n in names},
        initializers=initializers,
        opset=opset,
    )


def _feed(shape: Sequence[int], dtype: Any = np.float32) -> np.ndarray[Any, Any]:
    if np.issubdtype(dtype, np.integer):
        low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -100
        return RNG.integers(low, 100, size=shape).astype(dtype)
    # a permutation: no ties, so MaxPool's Indices are unique
    return (RNG.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3.0).astype(dtype)


def _check_sizes(
    proto: onnx.ModelProto,
    spatial: Sequence[Sequence[int]],
    *,
    oracle: str = "onnxruntime",
    batch: int = 2,
    dtype: Any = np.float32,
) -> None:
    """kernloom (one session: one import, every size at run time) against ``oracle`` on
    an input of each ``spatial`` size (the batch alternating between ``batch`` and 1):
    onnxruntime, onnx's reference evaluator, or ("static") kernloom's import of the model
    with the input's shape declared, which computes the pads at import time."""
    data = proto.SerializeToString()
    ours = ko.InferenceSession(data)
    for i, sizes in enumerate(spatial):
        x = _feed([batch if i % 2 == 0 else 1, 2, *sizes], dtype)
        got = ours.run(None, {"x": x})
        want = [np.asarray(v) for v in _oracle(proto, oracle, x.shape).run(None, {"x": x})]
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype, (sizes, g.dtype, w.dtype)
            assert g.shape == w.shape, (sizes, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=str(sizes))


def _oracle(proto: onnx.ModelProto, oracle: str, shape: Sequence[int]) -> Any:
    """Something with onnxruntime's ``run(None, feeds)``."""
    if oracle == "onnxruntime":
        data = proto.SerializeToString()
        return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    if oracle == "reference":
        return ReferenceEvaluator(proto)
    known = onnx.ModelProto()
    known.CopyFrom(proto)
    x = known.graph.input[0]
    x.CopyFrom(helper.make_tensor_value_info("x", x.type.tensor_type.elem_type, list(shape)))
    return ko.InferenceSession(known.SerializeToString())


def _case_id(case: tuple[Any, ...]) -> str:
    return "-".join(str(v).replace(" ", "") for v in case)


SAME = ["SAME_UPPER", "SAME_LOWER"]

CONVS_2D: list[dict[str, Any]] = [
    {"kernel_shape": [3, 3], "strides": [1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [2, 4], "strides": [3, 2]},
    {"kernel_shape": [3, 2], "strides": [2, 3], "dilations": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "dilations": [2, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "group": 2},
]


@pytest.mark.parametrize("auto_pad", SAME)
@pytest.mark.parametrize("attrs", CONVS_2D, ids=[_case_id(tuple(a.values())) for a in CONVS_2D])
def test_conv2d_same_with_dynamic_sizes(auto_pad: str, attrs: dict[str, Any]) -> None:
    proto = _window_model("Conv", 4, 17, auto_pad=auto_pad, **attrs)
    _check_sizes(proto, SIZES_2D, oracle=_conv_oracle(attrs))


def _conv_oracle(attrs: dict[str, Any]) -> str:
    """onnxruntime refuses a dilated SAME Conv; onnx's evaluator pads it as kernloom
    does, (out - 1) * stride + (kernel - 1) * dilation + 1 - size in all."""
    return "reference" if any(v != 1 for v in attrs.get("dilations", [1])) else "onnxruntime"


CONVS_1D_3D: list[tuple[int, dict[str, Any]]] = [
    (3, {"kernel_shape": [3], "strides": [2]}),
    (3, {"kernel_shape": [4], "strides": [3], "dilations": [2]}),
    (5, {"kernel_shape": [3, 2, 3], "strides": [2, 1, 3]}),
    (5, {"kernel_shape": [2, 3, 2], "strides": [2, 2, 1], "dilations": [1, 2, 1]}),
]


@pytest.mark.parametrize("auto_pad", SAME)
@pytest.mark.parametrize(
    ("rank", "attrs"), CONVS_1D_3D, ids=[_case_id(tuple(a.values())) for _, a in CONVS_1D_3D]
)
def test_conv1d_and_3d_same_with_dynamic_sizes(
    auto_pad: str, rank: int, attrs: dict[str, Any]
) -> None:
    sizes = SIZES_1D if rank == 3 else SIZES_3D
    proto = _window_model("Conv", rank, 17, auto_pad=auto_pad, **attrs)
    _check_sizes(proto, sizes, oracle=_conv_oracle(attrs))


@pytest.mark.parametrize("auto_pad", SAME)
def test_conv_integer_same_with_dynamic_sizes(auto_pad: str) -> None:
    """ConvInteger shares Conv's converter: its input, less the zero point, padded with
    zeros at run time (SAME_LOWER) or run SAME (SAME_UPPER)."""
    node = helper.make_node(
        "ConvInteger", ["x", "w", "x_zero"], ["y"], auto_pad=auto_pad, strides=[2, 3]
    )
    w = RNG.integers(0, 255, size=[3, 2, 3, 2]).astype(np.uint8)
    proto = model(
        [node],
        {"x": (TensorProto.UINT8, _dynamic(4))},
        {"y": (TensorProto.INT32, None)},
        initializers={"w": w, "x_zero": np.uint8(7)},
        opset=10,
    )
    _check_sizes(proto, SIZES_2D, dtype=np.uint8)


POOLS_SAME: list[tuple[str, dict[str, Any]]] = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [3, 2]}),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 1], "dilations": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [3, 2], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 3], "dilations": [2, 1]}),
    ("LpPool", {"kernel_shape": [3, 2], "strides": [2, 2], "p": 3}),
    ("LpPool", {"kernel_shape": [2, 2], "strides": [3, 1], "dilations": [1, 2]}),
]


@pytest.mark.parametrize("auto_pad", SAME)
@pytest.mark.parametrize(
    ("op", "attrs"), POOLS_SAME, ids=[_case_id((o, *a.values())) for o, a in POOLS_SAME]
)
def test_pool2d_same_with_dynamic_sizes(auto_pad: str, op: str, attrs: dict[str, Any]) -> None:
    """Dilated, onnxruntime's pools and onnx's evaluator disagree on SAME (neither gives
    ceil(size / stride) outputs every time): against kernloom's import with the sizes
    known, whose pads span the dilated window, as Conv's. (onnxruntime's MaxPool refuses
    the negative pads its SAME computes at some sizes where the stride exceeds the
    kernel: its strides here do not.)"""
    proto = _window_model(op, 4, 19, auto_pad=auto_pad, **attrs)
    dilated = any(v != 1 for v in attrs.get("dilations", [1]))
    _check_sizes(proto, SIZES_2D, oracle="static" if dilated else "onnxruntime")


POOLS_CEIL: list[tuple[str, int, dict[str, Any]]] = [
    ("MaxPool", 4, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", 4, {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 0, 0, 1]}),
    ("MaxPool", 4, {"kernel_shape": [2, 2], "strides": [2, 3], "dilations": [2, 2]}),
    ("MaxPool", 3, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("MaxPool", 5, {"kernel_shape": [2, 3, 2], "strides": [2, 2, 3]}),
    ("AveragePool", 4, {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("AveragePool", 4, {"kernel_shape": [3, 3], "strides": [2, 2], "count_include_pad": 1}),
    (
        "AveragePool",
        4,
        {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 2, 0], "count_include_pad": 1},
    ),
    ("AveragePool", 4, {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [1, 0, 1, 1]}),
    ("AveragePool", 3, {"kernel_shape": [2], "strides": [3], "count_include_pad": 1}),
    ("AveragePool", 5, {"kernel_shape": [2, 2, 3], "strides": [2, 3, 2], "pads": [1] * 6}),
    ("LpPool", 4, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ("LpPool", 3, {"kernel_shape": [2], "strides": [3]}),
]


@pytest.mark.parametrize(
    ("op", "rank", "attrs"),
    POOLS_CEIL,
    ids=[_case_id((o, r, *a.values())) for o, r, a in POOLS_CEIL],
)
def test_pool_ceil_mode_with_dynamic_sizes(op: str, rank: int, attrs: dict[str, Any]) -> None:
    """Including sizes whose last window would start in the end padding (8 under kernel
    2, stride 3 and a start pad of 1: onnxruntime drops that window) and sizes smaller
    than the kernel."""
    sizes = {3: [[9], [8], [2], [6], [13]], 4: [*SIZES_2D[:3], [12, 13], [6, 5]], 5: SIZES_3D}
    proto = _window_model(op, rank, 19, ceil_mode=1, **attrs)
    _check_sizes(proto, sizes[rank])


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
        {"kernel_shape": [2, 2], "strides": [3, 2], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "storage_order": 1},
        {"kernel_shape": [2, 3], "strides": [2, 3], "ceil_mode": 1, "pads": [1, 0, 0, 1]},
    ],
    ids=["same-lower", "same-upper", "ceil-column-major", "ceil-pads"],
)
def test_max_pool_indices_with_dynamic_sizes(attrs: dict[str, Any]) -> None:
    _check_sizes(_window_model("MaxPool", 4, 12, outputs=2, **attrs), [*SIZES_2D[:3], [6, 5]])


def test_max_pool_indices_1d_with_dynamic_sizes() -> None:
    proto = _window_model("MaxPool", 3, 12, outputs=2, kernel_shape=[3], strides=[2], ceil_mode=1)
    _check_sizes(proto, [[9], [8], [4], [13]])


@pytest.mark.parametrize("auto_pad", SAME)
def test_integer_max_pool_same_with_dynamic_sizes(auto_pad: str) -> None:
    proto = _window_model(
        "MaxPool", 4, 12, TensorProto.INT8, kernel_shape=[3, 3], strides=[2, 2], auto_pad=auto_pad
    )
    # (12 x 13: the torch plugin's int8 MaxPool fails, with sizes known at import too)
    _check_sizes(proto, [*SIZES_2D[:4], [6, 5]], dtype=np.int8)


@pytest.mark.parametrize("auto_pad", SAME)
@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [2, 3, 2], "strides": [2, 3, 2]}),
        ("AveragePool", {"kernel_shape": [3, 2, 2], "strides": [2, 2, 3]}),
        ("AveragePool", {"kernel_shape": [2, 2, 2], "strides": [3, 2, 2], "count_include_pad": 1}),
        ("LpPool", {"kernel_shape": [2, 2, 3], "strides": [2, 3, 2]}),
        ("MaxPool", {"kernel_shape": [3], "strides": [2]}),
        ("AveragePool", {"kernel_shape": [4], "strides": [3]}),
        ("LpPool", {"kernel_shape": [3], "strides": [2], "p": 1}),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else _case_id(tuple(v.values())),
)
def test_pool1d_and_3d_same_with_dynamic_sizes(
    auto_pad: str, op: str, attrs: dict[str, Any]
) -> None:
    rank = 2 + len(attrs["kernel_shape"])
    sizes = SIZES_1D if rank == 3 else SIZES_3D
    _check_sizes(_window_model(op, rank, 19, auto_pad=auto_pad, **attrs), sizes)


@pytest.mark.parametrize("opset", [7, 8, 9, 10, 11, 17])
def test_lp_pool_at_every_opset(opset: int) -> None:
    """LpPool-2 (opsets 2 to 10, p an int) imports as LpPool-11; with pads and with a
    dynamic SAME_UPPER."""
    x = _feed([2, 2, 7, 8])
    for attrs in (
        {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": 3},
        {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ):
        proto = _window_model("LpPool", 4, opset, **attrs)
        proto.ir_version = 7 if opset < 17 else 8
        assert REGISTRY.lookup("LpPool", opset) is not None
        _check_sizes(proto, [list(x.shape[2:]), [5, 3]])


def test_lp_pool_1_takes_a_float_p() -> None:
    """LpPool-1 (opset 1) has p as a float (onnxruntime has no LpPool-1: numpy's)."""
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=2.5)
    proto = model([node], {"x": (FLOAT, _dynamic(4))}, {"y": (FLOAT, None)}, opset=1)
    proto.ir_version = 3
    x = np.abs(_feed([1, 2, 5, 4])) + 0.5
    got = ko.InferenceSession(proto.SerializeToString()).run(None, {"x": x})[0]
    windows = np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))
    want = (windows**2.5).sum(axis=(-2, -1)) ** (1 / 2.5)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def test_static_sizes_keep_the_static_ops() -> None:
    """Sizes known at import (and stride 1, where the pads never depend on them) build
    no run-time pad arithmetic: the padding is EXPLICIT, as before; a dynamic
    SAME_UPPER conv is one SAME Conv2D."""

    def ops_of(proto: onnx.ModelProto) -> list[str]:
        return [n.op for n in ko.import_model(proto).graph.nodes]

    known = _window_model("Conv", 4, 17, kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")
    known.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", FLOAT, [1, 2, 7, 8]))
    assert "Shape" not in ops_of(known) and "Pad" not in ops_of(known)
    stride1 = _window_model("MaxPool", 4, 17, kernel_shape=[2, 3], auto_pad="SAME_LOWER")
    assert "Shape" not in ops_of(stride1)
    upper = _window_model("Conv", 4, 17, kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    graph = ko.import_model(upper).graph
    assert [n.attrs["padding"] for n in graph.nodes if n.op == "Conv2D"] == ["SAME"]
    assert "Pad" not in {n.op for n in graph.nodes}


# -- torch exports -------------------------------------------------------------------------

TORCH_MODULES: list[tuple[str, Any]] = [
    ("conv-same-3", lambda nn: nn.Conv2d(2, 3, 3, padding="same")),
    ("conv-same-4", lambda nn: nn.Conv2d(2, 3, 4, padding="same")),
    (
        "conv-same-dilated-grouped",
        lambda nn: nn.Conv2d(2, 4, (3, 2), padding="same", dilation=2, groups=2),
    ),
    ("maxpool-ceil", lambda nn: nn.MaxPool2d(3, 2, ceil_mode=True)),
    ("maxpool-ceil-pad", lambda nn: nn.MaxPool2d(2, 3, padding=1, ceil_mode=True)),
    ("avgpool-ceil", lambda nn: nn.AvgPool2d(3, 2, ceil_mode=True)),
    (
        "avgpool-ceil-pad-excluded",
        lambda nn: nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    ),
    ("maxpool1d-ceil", lambda nn: nn.MaxPool1d(3, 2, ceil_mode=True)),
]


@pytest.mark.parametrize("make", [m for _, m in TORCH_MODULES], ids=[i for i, _ in TORCH_MODULES])
def test_torch_exports_with_dynamic_image_sizes(make: Any) -> None:
    """torch's TorchScript exporter (opset 17), H and W dynamic: kernloom against torch
    itself, at several sizes through one session."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = make(torch.nn).eval()
    one_d = isinstance(module, torch.nn.MaxPool1d)
    example = torch.randn(1, 2, 8) if one_d else torch.randn(1, 2, 8, 8)
    dynamic = {0: "N", 2: "W"} if one_d else {0: "N", 2: "H", 3: "W"}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter warns that it is legacy
        torch.onnx.export(
            module,
            (example,),
            buffer,
            opset_version=17,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": dynamic, "y": {0: "N"}},
            dynamo=False,
        )
    session = ko.InferenceSession(buffer.getvalue())
    sizes = [[9], [8], [5]] if one_d else [[8, 8], [7, 9], [5, 6], [11, 4]]
    for i, spatial in enumerate(sizes):
        x = _feed([1 + i % 2, 2, *spatial])
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        got = session.run(None, {"x": x})[0]
        assert got.shape == want.shape, (spatial, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=str(spatial))
