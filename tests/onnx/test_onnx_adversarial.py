"""Adversarial ONNX models: corners where an import computed something other than ONNX's
semantics, or failed with an unclear error. Each case is checked against onnx's
reference evaluator (``onnx.reference.ReferenceEvaluator``) or hand-checked values, on
the default CPU session and on the torch plugin's kernels (its GPU kernels on a device
bound to torch's CPU, ``kernloom_gpu_torch.testing``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx_helpers import FLOAT, INT64, model

import kernloom.onnx as ko
import kernloom.plugin as klp

Array = np.ndarray[Any, Any]
BACKENDS = ["default", "torch"]


def _torch_registry() -> klp.Registry:
    pytest.importorskip("torch")
    from kernloom_cpu_numpy import plugin as cpu_plugin
    from kernloom_gpu_torch.testing import cpu_bound_gpu_plugin

    registry = klp.Registry()
    registry.register_plugin(cpu_plugin, name="cpu_numpy")
    registry.register_plugin(cpu_bound_gpu_plugin(), name="gpu_torch")
    return registry


def _ours(proto: onnx.ModelProto, feeds: dict[str, Array], backend: str) -> list[Array]:
    registry = _torch_registry() if backend == "torch" else None
    with ko.InferenceSession(proto, registry=registry) as session:
        return session.run(None, feeds)


def _matches_reference(
    proto: onnx.ModelProto, feeds: dict[str, Array], backend: str, rtol: float = 1e-6
) -> None:
    expected = ReferenceEvaluator(proto).run(None, feeds)
    got = _ours(proto, feeds, backend)
    assert len(got) == len(expected)
    for ours, ref in zip(got, expected, strict=True):
        ref = np.asarray(ref)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours, ref)
        if np.issubdtype(ref.dtype, np.floating):
            np.testing.assert_allclose(ours, ref, rtol=rtol, atol=1e-6)
        else:
            np.testing.assert_array_equal(ours, ref)


# -- elementwise ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_float_fmod_is_exact_as_c_fmod(backend: str, dtype: type) -> None:
    # x - trunc(x / y) * y gave 0 for fmod(1, 0.1) (the float32 quotient rounds to 10).
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    proto = model(
        [helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)],
        {"a": (elem, [6]), "b": (elem, [6])},
        {"y": (elem, [6])},
    )
    feeds = {
        "a": np.array([1.0, -1.0, 3.0, 1e7, -5.5, 0.0], dtype),
        "b": np.array([0.1, 0.1, -0.3, 3.3, 2.0, 3.0], dtype),
    }
    _matches_reference(proto, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_of_an_integer_base_by_a_float_exponent_is_taken_in_floating_point(
    backend: str,
) -> None:
    # The exponent used to be cast to the base's type: 4 ** 0.5 became 4 ** 0 = 1.
    proto = model(
        [helper.make_node("Pow", ["a", "b"], ["y"])],
        {"a": (INT64, [4]), "b": (FLOAT, [4])},
        {"y": (INT64, [4])},
    )
    feeds = {"a": np.array([4, 9, 2, 10]), "b": np.array([0.5, 0.5, 3.0, 1.5], np.float32)}
    _matches_reference(proto, feeds, backend)
    np.testing.assert_array_equal(_ours(proto, feeds, backend)[0], [2, 3, 8, 31])


# -- reductions -------------------------------------------------------------------------


@pytest.mark.parametrize("axes", ["absent", "empty initializer"])
@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceLogSum", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_noop_with_empty_axes_keeps_a_composite_reductions_other_steps(
    backend: str, op: str, axes: str
) -> None:
    # ONNX: over no axes ReduceSumSquare squares, ReduceLogSum takes the log... -- the
    # importer returned the input itself (axes empty at run time were already right).
    x = np.array([[-1.5, 0.25, 3.0], [2.0, -0.5, -4.0]], np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x)
    names = ["x"] if axes == "absent" else ["x", "axes"]
    proto = model(
        [helper.make_node(op, names, ["y"], noop_with_empty_axes=1)],
        {"x": (FLOAT, [2, 3])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={"axes": np.zeros([0], np.int64)} if axes != "absent" else None,
        opset=18,
    )
    _matches_reference(proto, {"x": x}, backend, rtol=1e-5)


# -- shapes -----------------------------------------------------------------------------

_FIVE = np.arange(1, 6, dtype=np.float32)
# Hand-checked (onnxruntime agrees): negative pads crop first, then the rest is padded,
# so reflect/edge/wrap read the cropped tensor's borders.
_NEGATIVE_PADS = [
    ("constant", [2, -2], [0, 0, 1, 2, 3]),
    ("constant", [-1, -1], [2, 3, 4]),
    ("reflect", [2, -2], [3, 2, 1, 2, 3]),
    ("reflect", [-2, 2], [3, 4, 5, 4, 3]),
    ("edge", [3, -4], [1, 1, 1, 1]),
    ("edge", [-2, 2], [3, 4, 5, 5, 5]),
    ("wrap", [2, -2], [2, 3, 1, 2, 3]),
    ("wrap", [-2, 2], [3, 4, 5, 3, 4]),
]
# (Edge padding with pads fed at run time was already right: a gather of clamped indices.)
_NEGATIVE_PAD_CASES = [
    (*case, at)
    for case in _NEGATIVE_PADS
    for at in ("import", "run time")
    if not (case[0] == "edge" and at == "run time")
]


@pytest.mark.parametrize(("mode", "pads", "expected", "pads_at"), _NEGATIVE_PAD_CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_pads_crop_before_padding(
    backend: str, mode: str, pads: list[int], expected: list[float], pads_at: str
) -> None:
    static = pads_at == "import"
    proto = model(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
        {"x": (FLOAT, [5]), **({} if static else {"pads": (INT64, [2])})},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={"pads": np.array(pads)} if static else None,
        opset=19,
    )
    feeds = {"x": _FIVE} if static else {"x": _FIVE, "pads": np.array(pads)}
    np.testing.assert_array_equal(_ours(proto, feeds, backend)[0], expected)


def test_negative_pads_on_two_axes_crop_and_pad_each() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    proto = model(
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"])],
        {"x": (FLOAT, [3, 4])},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={"pads": np.array([-1, 1, 0, -2]), "value": np.array(9, np.float32)},
        opset=19,
    )
    expected = np.full((2, 3), 9, np.float32)
    expected[:, 1:] = x[1:, :2]
    np.testing.assert_array_equal(_ours(proto, {"x": x}, "default")[0], expected)


@pytest.mark.parametrize("num_outputs", [2, 3, 4])
@pytest.mark.parametrize("backend", BACKENDS)
def test_split_num_outputs_of_a_size_known_at_run_time_only(backend: str, num_outputs: int) -> None:
    # 7 rows in 2, 3 or 4 parts: ceil(7 / n) each, the last what remains -- a Split that
    # demanded equal parts failed at run time.
    names = [f"y{i}" for i in range(num_outputs)]
    proto = model(
        [helper.make_node("Split", ["x"], names, axis=-2, num_outputs=num_outputs)],
        {"x": (FLOAT, [None, 2])},
        dict.fromkeys(names, (FLOAT, None)),  # type: ignore[arg-type]
        opset=18,
    )
    _matches_reference(proto, {"x": np.arange(14, dtype=np.float32).reshape(7, 2)}, backend)


@pytest.mark.parametrize(("start", "limit", "delta"), [(5, 1, 2), (1, 5, -1), (-3, -9, 4)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_range_with_a_limit_behind_start_is_empty(
    backend: str, start: int, limit: int, delta: int
) -> None:
    # ONNX: max(ceil((limit - start) / delta), 0) elements; TensorFlow's Range refuses.
    proto = model(
        [helper.make_node("Range", ["a", "b", "c"], ["y"])],
        {"a": (INT64, []), "b": (INT64, []), "c": (INT64, [])},
        {"y": (INT64, None)},  # type: ignore[dict-item]
    )
    feeds = {"a": np.array(start), "b": np.array(limit), "c": np.array(delta)}
    _matches_reference(proto, feeds, backend)


@pytest.mark.parametrize(("start", "end"), [(-10, 10), (-4, -1), (-5, None)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_shape_start_and_end_of_a_shape_known_at_run_time(
    backend: str, start: int, end: int | None
) -> None:
    # A start below -rank clamps to 0 (it was taken modulo the rank: -10 % 3 = 2).
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    proto = model(
        [helper.make_node("Shape", ["x"], ["y"], **attrs)],
        {"x": (FLOAT, [None, 3, None])},
        {"y": (INT64, None)},  # type: ignore[dict-item]
        opset=15,
    )
    _matches_reference(proto, {"x": np.zeros((2, 3, 4), np.float32)}, backend)


@pytest.mark.parametrize(
    "indices",
    [[[1, -1], [-2, -3]], [[-1], [0]], [1, -2, -1], [[[-1, 2, -4]]]],
    ids=["pairs", "rows", "one-triple", "nested"],
)
@pytest.mark.parametrize("known", [True, False], ids=["initializer", "fed"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_nd_wraps_negative_indices(backend: str, known: bool, indices: list[Any]) -> None:
    index = np.array(indices, np.int64)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    proto = model(
        [helper.make_node("GatherND", ["x", "i"], ["y"])],
        {"x": (FLOAT, [2, 3, 4]), **({} if known else {"i": (INT64, [None] * index.ndim)})},
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
        initializers={"i": index} if known else None,
    )
    _matches_reference(proto, {"x": x} if known else {"x": x, "i": index}, backend)


# -- the graph: initializers listed as inputs -------------------------------------------


def _initializer_as_input(ir_version: int) -> onnx.ModelProto:
    proto = model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        {"x": (FLOAT, [3]), "w": (FLOAT, [3])},
        {"y": (FLOAT, [3])},
        initializers={"w": np.ones(3, np.float32)},
    )
    proto.ir_version = ir_version
    return proto


@pytest.mark.parametrize("fed", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_feed_overrides_an_initializer_listed_as_a_graph_input(backend: str, fed: bool) -> None:
    proto = _initializer_as_input(8)
    feeds = {"x": np.arange(3, dtype=np.float32)}
    if fed:
        feeds["w"] = np.full(3, 5, np.float32)
    _matches_reference(proto, feeds, backend)
    session = ko.InferenceSession(proto)
    assert [a.name for a in session.get_inputs()] == ["x"]  # as onnxruntime: need not be fed
    assert [a.name for a in session.get_overridable_initializers()] == ["w"]


def test_an_initializer_input_the_import_needs_is_a_constant_and_cannot_be_fed() -> None:
    """A Conv's weight and a Reshape's shape listed as graph inputs (IR 8, as exporters that
    keep initializers as inputs write them): the import needs their values, so they become
    constants (a feed is refused, naming them); the Add's operand stays overridable."""
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    proto = model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Reshape", ["c", "shape"], ["r"]),
            helper.make_node("Add", ["r", "k"], ["y"]),
        ],
        {
            "x": (FLOAT, [1, 2, 5, 5]),
            "w": (FLOAT, [4, 2, 3, 3]),
            "b": (FLOAT, [4]),
            "shape": (INT64, [2]),
            "k": (FLOAT, [100]),
        },
        {"y": (FLOAT, [1, 100])},
        initializers={
            "w": weight,
            "b": rng.standard_normal(4).astype(np.float32),
            "shape": np.array([1, 100], np.int64),
            "k": np.ones(100, np.float32),
        },
    )
    proto.ir_version = 8
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    _matches_reference(proto, {"x": x}, "default", rtol=1e-5)
    _matches_reference(proto, {"x": x, "k": np.full(100, 3, np.float32)}, "default", rtol=1e-5)
    with ko.InferenceSession(proto) as session:
        assert [a.name for a in session.get_inputs()] == ["x"]
        overridable = {a.name for a in session.get_overridable_initializers()}
        assert "k" in overridable and not overridable & {"w", "shape"}
        with pytest.raises(ko.OnnxImportError, match=r"\['w'\] are initializers .* constants"):
            session.run(None, {"x": x, "w": weight * 2})


# -- errors -----------------------------------------------------------------------------


def _saved(tmp_path: Path, proto: onnx.ModelProto) -> str:
    path = tmp_path / "broken.onnx"
    onnx.save(proto, str(path))
    return str(path)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (
            helper.make_node("Softmax", ["x"], ["y"], axis=1.5),
            r"'Softmax_0' \(Softmax, opset 17\) \[unnamed; output 'y'\]: attribute 'axis' is "
            r"FLOAT; Softmax-13 declares it INT",
        ),
        (
            helper.make_node("Gemm", ["x", "x"], ["y"], name="fc", transA=1.0),
            r"'fc' \(Gemm, opset 17\): attribute 'transA' is FLOAT; Gemm-13 declares it INT",
        ),
        (
            helper.make_node("Transpose", ["x"], ["y"], name="t", perm="10"),
            r"'t' \(Transpose, opset 17\): attribute 'perm' is STRING; Transpose-13 declares "
            r"it INTS",
        ),
        (
            helper.make_node("MaxPool", ["x"], ["y"], name="pool"),
            r"'pool' \(MaxPool, opset 17\): the required attribute 'kernel_shape' \(INTS\) is "
            r"missing",
        ),
    ],
    ids=["float-for-int", "float-for-int-named", "string-for-ints", "required-missing"],
)
def test_an_attribute_against_its_schema_names_the_node_the_file_and_the_fix(
    tmp_path: Path, node: onnx.NodeProto, expected: str
) -> None:
    # Softmax's axis=1.5 used to import as axis 1; the others failed with Python's
    # "int() argument must be ... not 'NoneType'".
    proto = model([node], {"x": (FLOAT, [2, 2])}, {"y": (FLOAT, None)})  # type: ignore[dict-item]
    path = _saved(tmp_path, proto)
    with pytest.raises(ko.OnnxImportError) as info:
        ko.InferenceSession(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "does not follow the schemas of its ops" in message
    assert "onnx.checker.check_model" in message
    assert re.search(expected, message), message


def test_an_input_that_nothing_produces_names_the_node_the_file_and_the_fix(
    tmp_path: Path,
) -> None:
    proto = model(
        [helper.make_node("Add", ["x", "nope"], ["y"])], {"x": (FLOAT, [2])}, {"y": (FLOAT, [2])}
    )
    path = _saved(tmp_path, proto)
    with pytest.raises(ko.OnnxImportError) as info:
        ko.import_model(path)
    assert str(info.value) == (
        f"{path}: ONNX node 'Add_0' (Add, opset 17) [unnamed; output 'y']: input 'nope' is "
        "produced by no node and is neither a graph input nor an initializer: add it as one "
        "of those, or name an existing value instead"
    )


def test_nodes_out_of_topological_order_are_named_as_such() -> None:
    proto = model(
        [
            helper.make_node("Relu", ["r"], ["y"], name="late"),
            helper.make_node("Relu", ["x"], ["r"], name="early"),
        ],
        {"x": (FLOAT, [2])},
        {"y": (FLOAT, [2])},
    )
    with pytest.raises(
        ko.OnnxImportError,
        match=r"'late' \(Relu, opset 17\): input 'r' is the output of node 'early' \(Relu, "
        r"opset 17\), which comes later: ONNX lists a graph's nodes in topological order",
    ):
        ko.import_model(proto)


def test_an_unsupported_op_loaded_from_a_file_names_the_file_and_the_unnamed_node(
    tmp_path: Path,
) -> None:
    proto = model(
        [helper.make_node("StringNormalizer", ["x"], ["d"])],
        {"x": (FLOAT, [2, 2])},
        {"d": (FLOAT, None)},  # type: ignore[dict-item]
    )
    path = _saved(tmp_path, proto)
    with pytest.raises(ko.UnsupportedOnnxError) as info:
        ko.InferenceSession(path)
    message = str(info.value)
    assert message.startswith(f"{path}: the ONNX model uses 1 unsupported node(s)")
    assert (
        "node 'StringNormalizer_0' (StringNormalizer, opset 17) [unnamed; output 'd']: " in message
    )
    assert info.value.problems[0].unnamed_outputs == ("d",)
