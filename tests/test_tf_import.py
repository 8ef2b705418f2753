"""``kernloom.tf.import_graph_def``: TensorFlow's own graphs, loaded without TensorFlow.

The fixtures under ``tests/fixtures/tf`` were exported by TensorFlow 2.21 with
``make_fixtures.py`` (frozen MLP and CNN, a TF1 ``while_loop``, constants of every dtype
in TensorFlow's own encodings, resource variables, ``tf.switch_case`` lowered to
``_SwitchN``); each ``.npz`` holds the inputs and
TensorFlow's outputs, the independent reference the runs here are compared with. Hand-made
GraphDefs (built with kernloom's schema) cover TensorProto's rules, attr mapping, ordering
and every error path; hypothesis mutates real files to show that any bytes give a graph
or kernloom's error naming the file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.cli import main
from kernloom.tf import import_graph_def
from kernloom.tf.proto.descriptor import SERIALIZED_FILE
from kernloom.tf.schema import message_class

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "tensorflow.md"
DT_FLOAT, DT_INT32, DT_STRING, DT_BOOL, DT_HALF = 1, 3, 7, 10, 19


def _reference(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    with np.load(FIXTURES / f"{name}.npz") as archive:
        feeds = {k.removeprefix("feed:"): archive[k] for k in archive.files if k[:5] == "feed:"}
        fetches = {k.removeprefix("fetch:"): archive[k] for k in archive.files if k[:6] == "fetch:"}
    return feeds, fetches


def _run(graph: kl.Graph, feeds: dict[str, np.ndarray], fetches: list[str]) -> list[Any]:
    with kl.Session(graph) as session:
        return list(session.run(fetches, feed_dict=feeds))


def _assert_matches_tf(name: str, graph: kl.Graph) -> None:
    feeds, expected = _reference(name)
    values = _run(graph, feeds, list(expected))
    for (fetch, want), got in zip(expected.items(), values, strict=True):
        assert got.dtype == want.dtype, fetch
        assert got.shape == want.shape, fetch
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=fetch)
        else:
            np.testing.assert_array_equal(got, want, err_msg=fetch)


# -- TensorFlow's graphs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "reference"),
    [
        ("mlp.pb", "mlp"),
        ("mlp.pbtxt", "mlp"),
        ("cnn.pb", "cnn"),
        ("while_loop.pb", "while_loop"),
        ("constants.pb", "constants"),
    ],
)
def test_a_frozen_tensorflow_graph_gives_tensorflow_s_outputs(file: str, reference: str) -> None:
    _assert_matches_tf(reference, import_graph_def(FIXTURES / file))


def test_the_cnn_uses_the_nn_ops_it_was_built_for() -> None:
    ops = {node.op for node in import_graph_def(FIXTURES / "cnn.pb").nodes}
    assert {"Conv2D", "FusedBatchNormV3", "MaxPool", "AvgPool", "Reshape", "Softmax"} <= ops


def test_the_while_loop_keeps_tf1_control_flow_and_runs_other_trip_counts() -> None:
    graph = import_graph_def(FIXTURES / "while_loop.pb")
    ops = {node.op for node in graph.nodes}
    assert {"Enter", "Merge", "Switch", "Exit", "NextIteration", "LoopCond"} <= ops
    enter = next(n for n in graph.nodes if n.op == "Enter")
    assert enter.attrs["frame_name"] == "loop/while_context"
    assert enter.attrs["parallel_iterations"] == 10
    feeds, _ = _reference("while_loop")
    w = graph.node("w").attrs["value"]
    b = graph.node("b").attrs["value"]
    for steps in (0, 1, 3):
        expected = feeds["x:0"].astype(np.float64)
        grown = feeds["x:0"][0]
        for _ in range(steps):  # the loop bodies, computed directly in numpy
            expected = np.tanh(expected @ w + b)
            grown = np.concatenate([grown, 2 * grown])
        count, result, doubled = _run(
            graph, {**feeds, "steps:0": np.int32(steps)}, ["count:0", "result:0", "grown:0"]
        )
        assert count == steps
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(doubled, grown)


def test_a_loop_variable_keeps_its_static_shape() -> None:
    graph = import_graph_def(FIXTURES / "while_loop.pb")
    assert graph.tensor("result:0").shape.dims == (None, 4)
    assert graph.tensor("count:0").shape.dims == ()
    # The second loop's variable doubles in length each iteration: its Merge (and what
    # follows) has the shape every iteration shares, not the initial value's [4].
    assert graph.tensor("grow/Merge_1:0").shape.dims == (None,)
    assert graph.tensor("grown:0").shape.dims == (None,)


def test_text_and_binary_graphs_are_the_same_graph() -> None:
    binary = import_graph_def(FIXTURES / "mlp.pb")
    text = import_graph_def(FIXTURES / "mlp.pbtxt")
    assert binary.to_json() == text.to_json()


def test_bytes_load_in_either_format_by_their_content() -> None:
    binary = import_graph_def((FIXTURES / "mlp.pb").read_bytes())
    text = import_graph_def((FIXTURES / "mlp.pbtxt").read_bytes())
    assert binary.to_json() == text.to_json()
    _assert_matches_tf("mlp", binary)


def test_resource_variables_are_initialised_read_and_updated() -> None:
    graph = import_graph_def(FIXTURES / "variables.pb")
    ops = {node.op for node in graph.nodes}
    assert {"VarHandleOp", "AssignVariableOp", "ReadVariableOp", "AssignAddVariableOp"} <= ops
    with np.load(FIXTURES / "variables.npz") as archive:
        x, before, after = archive["feed:x:0"], archive["fetch:y:0"], archive["updated:y:0"]
        init, update = str(archive["init:"]), str(archive["update:"])
    with kl.Session(graph) as session:
        session.run([], targets=[init])
        np.testing.assert_allclose(session.run("y:0", {"x:0": x}), before, rtol=1e-6)
        session.run([], targets=[update])
        np.testing.assert_allclose(session.run("y:0", {"x:0": x}), after, rtol=1e-6)


def test_tensorflow_only_attrs_are_dropped_and_runtime_ones_mapped() -> None:
    graph = import_graph_def(FIXTURES / "variables.pb")
    handle = graph.node("w")
    # Attrs TF writes are kept where kernloom's op declares them (issue 21), dropped where not.
    for attr in ("debug_name", "allowed_devices"):
        assert (attr in handle.attrs) == handle.op_def.has_attr(attr)
    assert graph.node("w/Initializer/initial_value").colocation_names == ["w"]
    loop = import_graph_def(FIXTURES / "while_loop.pb")
    switch = next(n for n in loop.nodes if n.op == "Switch")
    assert switch.colocation_names[0].startswith("loop/Merge")
    mlp = import_graph_def(FIXTURES / "mlp.pb")
    assert all("_has_manual_control_dependencies" not in n.attrs for n in mlp.nodes)
    assert all(
        ("grad_a" in n.attrs) == n.op_def.has_attr("grad_a") for n in mlp.nodes if n.op == "MatMul"
    )


# -- the schema -----------------------------------------------------------------------------


def test_the_compiled_descriptor_is_the_proto_file_s() -> None:
    """``descriptor.py`` is what protoc makes of ``graph_def.proto`` today."""
    from google.protobuf import descriptor_pb2

    from kernloom.tf.proto.compile import compile_proto, render

    parse = descriptor_pb2.FileDescriptorProto.FromString
    assert parse(compile_proto()) == parse(SERIALIZED_FILE), (
        "graph_def.proto changed: run python -m kernloom.tf.proto.compile"
    )
    module: dict[str, Any] = {}
    exec(render(SERIALIZED_FILE), module)  # what compile writes reads back the same bytes
    assert module["SERIALIZED_FILE"] == SERIALIZED_FILE


def test_a_missing_protobuf_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernloom.tf.schema as schema

    monkeypatch.setattr(schema, "_classes", {})
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    with pytest.raises(kl.InvalidArgumentError, match=r"kernloom\[tf\]"):
        import_graph_def(b"")


# -- hand-made GraphDefs ------------------------------------------------------------------


def _graph_def(*nodes: dict[str, Any]) -> Any:
    """A GraphDef message; each node ``{"name", "op", "input", "device", "attr"}`` with attr
    values given as ``AttrValue`` keyword dicts (``{"type": DT_FLOAT}``)."""
    graph_def = message_class("GraphDef")()
    for spec in nodes:
        node = graph_def.node.add(name=spec["name"], op=spec["op"])
        node.input.extend(spec.get("input", []))
        node.device = spec.get("device", "")
        for key, value in spec.get("attr", {}).items():
            node.attr[key].CopyFrom(message_class("AttrValue")(**value))
    return graph_def


def _tensor(dtype: int, dims: list[int], **fields: Any) -> dict[str, Any]:
    shape = message_class("TensorShapeProto")(
        dim=[message_class("TensorShapeProto").Dim(size=d) for d in dims]
    )
    return {"tensor": message_class("TensorProto")(dtype=dtype, tensor_shape=shape, **fields)}


def _const(name: str, dtype: int, dims: list[int], **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "op": "Const",
        "attr": {"dtype": {"type": dtype}, "value": _tensor(dtype, dims, **fields)},
    }


def _placeholder(name: str, dims: list[int] | None = None) -> dict[str, Any]:
    shape = message_class("TensorShapeProto")(
        unknown_rank=dims is None,
        dim=[message_class("TensorShapeProto").Dim(size=d) for d in dims or []],
    )
    return {
        "name": name,
        "op": "Placeholder",
        "attr": {"dtype": {"type": DT_FLOAT}, "shape": {"shape": shape}},
    }


def _load(*nodes: dict[str, Any], **options: Any) -> kl.Graph:
    return import_graph_def(_graph_def(*nodes).SerializeToString(), **options)


def _value(*fields: Any, dtype: int = DT_FLOAT, dims: list[int] | None = None) -> np.ndarray:
    graph = _load(_const("c", dtype, [2, 3] if dims is None else dims, **dict(fields)))
    value: np.ndarray = graph.node("c").attrs["value"]
    return value


def test_typed_values_fill_the_shape_with_their_last_value() -> None:
    np.testing.assert_array_equal(
        _value(("float_val", [1.0, 2.0])), np.array([[1, 2, 2], [2, 2, 2]], np.float32)
    )
    np.testing.assert_array_equal(_value(("float_val", [])), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(
        _value(("float_val", [1, 2, 3, 4, 5, 6, 7, 8])),
        np.arange(1, 7, dtype=np.float32).reshape(2, 3),  # extra values are ignored, as in TF
    )
    assert _value(("int_val", [5]), dtype=DT_INT32, dims=[]).tolist() == 5


def test_float16_travels_as_its_bits_and_int8_wraps_as_a_cpp_cast() -> None:
    bits = np.array([1.5, -2.0], np.float16).view(np.uint16).astype(np.int32).tolist()
    np.testing.assert_array_equal(
        _value(("half_val", bits), dtype=DT_HALF, dims=[2]), np.array([1.5, -2.0], np.float16)
    )
    assert _value(("int_val", [200, -1]), dtype=6, dims=[2]).tolist() == [-56, -1]  # int8
    assert _value(("int_val", [300]), dtype=4, dims=[]).tolist() == 44  # uint8


def test_tensor_content_is_little_endian_row_major() -> None:
    content = np.arange(6, dtype="<i4").tobytes()
    np.testing.assert_array_equal(
        _value(("tensor_content", content), dtype=DT_INT32), np.arange(6).reshape(2, 3)
    )
    bools = _value(("bool_val", [True, False]), dtype=DT_BOOL, dims=[3])
    assert bools.tolist() == [True, False, False]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (_tensor(DT_INT32, [2, 3], tensor_content=b"\0" * 20), "tensor_content has 20 bytes"),
        (_tensor(DT_STRING, [1], string_val=[b"a"]), "DT_STRING has no kernloom dtype"),
        (_tensor(101, [1]), "DT_FLOAT_REF is a TensorFlow 1 reference type"),
        (_tensor(8, [1], scomplex_val=[1.0, 2.0, 3.0]), "a complex value takes two"),
        (_tensor(DT_FLOAT, [-1, 2]), "dimension -1"),
        (_tensor(DT_FLOAT, [2**20, 2**20], float_val=[1.0]), "more than the limit"),
        (_tensor(DT_FLOAT, [2**40, 2**30], float_val=[1.0]), "more than 2**63-1 elements"),
        (_tensor(20, [1]), "a resource tensor cannot be a constant"),
    ],
)
def test_a_bad_constant_names_file_node_and_attr(tensor: dict[str, Any], message: str) -> None:
    node = {"name": "c", "op": "Const", "attr": {"dtype": {"type": DT_FLOAT}, "value": tensor}}
    with pytest.raises(kl.InvalidArgumentError) as info:
        _load(node)
    assert str(info.value).startswith("<bytes>: node 'c': (op Const) attr 'value': ")
    assert message in str(info.value)


def test_unknown_ops_are_listed_all_at_once_with_their_nodes() -> None:
    nodes = [
        _placeholder("x", [2]),
        {"name": "a", "op": "FancyOp", "input": ["x"]},
        {"name": "b", "op": "OtherOp", "input": ["a"]},
        {"name": "c", "op": "FancyOp", "input": ["b"]},
        {"name": "d", "op": "Softmaxx", "input": ["c"]},
    ]
    with pytest.raises(kl.InvalidArgumentError) as info:
        _load(*nodes)
    message = str(info.value)
    assert message.startswith("<bytes>: 3 op(s) that kernloom does not have: ")
    assert "FancyOp (nodes 'a', 'c')" in message
    assert "OtherOp (node 'b')" in message
    assert "Softmaxx (node 'd') -- Did you mean 'Softmax'" in message


def test_attrs_kernloom_does_not_declare_are_dropped_only_when_harmless() -> None:
    matmul = {
        "name": "m",
        "op": "MatMul",
        "input": ["x", "x"],
        "attr": {"grad_a": {"b": True}, "T": {"type": DT_FLOAT}},
    }
    graph = _load(_placeholder("x", [2, 2]), matmul)
    # kernloom's MatMul and Equal declare these attrs of TF's (issue 21): kept as written.
    assert graph.node("m").attrs["grad_a"] is True
    equal = {"name": "e", "op": "Equal", "input": ["x", "x"]}
    for flag in (1, 0):
        graph = _load(
            _placeholder("x", [2]), {**equal, "attr": {"incompatible_shape_error": {"b": flag}}}
        )
        assert graph.node("e").attrs["incompatible_shape_error"] is bool(flag)
    with pytest.raises(kl.InvalidArgumentError) as info:
        _load(
            _placeholder("x", [2]),
            {"name": "r", "op": "Relu", "input": ["x"], "attr": {"frobnicate": {"i": 1}}},
        )
    assert "node 'r': (op Relu) attr 'frobnicate', which kernloom's Relu does not declare" in str(
        info.value
    )


def test_runtime_attrs_are_dropped_and_colocation_kept_for_nodes_that_exist() -> None:
    shapes = {
        "list": message_class("AttrValue").ListValue(shape=[message_class("TensorShapeProto")()])
    }
    colocation = {"list": {"s": [b"loc:@x", b"loc:@gone"]}}
    relu = {
        "name": "r",
        "op": "Relu",
        "input": ["x"],
        "attr": {"_output_shapes": shapes, "_class": colocation, "_XlaCompile": {"b": True}},
    }
    graph = _load(_placeholder("x", [2]), relu)
    assert graph.node("r").colocation_names == ["x"]
    assert set(graph.node("r").attrs) == {"T", "_class"}


def test_nodes_may_come_in_any_order() -> None:
    graph_def = message_class("GraphDef")()
    graph_def.ParseFromString((FIXTURES / "while_loop.pb").read_bytes())
    nodes = list(graph_def.node)[::-1]
    del graph_def.node[:]
    graph_def.node.extend(nodes)
    _assert_matches_tf("while_loop", import_graph_def(graph_def.SerializeToString()))


def test_a_cycle_that_is_not_a_loop_is_refused_with_its_path() -> None:
    nodes = [
        _placeholder("x", [2]),
        {"name": "a", "op": "AddV2", "input": ["x", "b"]},
        {"name": "b", "op": "Relu", "input": ["a"]},
    ]
    with pytest.raises(kl.InvalidArgumentError, match=r"cycle .*: 'a' <- 'b' <- 'a'"):
        _load(*nodes)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "r", "op": "Relu", "input": ["nowhere"]}, "input 'nowhere' refers to no node"),
        ({"name": "r", "op": "Relu", "input": ["x:one"]}, "is not 'node', 'node:slot' or '^node'"),
        ({"name": "r", "op": "Relu", "input": ["x:3"]}, "asks for output 3, but node 'x'"),
        (
            {"name": "r", "op": "Relu", "input": ["x", "x"]},
            "op Relu takes 1 input(s), got 2",
        ),
        ({"name": "r", "op": "Relu", "input": ["x"], "device": "/gadget:0"}, "malformed device"),
        ({"name": "x", "op": "Relu", "input": ["x"]}, "duplicate node name"),
        ({"name": "", "op": "Relu"}, "node #1 has name ''"),
        ({"name": "r", "op": ""}, "the node has no op"),
    ],
)
def test_a_bad_node_is_named_with_what_is_wrong(node: dict[str, Any], message: str) -> None:
    with pytest.raises(kl.InvalidArgumentError) as info:
        _load(_placeholder("x", [2]), node)
    assert str(info.value).startswith("<bytes>: ")
    assert message in str(info.value)


def test_devices_are_requested_as_written_unless_cleared() -> None:
    relu = {"name": "r", "op": "Relu", "input": ["x"], "device": "/device:CPU:0"}
    assert _load(_placeholder("x", [2]), relu).node("r").requested_device == "/device:CPU:0"
    cleared = _load(_placeholder("x", [2]), relu, clear_devices=True)
    assert cleared.node("r").requested_device == ""


def test_a_function_library_is_refused() -> None:
    graph_def = _graph_def(_placeholder("x", [2]))
    graph_def.library.function.add()
    with pytest.raises(kl.InvalidArgumentError, match=r"function library \(1 function"):
        import_graph_def(graph_def.SerializeToString())


def test_a_placeholder_s_partial_shape_is_kept() -> None:
    graph = _load(_placeholder("x", [-1, 3]), _placeholder("y"))
    assert graph.tensor("x:0").shape.dims == (None, 3)
    assert graph.tensor("y:0").shape.dims is None


# -- malformed files ------------------------------------------------------------------------


def _loads_or_names(source: Any, name: str, **options: Any) -> None:
    """The property every input has: a graph, or kernloom's error naming the source."""
    message = None
    try:
        import_graph_def(source, max_bytes=1 << 20, **options)
    except kl.InvalidArgumentError as exc:
        message = str(exc)
    assert message is None or message.startswith(f"{name}: "), message


def test_every_truncation_of_a_real_file_loads_or_names_the_file(tmp_path: Path) -> None:
    data = (FIXTURES / "while_loop.pb").read_bytes()
    path = tmp_path / "cut.pb"
    for end in range(0, len(data), 7):
        path.write_bytes(data[:end])
        _loads_or_names(path, str(path))


def test_corrupt_bytes_name_the_file_and_say_why(tmp_path: Path) -> None:
    path = tmp_path / "model.pb"
    path.write_bytes(b"\x0a\x05abc")  # a node of 5 bytes, 3 present
    with pytest.raises(kl.InvalidArgumentError, match=rf"^{re.escape(str(path))}: not a binary"):
        import_graph_def(path)
    path.write_bytes(b"\x10\x01")  # field 2 (library) as a varint
    with pytest.raises(kl.InvalidArgumentError, match=r"field 'library' \(number 2\) is encoded"):
        import_graph_def(path)
    path.write_bytes(b"\x0a\x02\x08\x01")  # a node whose field 1 (name) is a varint
    with pytest.raises(kl.InvalidArgumentError, match=r"field 'name' \(number 1\) is encoded as"):
        import_graph_def(path)
    text = tmp_path / "model.pbtxt"
    text.write_text('node { name: "x" op: 3 }')
    with pytest.raises(kl.InvalidArgumentError, match=r"model.pbtxt: not a GraphDef in text"):
        import_graph_def(text)


def test_a_file_over_the_limit_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"more than the limit of 100 B; pass"):
        import_graph_def(FIXTURES / "mlp.pb", max_bytes=100)
    with pytest.raises(OSError, match=r"absent.pb"):
        import_graph_def(tmp_path / "absent.pb")
    with pytest.raises(kl.InvalidArgumentError, match=r"takes a file path or bytes"):
        import_graph_def(3)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_load_or_name_the_source(data: bytes) -> None:
    _loads_or_names(data, "<bytes>")


_SEEDS = {name: (FIXTURES / name).read_bytes() for name in ("mlp.pb", "while_loop.pb")}


@st.composite
def _byte_mutations(draw: st.DrawFn) -> bytes:
    data = bytearray(_SEEDS[draw(st.sampled_from(sorted(_SEEDS)))])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            data[at] = draw(st.integers(0, 255))
        elif action == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_byte_mutations())
def test_byte_mutations_of_real_files_load_or_name_the_source(data: bytes) -> None:
    _loads_or_names(data, "<bytes>", text=False)


def _mutate_message(draw: st.DrawFn, graph_def: Any) -> None:
    """One semantic mutation: a dtype, a dimension, a tensor's bytes, an op, an input or
    an attr's kind replaced by another value."""
    node = graph_def.node[draw(st.integers(0, len(graph_def.node) - 1))]
    names = [n.name for n in graph_def.node]
    action = draw(
        st.sampled_from(["dtype", "dim", "content", "op", "input", "attr_kind", "drop_attr"])
    )
    keys = sorted(node.attr)
    if action == "op":
        node.op = draw(st.sampled_from(["Identity", "Relu", "MatMul", "Merge", "Const", "NoOp"]))
    elif action == "input":
        node.input.append(draw(st.sampled_from(names)) + draw(st.sampled_from(["", ":1", ":0"])))
    elif keys:
        value = node.attr[draw(st.sampled_from(keys))]
        if action == "dtype":
            dtype = draw(st.integers(-1, 140))
            if value.HasField("tensor"):
                value.tensor.dtype = max(dtype, 0)
            else:
                value.type = max(dtype, 0)
        elif action == "dim" and value.HasField("tensor"):
            value.tensor.tensor_shape.dim.add(size=draw(st.integers(-3, 2**40)))
        elif action == "dim":
            value.shape.dim.add(size=draw(st.integers(-3, 2**40)))
        elif action == "content" and value.HasField("tensor"):
            content = value.tensor.tensor_content
            value.tensor.tensor_content = content[: draw(st.integers(0, len(content)))]
        elif action == "attr_kind":
            value.Clear()
            which = draw(st.sampled_from(["i", "f", "b", "s", "list"]))
            if which == "list":
                value.list.i.extend(draw(st.lists(st.integers(-5, 5), max_size=4)))
            else:
                setattr(value, which, {"i": 3, "f": 0.5, "b": True, "s": b"SAME"}[which])
        elif action == "drop_attr":
            value.Clear()


@st.composite
def _message_mutations(draw: st.DrawFn) -> bytes:
    graph_def = message_class("GraphDef")()
    graph_def.ParseFromString(_SEEDS[draw(st.sampled_from(sorted(_SEEDS)))])
    for _ in range(draw(st.integers(1, 3))):
        _mutate_message(draw, graph_def)
    serialized: bytes = graph_def.SerializeToString()
    return serialized


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_message_mutations())
def test_semantic_mutations_of_real_graphs_load_or_name_the_source(data: bytes) -> None:
    _loads_or_names(data, "<bytes>", text=False)


# -- tf.switch_case: _SwitchN ----------------------------------------------------------------
# TensorFlow writes tf.switch_case as a functional Case, even after disable_control_flow_v2();
# freezing lowers it to _SwitchN (forward the data to output `output_index`, an index out of
# range to the last; the other outputs are dead) and Merge. The importer rewrites each
# _SwitchN into Switch nodes on `index == k` (and `index` out of [0, N-1) for the last).


def _runs(name: str) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """The runs ``make_fixtures.switch_case`` recorded: (feeds, TensorFlow's values)."""
    runs = []
    with np.load(FIXTURES / f"{name}.npz") as archive:

        def members(prefix: str) -> dict[str, np.ndarray]:
            return {
                k.removeprefix(prefix): archive[k] for k in archive.files if k.startswith(prefix)
            }

        while any(k.startswith(f"{len(runs)}/fetch/") for k in archive.files):
            runs.append((members(f"{len(runs)}/feed/"), members(f"{len(runs)}/fetch/")))
    return runs


@pytest.mark.parametrize("optimizer", [True, False], ids=["optimizer", "no-optimizer"])
@pytest.mark.parametrize("name", ["switch_case", "switch_case_nested", "switch_case_v1"])
def test_a_lowered_switch_case_gives_tensorflow_s_values(name: str, optimizer: bool) -> None:
    graph = import_graph_def(FIXTURES / f"{name}.pb")
    assert "_SwitchN" not in {node.op for node in graph.nodes}
    runs = _runs(name)
    indices = {int(feeds["n:0"]) for feeds, _ in runs}
    assert min(indices) < 0 or name == "switch_case_v1"
    assert max(indices) > 2  # out of range: the last branch
    with kl.Session(graph, config=kl.SessionConfig(graph_optimizer=optimizer)) as session:
        for feeds, values in runs:
            got = session.run(list(values), feed_dict=feeds)
            for (fetch, want), value in zip(values.items(), got, strict=True):
                assert value.dtype == want.dtype and value.shape == want.shape, fetch
                np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=f"{fetch} {feeds}")
            if name != "switch_case_nested":  # branches x and 2x, checked by hand too
                x, n = feeds["x:0"], int(feeds["n:0"])
                np.testing.assert_array_equal(got[0], x if n == 0 else 2 * x)


def _int_placeholder(name: str) -> dict[str, Any]:
    return {"name": name, "op": "Placeholder", "attr": {"dtype": {"type": DT_INT32}}}


def _switch_n(num_outs: int | None = 3, inputs: tuple[str, ...] = ("x", "i")) -> dict[str, Any]:
    attr: dict[str, Any] = {"T": {"type": DT_FLOAT}}
    if num_outs is not None:
        attr["num_outs"] = {"i": num_outs}
    return {"name": "s", "op": "_SwitchN", "input": list(inputs), "attr": attr}


def test_switch_n_forwards_to_the_output_its_index_names_and_the_last_when_out_of_range() -> None:
    nodes = [
        _placeholder("x", [2]),
        _int_placeholder("i"),
        _switch_n(),
        *({"name": f"o{k}", "op": "Neg", "input": [f"s:{k}"]} for k in range(3)),
        {"name": "m", "op": "Merge", "input": ["o0", "o1", "o2"], "attr": {"N": {"i": 3}}},
        {"name": "after", "op": "NoOp", "input": ["^s"]},
    ]
    graph = _load(*nodes)
    x = np.array([1.5, -2.0], np.float32)
    with kl.Session(graph) as session:
        for index, taken in ((0, 0), (1, 1), (2, 2), (3, 2), (-1, 2), (2**31 - 1, 2)):
            value, chosen = session.run(
                ["m:0", "m:1"], feed_dict={"x:0": x, "i:0": np.int32(index)}, targets=["after"]
            )
            np.testing.assert_array_equal(value, -x)
            assert chosen == taken, index
            session.run(f"o{taken}:0", feed_dict={"x:0": x, "i:0": np.int32(index)})
            for dead in {0, 1, 2} - {taken}:  # a branch not taken is dead, as in TensorFlow
                with pytest.raises(kl.KernloomError):
                    session.run(f"o{dead}:0", feed_dict={"x:0": x, "i:0": np.int32(index)})


def test_switch_n_with_one_output_always_forwards() -> None:
    graph = _load(
        _placeholder("x", [2]),
        _int_placeholder("i"),
        _switch_n(1),
        {"name": "y", "op": "Neg", "input": ["s"]},
    )
    with kl.Session(graph) as session:
        for index in (0, 5, -3):
            y = session.run(
                "y:0", feed_dict={"x:0": np.ones(2, np.float32), "i:0": np.int32(index)}
            )
            np.testing.assert_array_equal(y, -np.ones(2))


@pytest.mark.parametrize(
    ("switch", "consumer", "message"),
    [
        (
            _switch_n(3),
            "s:3",
            "node 'y': input 's:3' asks for output 3, but node 's' (op _SwitchN) has 3 output(s)",
        ),
        (_switch_n(None), "s", "node 's': (op _SwitchN) has no attr 'num_outs'"),
        (_switch_n(0), "s", "node 's': (op _SwitchN) attr 'num_outs' = 0; it must be at least 1"),
        (
            _switch_n(2, ("x",)),
            "s",
            "node 's': (op _SwitchN) takes 2 inputs (data, output_index), got 1",
        ),
    ],
)
def test_a_malformed_switch_n_is_named_with_what_is_wrong(
    switch: dict[str, Any], consumer: str, message: str
) -> None:
    with pytest.raises(kl.InvalidArgumentError) as info:
        _load(
            _placeholder("x", [2]),
            _int_placeholder("i"),
            switch,
            {"name": "y", "op": "Neg", "input": [consumer]},
        )
    assert str(info.value).startswith("<bytes>: ")
    assert message in str(info.value)


def test_an_unlowered_case_is_refused_with_the_route_that_lowers_it() -> None:
    # TensorFlow 2.21 writes StatelessCase and its branch functions even when the graph is
    # built after disable_control_flow_v2(): that advice would not help, freezing does.
    path = FIXTURES / "switch_case_unlowered.pb"
    for source, name in (
        (path, str(path)),
        (
            _graph_def(
                _int_placeholder("i"), {"name": "c", "op": "Case", "input": ["i"]}
            ).SerializeToString(),
            "<bytes>",
        ),
    ):
        with pytest.raises(kl.InvalidArgumentError) as info:
            import_graph_def(source)
        message = str(info.value)
        assert message.startswith(f"{name}: ")
        assert "Case" in message
        assert "disable_control_flow_v2" not in message
        assert "tf.switch_case" in message and "even with control flow v2 disabled" in message
        assert "lower_control_flow=True" in message and "tf.compat.v1.wrap_function" in message


# -- the command line and the docs ----------------------------------------------------------


@pytest.mark.parametrize("file", ["mlp.pb", "mlp.pbtxt"])
def test_kernloom_run_takes_a_tensorflow_graph(
    file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds, expected = _reference("mlp")
    np.save(tmp_path / "x.npy", feeds["x:0"])
    out = tmp_path / "y.npy"
    code = main(
        [
            "run",
            str(FIXTURES / file),
            "--feed",
            f"x={tmp_path / 'x.npy'}",
            "--fetch",
            "Identity",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.load(out), expected["Identity:0"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("mlp.pb", "frozen_graph"),
        ("mlp.pb", "model.graphdef"),
        ("mlp.pbtxt", "model.prototxt"),
        ("mlp.pbtxt", "model.pbtext"),
    ],
)
def test_kernloom_run_takes_a_tensorflow_graph_under_other_names(
    source: str, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names import_graph_def reads (by suffix or by content) run from the command line
    too: they were read as kernloom's JSON ("not valid JSON", "not UTF-8 text")."""
    feeds, expected = _reference("mlp")
    graph_file = tmp_path / name
    graph_file.write_bytes((FIXTURES / source).read_bytes())
    np.save(tmp_path / "x.npy", feeds["x:0"])
    out = tmp_path / "y.npy"
    args = ["run", str(graph_file), "--feed", f"x={tmp_path / 'x.npy'}", "--fetch", "Identity"]
    code = main([*args, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.load(out), expected["Identity:0"], rtol=1e-5, atol=1e-6)


def test_a_saved_model_file_is_named_as_one_with_how_to_freeze_it(tmp_path: Path) -> None:
    """A SavedModel's saved_model.pb begins with saved_model_schema_version (field 1, a
    number), where a GraphDef has its nodes: the error says it is a SavedModel and how to
    freeze it, not that field 'node' is corrupt."""
    saved = tmp_path / "saved_model.pb"
    saved.write_bytes(b"\x08\x01" + b"\x12\x00")  # schema version 1, one empty MetaGraphDef
    with pytest.raises(kl.InvalidArgumentError) as info:
        import_graph_def(saved)
    message = str(info.value)
    assert "a SavedModel's saved_model.pb" in message
    assert "convert_variables_to_constants_v2" in message and "field 'node'" not in message


def test_kernloom_run_reports_a_broken_tensorflow_graph_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.pb"
    broken.write_bytes((FIXTURES / "mlp.pb").read_bytes()[:-9])
    code = main(["run", str(broken), "--fetch", "Identity"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: {broken}: " in err and "Traceback" not in err


def test_every_python_block_in_the_tensorflow_guide_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the docs suite runs them: in order, in one namespace, in a fresh directory;
    a block marked ``python no-test`` (it needs TensorFlow) is skipped."""
    monkeypatch.chdir(tmp_path)
    text = DOCS.read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert blocks, "docs/tensorflow.md has no runnable python block"
    namespace: dict[str, Any] = {"__name__": "docs:tensorflow.md"}
    for block in blocks:
        exec(compile(block, str(DOCS), "exec", dont_inherit=True), namespace)


@pytest.mark.parametrize(("op", "expected"), [("Equal", False), ("NotEqual", True)])
def test_the_guide_says_incompatible_shape_error_false_is_computed_as_tensorflow_does(
    op: str, expected: bool
) -> None:
    # TensorFlow 2.21: tf.raw_ops.Equal(x=[1., 2.], y=[1., 2., 3.],
    # incompatible_shape_error=False) is a scalar False (NotEqual: a scalar True).
    text = " ".join(DOCS.read_text().split())
    assert "`incompatible_shape_error = false` compute what TensorFlow does" in text
    assert "`Equal.incompatible_shape_error` when true" not in text  # the old claim
    graph = _load(
        _placeholder("a"),
        _placeholder("b"),
        {
            "name": "e",
            "op": op,
            "input": ["a", "b"],
            "attr": {"T": {"type": DT_FLOAT}, "incompatible_shape_error": {"b": False}},
        },
    )
    feeds = {"a:0": np.array([1.0, 2.0], np.float32), "b:0": np.array([1.0, 2.0, 3.0], np.float32)}
    (value,) = _run(graph, feeds, ["e:0"])
    assert value.shape == () and value.dtype == np.bool_ and bool(value) is expected


def test_the_format_of_bytes_is_recognised_whatever_their_first_byte() -> None:
    """A binary node of 110 bytes starts ``\\n n``, a text file may start with a comment."""
    long_name = "n" * 102  # with op NoOp, a NodeDef of 110 bytes: b"n"
    binary = _graph_def({"name": long_name, "op": "NoOp"}).SerializeToString()
    assert binary[1:2] == b"n"
    assert import_graph_def(binary).node(long_name).op == "NoOp"
    from google.protobuf import text_format

    text = "# exported by hand\n" + text_format.MessageToString(_graph_def(_placeholder("x")))
    assert import_graph_def(text.encode()).node("x").op == "Placeholder"


def test_nesting_deeper_than_protobuf_allows_is_refused() -> None:
    depth = 3000
    text = "node { name: 'x' op: 'NoOp' experimental_type { " + "args { " * depth
    text += "}" * (depth + 2)
    with pytest.raises(kl.InvalidArgumentError, match=r"^<bytes>: not a GraphDef in text"):
        import_graph_def(text.encode(), text=True)
    full_type = message_class("FullTypeDef")()
    inner = full_type
    for _ in range(200):
        inner = inner.args.add()
    nested = message_class("GraphDef")()
    nested.node.add(name="x", op="NoOp").experimental_type.CopyFrom(full_type)
    with pytest.raises(kl.InvalidArgumentError, match=r"^<bytes>: not a binary GraphDef"):
        import_graph_def(nested.SerializeToString(), text=False)
