"""What the importer refuses up front, each with a message that names the file or node and
says what would fix it: a model with no graph (a 0-byte file), nodes with more inputs or
outputs than their schema allows, an opset newer than the installed onnx knows, an op of
a domain the model does not import, an input whose rank an op needs at import. Each is a
model onnx's checker or onnxruntime refuses too. And the README's count of ONNX op types,
kept true."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnxruntime
import pytest
from onnx import helper
from onnx_helpers import FLOAT, model, run_both

import kernloom.onnx as ko
from kernloom.cli import main
from kernloom.onnx._registry import REGISTRY
from kernloom.onnx.errors import OnnxImportError

README = Path(__file__).resolve().parents[2] / "README.md"


def _relu(inputs: list[str], *, opset: int = 17) -> onnx.ModelProto:
    return model(
        [helper.make_node("Relu", inputs, ["y"], name="act")],
        {"x": (FLOAT, [2, 3])},
        {"y": (FLOAT, [2, 3])},
        opset=opset,
    )


# -- a model with no graph -----------------------------------------------------------------


def test_a_zero_byte_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument):
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(
        OnnxImportError, match=rf"'{re.escape(str(path))}' \(0 bytes\) holds no graph"
    ):
        ko.import_model(path)
    with pytest.raises(OnnxImportError, match="holds no graph"):
        ko.InferenceSession(str(path))


def test_a_model_proto_without_a_graph_is_an_error() -> None:
    with pytest.raises(OnnxImportError, match="holds no graph"):
        ko.import_model(onnx.ModelProto())
    with pytest.raises(OnnxImportError, match="holds no graph"):
        ko.import_model(b"")


def test_corrupt_bytes_are_the_same_error_as_a_corrupt_file(tmp_path: Path) -> None:
    """A truncated model given as bytes: an OnnxImportError saying so (protobuf's own
    DecodeError named no model and no fix), as for the same bytes in a file."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    whole = onnx.helper.make_model(graph).SerializeToString()
    truncated = whole[: len(whole) // 2]
    path = tmp_path / "truncated.onnx"
    path.write_bytes(truncated)
    with pytest.raises(OnnxImportError, match="is not a readable ONNX model"):
        ko.import_model(path)
    for entry in (ko.import_model, ko.InferenceSession):
        with pytest.raises(
            OnnxImportError,
            match=rf"the ONNX model \({len(truncated)} bytes\) is not a readable ONNX "
            r"model: .*export or download the model again",
        ):
            entry(truncated)


@pytest.mark.parametrize("command", ["convert", "run"])
def test_the_cli_says_so_in_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    extra = ["-o", str(tmp_path / "g.json")] if command == "convert" else ["--fetch", "y"]
    args = [command, str(path), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "empty.onnx" in err and "holds no graph" in err
    assert "Traceback" not in err
    assert not (tmp_path / "g.json").exists()


# -- node arity ------------------------------------------------------------------------------


def test_a_node_with_too_many_inputs_is_refused_naming_node_op_and_counts() -> None:
    proto = _relu(["x", "x"])
    with pytest.raises(onnx.checker.ValidationError, match="input size 2"):
        onnx.checker.check_model(proto)
    with pytest.raises(
        OnnxImportError,
        match=r"node 'act' \(Relu, opset 17\): 2 inputs; Relu-14 takes 1 \(exactly\)",
    ):
        ko.import_model(proto)


def test_a_node_with_too_many_outputs_is_refused() -> None:
    proto = model(
        [helper.make_node("Neg", ["x"], ["y", "z"], name="neg")],
        {"x": (FLOAT, [2])},
        {"y": (FLOAT, [2]), "z": (FLOAT, [2])},
    )
    with pytest.raises(onnx.checker.ValidationError, match="output size 2"):
        onnx.checker.check_model(proto)
    with pytest.raises(
        OnnxImportError, match=r"node 'neg' \(Neg, opset 17\): 2 outputs; Neg-13 gives 1"
    ):
        ko.import_model(proto)


def test_too_few_inputs_and_variadic_ranges_are_named() -> None:
    proto = model(
        [helper.make_node("Gemm", ["a"], ["y"], name="mm")],
        {"a": (FLOAT, [2, 2])},
        {"y": (FLOAT, [2, 2])},
    )
    with pytest.raises(
        OnnxImportError, match=r"'mm' \(Gemm, opset 17\): 1 input; Gemm-13 takes 2 to 3"
    ):
        ko.import_model(proto)


def test_optional_inputs_left_empty_and_variadic_inputs_still_import() -> None:
    proto = model(
        [
            helper.make_node("Clip", ["x", "", "hi"], ["c"], name="clip"),
            helper.make_node("Sum", ["c", "c", "c"], ["y"], name="sum"),
        ],
        {"x": (FLOAT, [3])},
        {"y": (FLOAT, [3])},
        initializers={"hi": np.array(1.0, np.float32)},
    )
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    (y,) = ko.InferenceSession(proto).run(None, {"x": x})
    np.testing.assert_array_equal(y, 3 * np.minimum(x, 1.0))


def test_a_node_inside_a_subgraph_is_checked_too() -> None:
    vi = helper.make_tensor_value_info
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x", "x"], ["r"], name="inner")], "b", [], [vi("r", FLOAT, [2])]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch, name="if")
    proto = model(
        [node], {"c": (onnx.TensorProto.BOOL, []), "x": (FLOAT, [2])}, {"y": (FLOAT, [2])}
    )
    with pytest.raises(OnnxImportError, match=r"node 'inner' \(Relu, opset 17\): 2 inputs"):
        ko.import_model(proto)


# -- opsets ----------------------------------------------------------------------------------


def test_an_opset_newer_than_onnx_knows_is_refused_naming_both() -> None:
    newest = onnx.defs.onnx_opset_version()
    proto = _relu(["x"], opset=newest + 2)
    with pytest.raises(Exception, match="opset"):
        onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(
        OnnxImportError,
        match=rf"opset {newest + 2} of the default ONNX domain.*{newest}",
    ):
        ko.import_model(proto)


def test_the_newest_opset_onnx_knows_imports() -> None:
    proto = _relu(["x"], opset=onnx.defs.onnx_opset_version())
    (y,) = ko.InferenceSession(proto).run(None, {"x": -np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))


def test_an_op_of_a_domain_the_model_does_not_import_says_so() -> None:
    proto = model(
        [helper.make_node("FancyOp", ["x"], ["y"], domain="com.acme", name="fancy")],
        {"x": (FLOAT, [2])},
        {"y": (FLOAT, [2])},
    )
    with pytest.raises(OnnxImportError) as caught:
        ko.import_model(proto)
    message = str(caught.value)
    assert "domain 'com.acme' is not imported by the model" in message
    assert "opset_import" in message
    assert "not an op of this opset" not in message


def test_an_op_of_an_imported_custom_domain_is_still_unknown_to_onnx() -> None:
    proto = model(
        [helper.make_node("FancyOp", ["x"], ["y"], domain="com.acme", name="fancy")],
        {"x": (FLOAT, [2])},
        {"y": (FLOAT, [2])},
    )
    proto.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(OnnxImportError, match="not an op of this opset in onnx's schemas"):
        ko.import_model(proto)


# -- unknown ranks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("Flatten", {"axis": 1}),
        ("Softmax", {"axis": 1}),
        ("Transpose", {}),
        ("ArgMax", {"axis": 1}),
    ],
)
def test_an_unknown_rank_error_says_how_to_declare_it(op: str, attrs: dict[str, int]) -> None:
    proto = model(
        [helper.make_node(op, ["x"], ["y"], name="op", **attrs)],
        {"x": (FLOAT, None)},  # type: ignore[dict-item]
        {"y": (FLOAT, None)},  # type: ignore[dict-item]
    )
    with pytest.raises(OnnxImportError) as caught:
        ko.import_model(proto)
    message = str(caught.value)
    assert f"'op' ({op}, opset 17)" in message
    assert "rank of the input must be known at import time" in message
    assert "declare" in message and "onnx.shape_inference.infer_shapes" in message


# -- the README --------------------------------------------------------------------------------


def test_the_readme_counts_the_onnx_op_types_that_import() -> None:
    """The number `kernloom ops --onnx` lists, as the README gives it."""
    found = re.search(r"\((\d+) ONNX op types today\)", README.read_text())
    assert found is not None
    listed = {(c.domain, c.op_type) for c in REGISTRY.converters()}
    assert int(found.group(1)) == len(listed)


def test_a_value_info_rank_is_what_the_error_says_it_is() -> None:
    """The remedy the unknown-rank error names: a value_info giving the value its rank
    (here on an Identity of an input declared without a shape)."""
    nodes = [
        helper.make_node("Identity", ["x"], ["h"], name="same"),
        helper.make_node("Flatten", ["h"], ["y"], axis=1, name="flat"),
    ]
    proto = model(nodes, {"x": (FLOAT, None)}, {"y": (FLOAT, None)})  # type: ignore[dict-item]
    with pytest.raises(OnnxImportError, match=r"'flat' \(Flatten.*value_info with its rank"):
        ko.import_model(proto)
    proto.graph.value_info.append(helper.make_tensor_value_info("h", FLOAT, ["a", "b", "c"]))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (ours,), (ort,) = run_both(proto, {"x": x})
    assert ours.shape == ort.shape == (2, 12)
    np.testing.assert_array_equal(ours, ort)
