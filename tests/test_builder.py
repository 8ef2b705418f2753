"""The graph builder: names, scopes, overloads, wrapper signatures, build-time errors."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path

import numpy as np
import pytest

import kernloom as kl


@pytest.fixture
def g() -> kl.Graph:
    graph = kl.Graph()
    with graph.as_default():
        yield graph  # type: ignore[misc]


def test_names_are_made_unique_like_tensorflow(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    a, b, c = x + x, x + x, kl.ops.add(x, x, name="add")
    assert [t.node.name for t in (a, b, c)] == ["add", "add_1", "add_2"]
    assert kl.ops.relu(x, name="add_1").node.name == "add_1_1"
    assert kl.placeholder(kl.float32, name="x").node.name == "x_1"
    with pytest.raises(kl.InvalidArgumentError, match="is not a valid node name"):
        kl.placeholder(kl.float32, name="bad name")


def test_name_scopes_nest_and_are_unique(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2], name="x")
    with kl.name_scope("layer") as scope:
        assert scope == "layer/"
        y = kl.ops.relu(x)
        with kl.name_scope("inner"):
            z = kl.ops.tanh(y)
    with kl.name_scope("layer"):
        w = kl.ops.relu(x)
    assert (y.node.name, z.node.name, w.node.name) == (
        "layer/relu",
        "layer/inner/tanh",
        "layer_1/relu",
    )
    assert g.tensor("layer/inner/tanh:0") is z and g.tensor("layer/relu") is y


def test_device_colocation_label_and_control_scopes(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    with kl.device("GPU:0"):
        on_gpu = kl.ops.relu(x)
        with kl.device("/cpu:0"):
            on_cpu = kl.ops.relu(x)
    assert (on_gpu.node.requested_device, on_cpu.node.requested_device) == ("GPU:0", "/cpu:0")
    with kl.colocate_with(on_gpu):
        near = kl.ops.tanh(x)
    assert near.node.colocation_names == [on_gpu.node.name]
    with kl.kernel_label("einsum"):
        labelled = x @ x
    with kl.kernel_label({"MatMul": "blocked"}):
        mapped, plain = x @ x, kl.ops.relu(x)
    assert (labelled.node.kernel_label, mapped.node.kernel_label, plain.node.kernel_label) == (
        "einsum",
        "blocked",
        "",
    )
    with kl.control_dependencies([on_gpu, near.node]):
        after = kl.ops.relu(x)
        with kl.control_dependencies(None):
            free = kl.ops.relu(x)
        uses = kl.ops.relu(on_gpu)  # a data input already orders it: no duplicate control edge
    assert [n.name for n in after.node.control_inputs] == [on_gpu.node.name, near.node.name]
    assert free.node.control_inputs == []
    assert [n.name for n in uses.node.control_inputs] == [near.node.name]
    assert after.node.input_names() == ["x:0", f"^{on_gpu.node.name}", f"^{near.node.name}"]
    with (
        pytest.raises(kl.InvalidArgumentError, match="malformed device name 'gpu0'"),
        kl.device("gpu0"),
    ):
        pass


def test_operator_overloads_build_the_right_ops(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 2], name="x")
    cases = {
        "Add": x + 1,
        "Sub": 1 - x,
        "Mul": x * x,
        "RealDiv": x / 2,
        "Pow": x**2,
        "MatMul": x @ x,
        "Neg": -x,
        "Less": x < 0,
        "Greater": x > 0,
    }
    for op, tensor in cases.items():
        assert tensor.node.op == op
    assert (1 - x).node.inputs[1] is x  # reflected: x is the right operand
    assert cases["Add"].dtype is kl.float32  # the Python 1 became a float32 constant
    assert cases["Less"].dtype is kl.bool_
    with pytest.raises(TypeError, match="symbolic and has no truth value"):
        bool(x > 0)
    assert {x: 1}[x] == 1  # == stays identity, so tensors can be dict keys


def test_python_values_become_constants_of_the_right_dtype(g: kl.Graph) -> None:
    i = kl.placeholder(kl.int64, [3])
    assert (i + 2).node.inputs[1].dtype is kl.int64
    assert kl.constant(1.5).dtype is kl.float32 and kl.constant(3).dtype is kl.int32
    assert kl.constant(np.float64(1)).dtype is kl.float64  # numpy keeps its dtype
    assert kl.constant([1, 2], dtype="int8").dtype is kl.int8
    with pytest.raises(kl.InvalidArgumentError, match="without losing its fractional part"):
        i + 2.5


def test_generated_wrappers_have_real_signatures_and_docs() -> None:
    sig = inspect.signature(kl.ops.mat_mul)
    assert str(sig) == (
        "(a, b, *, transpose_a=False, transpose_b=False, grad_a=False, grad_b=False, name=None)"
    )
    assert str(inspect.signature(kl.ops.concat_v2)) == "(values, axis, *, name=None)"
    assert str(inspect.signature(kl.ops.cast)) == "(x, *, DstT, Truncate=False, name=None)"
    assert (
        str(inspect.signature(kl.ops.arg_max))
        == "(input, dimension, *, output_type=kernloom.int64, name=None)"
    )
    doc = kl.ops.mat_mul.__doc__ or ""
    assert "MatMul(a: T, b: T) -> (product: T)" in doc and "transpose_a: bool = false" in doc
    assert kl.ops.mat_mul.__name__ == "mat_mul"
    assert "mat_mul" in dir(kl.ops) and "add_n" in dir(kl.ops)
    with pytest.raises(AttributeError, match=r"no op wrapper 'matmul'\. Did you mean 'mat_mul'"):
        kl.ops.matmul  # noqa: B018
    with pytest.raises(
        TypeError, match=r"mat_mul\(a, b, \*, transpose_a=False.*unexpected keyword"
    ):
        kl.ops.mat_mul(1, 2, transpose=True)


def test_wrappers_return_nodes_for_ops_without_outputs(g: kl.Graph) -> None:
    done = kl.ops.no_op(name="done")
    assert isinstance(done, kl.Node) and done.name == "done"


def test_build_time_errors_name_node_op_and_shapes(g: kl.Graph) -> None:
    x = kl.placeholder(kl.float32, [2, 3], name="x")
    with pytest.raises(
        kl.InvalidArgumentError,
        match=r"node 'mat_mul' \(op MatMul\): inner dimensions differ: 3 vs 2.*\(2, 3\), \(2, 3\)",
    ):
        x @ x
    with pytest.raises(
        kl.InvalidArgumentError,
        match=r"node 'add' \(op Add\): shapes \(2, 3\), \(4,\) cannot be broadcast",
    ):
        x + kl.constant(np.ones(4, np.float32))
    with pytest.raises(
        kl.InvalidArgumentError, match=r"node 'reshape' \(op Reshape\): cannot reshape 6 elements"
    ):
        kl.ops.reshape(x, [4, -1])
    with pytest.raises(
        kl.InvalidArgumentError,
        match=r"node 'add' \(op Add\): input 'y: T' has T=int32, but T=float32",
    ):
        x + kl.placeholder(kl.int32, [2, 3])
    with pytest.raises(
        kl.InvalidArgumentError, match=r"node 'relu' \(op Relu\): .*value bool is not allowed"
    ):
        kl.ops.relu(kl.placeholder(kl.bool_))
    assert "mat_mul" not in g and "reshape" not in g  # failed nodes are not added
    assert (x @ kl.ops.transpose(x, [1, 0])).node.name == "mat_mul"  # nor their names used


def test_inputs_from_another_graph_are_refused() -> None:
    a, b = kl.Graph(), kl.Graph()
    with a.as_default():
        x = kl.placeholder(kl.float32, name="x")
    with b.as_default(), pytest.raises(kl.InvalidArgumentError, match="belongs to another graph"):
        b.add_node("Relu", [x])


def test_default_graphs_are_per_thread() -> None:
    g = kl.Graph()
    seen: list[kl.Graph] = []
    with g.as_default():
        thread = threading.Thread(target=lambda: seen.append(kl.get_default_graph()))
        thread.start()
        thread.join()
        assert kl.get_default_graph() is g
    assert seen[0] is not g


def _names_under_scopes() -> dict[str, str]:
    """What each ``kl.name_scope`` yields and the name of a constant built in it, for a
    sequence of scopes also run with ``tf.compat.v1.name_scope`` (TensorFlow 2.21)."""

    def c(name: str = "x") -> str:
        return kl.constant(1.0, name=name).name

    seen: dict[str, str] = {}
    with kl.name_scope("a/b") as s:
        seen["a/b"] = f"{s} {c()}"
    with kl.name_scope("a/b") as s:
        seen["a/b again"] = f"{s} {c()}"
    with kl.name_scope("a") as s:
        seen["a after a/b"] = f"{s} {c()}"
    with kl.name_scope("s") as s:
        seen["s"] = f"{s} {c('y')}"
    with kl.name_scope("s/") as s:
        seen["s/"] = f"{s} {c()}"
    with kl.name_scope("s") as s:
        seen["s again"] = f"{s} {c()}"
    with kl.name_scope("outer"):
        with kl.name_scope("s/") as s:
            seen["outer>s/"] = f"{s} {c()}"
        with kl.name_scope("inner") as s:
            seen["outer>inner"] = f"{s} {c()}"
            with kl.name_scope(None) as s3:
                seen["None"] = f"{s3} {c('z')}"
            with kl.name_scope("") as s3:
                seen["''"] = f"{s3} {c('z')}"
            with kl.name_scope("_u") as s3:
                seen["_u nested"] = f"{s3} {c()}"
            with kl.name_scope("-u") as s3:
                seen["-u nested"] = f"{s3} {c()}"
        with kl.name_scope("/") as s:
            seen["outer>/"] = f"{s} {c()}"
        with kl.name_scope("p/q/") as s:
            seen["outer>p/q/"] = f"{s} {c()}"
    with kl.name_scope("Foo") as s:
        seen["Foo"] = f"{s} {c()}"
    with kl.name_scope("foo") as s:
        seen["foo"] = f"{s} {c()}"
    c("q")
    with kl.name_scope("q") as s:
        seen["q after node q"] = f"{s} {c()}"
    with kl.name_scope("r"):
        pass
    seen["node r after scope r"] = c("r")
    with kl.name_scope("k_1"):
        pass
    with kl.name_scope("k"):
        pass
    with kl.name_scope("m//n") as s:
        seen["m//n"] = f"{s} {c()}"
    return seen


def test_name_scopes_follow_tensorflow_1_rules(g: kl.Graph, tmp_path: Path) -> None:
    seen = _names_under_scopes()
    # TensorFlow 2.21's results: tf.compat.v1.name_scope in a tf.compat.v1.Graph, the same
    # sequence, printing the scope each `with` yields and the constant's tensor name.
    assert seen == {
        "a/b": "a/b/ a/b/x:0",
        "a/b again": "a/b_1/ a/b_1/x:0",
        "a after a/b": "a/ a/x:0",
        "s": "s/ s/y:0",
        "s/": "s/ s/x:0",  # re-entered: not made unique
        "s again": "s_1/ s_1/x:0",
        "outer>s/": "s/ s/x_1:0",  # from the root, not outer/s
        "outer>inner": "outer/inner/ outer/inner/x:0",
        "None": " z:0",  # the root scope
        "''": " z_1:0",
        "_u nested": "outer/inner/_u/ outer/inner/_u/x:0",
        "-u nested": "outer/inner/-u/ outer/inner/-u/x:0",
        "outer>/": "/ x:0",
        "outer>p/q/": "p/q/ p/q/x:0",
        "Foo": "Foo/ Foo/x:0",
        "foo": "foo_1/ foo_1/x:0",  # names compare without case
        "q after node q": "q_1/ q_1/x:0",
        "node r after scope r": "r_1:0",
        "m//n": "m//n/ m//n/x:0",
    }
    with kl.name_scope("k") as twice:  # after k_1 and k (TF 2.21: 'k_2/')
        assert twice == "k_2/"
    # Every name is one Graph.load takes back, and the graph runs.
    path = tmp_path / "scopes.json"
    g.save(path)
    loaded = kl.Graph.load(path)
    assert [n.name for n in loaded.nodes] == [n.name for n in g.nodes]
    with kl.Session(loaded) as sess:
        assert sess.run(["a/b/x:0", "s/x:0", "outer/inner/_u/x:0", "m//n/x:0"]) == [1.0] * 4


@pytest.mark.parametrize(
    ("outer", "name", "error", "message"),
    [
        # TensorFlow 2.21 refuses the same names (ValueError "... is not a valid root scope
        # name", TypeError for 3); the messages are kernloom's.
        (None, "_u", kl.InvalidArgumentError, "starting with a letter, a digit or '.' at the root"),
        (None, "a b", kl.InvalidArgumentError, "is not a valid scope name"),
        (None, "a:0", kl.InvalidArgumentError, "is not a valid scope name"),
        (None, "/x", kl.InvalidArgumentError, "is not a valid scope name"),
        (None, 3, TypeError, "a name scope is a str"),
        ("o", "a b", kl.InvalidArgumentError, r"is not a valid scope name.*opened inside 'o'"),
        # kernloom's own: '_x/' re-enters a root scope '_x' that no node name may start.
        ("o", "_x/", kl.InvalidArgumentError, "re-enters that scope from the root"),
    ],
)
def test_a_bad_name_scope_is_an_error_naming_it(
    g: kl.Graph, outer: str | None, name: object, error: type[Exception], message: str
) -> None:
    with (
        kl.name_scope(outer),
        pytest.raises(error, match=message) as info,
        kl.name_scope(name),  # type: ignore[arg-type]
    ):
        pass
    assert repr(name) in str(info.value)
    assert kl.constant(1.0, name="after").name == "after:0"  # the scope was left as it was


def test_control_dependencies_take_what_tensorflow_takes(g: kl.Graph, tmp_path: Path) -> None:
    other = kl.Graph()
    with other.as_default():
        elsewhere = kl.constant(1.0, name="other")
    a = kl.constant(1.0, name="a")
    v = kl.Variable(np.float32(5.0), name="v")

    def control_inputs(deps: object) -> list[str]:
        with kl.control_dependencies(deps):  # type: ignore[arg-type]
            return [n.name for n in kl.ops.no_op().control_inputs]

    # TensorFlow 2.21 (tf.compat.v1.control_dependencies, then tf.no_op's control inputs):
    assert control_inputs([v]) == ["v"]  # a variable: its handle's op
    assert control_inputs(["a"]) == ["a"]  # a node's name
    assert control_inputs(["a:0"]) == ["a"]  # a tensor's name
    assert control_inputs(None) == []
    assert control_inputs([]) == []
    # TF 2.21: ValueError "Tensor ... is not an element of this graph." (the dependency used
    # to be opened on the other graph and silently dropped here).
    for foreign, what in ((elsewhere, "tensor 'other:0'"), (elsewhere.node, "node 'other'")):
        with pytest.raises(kl.InvalidArgumentError, match=f"{what} is not an element of this"):
            control_inputs([foreign])
    # TF 2.21: KeyError "The name 'nope' refers to an Operation not in the graph." and
    # "... 'a', exists but only has 1 outputs."
    with pytest.raises(kl.NotFoundError, match=r"control_dependencies: item 0: .*'nope'"):
        control_inputs(["nope"])
    with pytest.raises(kl.InvalidArgumentError, match=r"'a' \(op Const\) has 1 output"):
        control_inputs(["a:3"])
    # TF 2.21: TypeError "Can not convert a NoneType into a Tensor or Operation." (and int).
    for bad in ([None], [a, 3]):
        with pytest.raises(TypeError, match=r"item \d: got (None|3) .*expected a kl.Tensor"):
            control_inputs(bad)
    with pytest.raises(TypeError, match=r"takes a list .*wrap a single one in a list"):
        control_inputs(a)  # TF 2.21 refuses a bare tensor too (it cannot be iterated)
    with kl.control_dependencies([v]):
        waits = a * 4.0  # used to hold the kl.Variable itself: Session.run's AttributeError
    assert waits.node.control_inputs == [v.handle.node]
    init = kl.variables_initializer()
    path = tmp_path / "deps.json"
    g.save(path)
    for graph in (g, kl.Graph.load(path)):
        assert graph.node(waits.node.name).input_names() == ["a:0", "Const:0", "^v"]
        with kl.Session(graph) as sess:
            sess.run(init.name)
            assert sess.run(waits.name) == 4.0


def test_colocate_with_takes_a_tensor_node_variable_or_name_of_this_graph(g: kl.Graph) -> None:
    other = kl.Graph()
    with other.as_default():
        elsewhere = kl.constant(1.0, name="other")
    a = kl.constant(1.0, name="a")
    v = kl.Variable(np.float32(5.0), name="v")

    def colocation(target: object) -> list[str]:
        with kl.colocate_with(target):
            return (a * 3.0).node.colocation_names

    assert colocation(v) == ["v"]  # TF 2.21: [b'loc:@v']
    assert colocation(a) == colocation(a.node) == colocation("a") == colocation("a:0") == ["a"]
    # TF 2.21 records the other graph's name ('loc:@other'), which names nothing here;
    # kernloom refuses it, as it refuses a control dependency of another graph.
    with pytest.raises(kl.InvalidArgumentError, match="'other:0' is not an element of this"):
        colocation(elsewhere)
    # TF 2.21: ValueError "Trying to reset colocation (op is None) but ignore_existing is not
    # True"; these used to be AttributeErrors from inside kernloom.
    with pytest.raises(kl.InvalidArgumentError, match=r"kl\.colocate_with: target is None"):
        colocation(None)
    with pytest.raises(TypeError, match=r"kl.colocate_with: got 3 \(int\); expected a kl"):
        colocation(3)
    with pytest.raises(kl.NotFoundError, match=r"kl\.colocate_with: the graph has no node"):
        colocation("nope")
