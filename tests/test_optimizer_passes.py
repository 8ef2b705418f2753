"""Each pass on small graphs: what it rewrites, what it leaves alone and why. Values are
checked against numpy written out by hand, and against the graph run as built."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from optimizer_helpers import activated, node_named, ops_of, run_graph, run_pass, step_graph

import kernloom as kl
import kernloom.plugin as klp
from kernloom.optimizer import (
    ArithmeticSimplification,
    CommonSubexpressionElimination,
    ConstantFolding,
    DeadBranchRemoval,
    ElementwiseFusion,
    KernelEvaluator,
    Pruning,
    Remapper,
)
from kernloom.registry import registry_of


@pytest.fixture(scope="module")
def cpu() -> klp.Device:
    registry = klp.default_registry()
    devices = registry.create_devices()
    return next(d for d in devices if d.device_type == "CPU")


def _evaluator(graph: kl.Graph, cpu: klp.Device) -> KernelEvaluator:
    return KernelEvaluator(registry_of(graph.registry), cpu)


# -- pruning ----------------------------------------------------------------------------------


def test_pruning_removes_identity_chains_but_keeps_a_fetched_identity() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        a = kl.ops.identity(kl.ops.identity(x, name="i1"), name="i2")
        kl.ops.identity(kl.ops.neg(a, name="n"), name="out")
    sg = step_graph(g, ["out:0"], ["x:0"])
    new, ctx = run_pass(Pruning(), sg)
    names = {n.name for n in new.nodes}
    assert "i1" not in names and "i2" not in names
    assert "out" in names  # preserved: its value is fetched
    assert node_named(new.nodes, "n").inputs[0].node.op == "_Arg"
    assert "removed 2 identity node(s): i1, i2" in ctx.notes[0]


def test_pruning_keeps_an_identity_with_a_device_request_or_control_edges() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        moved = kl.ops.identity(x, name="moved")
        moved.node.requested_device = "/device:CPU:0"
        gate = kl.ops.identity(x, name="gate")
        with g.control_dependencies([gate]):
            kl.ops.neg(moved, name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, _ = run_pass(Pruning(), sg)
    assert new is sg
    assert {"moved", "gate"} <= {n.name for n in new.nodes}


# -- constant folding -------------------------------------------------------------------------


def test_constant_folding_evaluates_constant_subgraphs_with_the_kernels(cpu: klp.Device) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        c = kl.ops.exp(kl.constant(np.array([0.0, 1.0, 2.0], np.float32)), name="e")
        d = kl.ops.mul(c, kl.constant(np.float32(2)), name="d")
        kl.ops.add(x, d, name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, ctx = run_pass(ConstantFolding(), sg, evaluate=_evaluator(sg, cpu))
    folded = node_named(new.nodes, "d")
    assert folded.op == "Const" and "e" not in {n.name for n in new.nodes}
    np.testing.assert_allclose(folded.attrs["value"], 2 * np.exp([0.0, 1.0, 2.0]), rtol=1e-6)
    assert folded.attrs["value"].dtype == np.float32
    assert ctx.notes == ["folded 2 node(s) into constants: d, e"]


def test_constant_folding_respects_the_size_cap(cpu: klp.Device) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1000], name="x")
        big = kl.ops.fill(kl.constant(np.array([1000], np.int32)), kl.constant(np.float32(1)))
        kl.ops.add(x, big, name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, ctx = run_pass(
        ConstantFolding(), sg, evaluate=_evaluator(sg, cpu), max_constant_bytes=1000
    )
    assert new is sg
    assert "over the 1000 byte cap: fill" in ctx.notes[0]
    new, _ = run_pass(ConstantFolding(), sg, evaluate=_evaluator(sg, cpu), max_constant_bytes=4000)
    assert node_named(new.nodes, "fill").op == "Const"


def test_a_result_known_to_be_over_the_cap_is_never_computed(cpu: klp.Device) -> None:
    """A 1 GiB ``Fill`` whose shape inference knows its size is refused before the kernel
    runs; one whose size only the kernel finds out is computed, then refused."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, None], name="x")
        dims = kl.constant(np.array([16384, 16384], np.int32))
        kl.ops.add(x, kl.ops.fill(dims, kl.constant(np.float32(1)), name="huge"), name="y")
        # Where's output shape depends on the values: unknown until it runs.
        ones = kl.constant(np.ones(300, bool))
        unknown = kl.ops.where(ones, name="unknown_size")
        kl.ops.add(x, kl.ops.cast(unknown, DstT=kl.float32), name="z")
    sg = step_graph(g, ["y:0", "z:0"], ["x:0"])
    real = _evaluator(sg, cpu)
    evaluated: list[str] = []

    def evaluate(node_def: Any, values: Any) -> Any:
        evaluated.append(node_def.name)
        return real(node_def, values)

    new, ctx = run_pass(ConstantFolding(), sg, evaluate=evaluate, max_constant_bytes=1000)
    assert "huge" not in evaluated and node_named(new.nodes, "huge").op == "Fill"
    assert "unknown_size" in evaluated
    assert "over the 1000 byte cap: huge, unknown_size" in " ".join(ctx.notes)


def test_constant_folding_never_folds_stateful_ops_or_fetched_nodes(cpu: klp.Device) -> None:
    g = kl.Graph()
    with g.as_default():
        v = kl.Variable(np.float32(3), name="v")
        c = kl.ops.neg(kl.constant(np.float32(2)), name="fetched")
        kl.ops.add(v.read_value(), c, name="y")
    sg = step_graph(g, ["y:0", "fetched:0"])
    new, _ = run_pass(ConstantFolding(), sg, evaluate=_evaluator(sg, cpu))
    assert new is sg  # the one constant node is fetched; the rest reads a variable


def test_constant_folding_keeps_a_branch_constant_dead() -> None:
    """A constant expression inside a kl.cond branch is folded with the branch's control
    edge, so the untaken branch stays dead and the Merge picks the taken one."""
    g = kl.Graph()
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        out = kl.cond(
            p,
            lambda: kl.ops.mul(kl.constant(np.float32(2)), kl.constant(np.float32(3))),
            lambda: kl.ops.neg(kl.constant(np.float32(4))),
        )
    for pv, want in ((True, 6.0), (False, -4.0)):
        got, nodes = run_graph(g, out, {p: np.bool_(pv)})
        assert got == want
        assert "Mul" not in ops_of(nodes) and "Neg" not in ops_of(nodes)


# -- arithmetic -------------------------------------------------------------------------------


def test_arithmetic_identities_become_their_operand() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [4], name="x")
        zero, one = kl.constant(np.zeros(4, np.float32)), kl.constant(np.float32(1))
        a = kl.ops.add(zero, x, name="a")
        b = kl.ops.mul(a, one, name="b")
        c = kl.ops.real_div(b, one, name="c")
        d = kl.ops.neg(kl.ops.neg(kl.ops.sub(c, zero, name="s"), name="n1"), name="n2")
        y = kl.ops.tanh(d, name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, ctx = run_pass(ArithmeticSimplification(), sg)
    assert node_named(new.nodes, "y").inputs[0].node.op == "_Arg"
    assert ctx.notes == ["identity: 5 node(s): a, b, c, n2, s"]
    xv = np.array([-0.0, 1.0, -2.0, 3.5], np.float32)
    np.testing.assert_array_equal(run_graph(g, y, {x: xv})[0], np.tanh(xv))


def test_an_identity_that_would_broadcast_is_left_alone() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        y = kl.ops.add(x, kl.constant(np.zeros((2, 3), np.float32)), name="y")
        z = kl.ops.neg(y, name="z")
    sg = step_graph(g, ["z:0"], ["x:0"])
    new, _ = run_pass(ArithmeticSimplification(), sg)
    assert new is sg  # x + zeros[2, 3] has shape [2, 3], not x's
    out, _ = run_graph(g, z, {x: np.ones(3, np.float32)})
    assert out.shape == (2, 3)


def test_a_fetched_identity_keeps_its_name_as_an_identity() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        kl.ops.mul(x, kl.constant(np.float32(1)), name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, _ = run_pass(ArithmeticSimplification(), sg)
    assert node_named(new.nodes, "y").op == "Identity"


def test_constant_push_down_combines_the_constants_of_a_chain() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float64, [3], name="x")
        a = kl.ops.add(x, kl.constant(np.array([1.0, 2.0, 3.0])), name="a")
        b = kl.ops.sub(a, kl.constant(np.float64(10)), name="b")
        c = kl.ops.add(kl.constant(np.float64(0.5)), b, name="c")
        d = kl.ops.sub(c, kl.constant(np.float64(2)), name="d")
        m = kl.ops.mul(
            kl.ops.mul(d, kl.constant(np.float64(3)), name="m1"),
            kl.constant(np.float64(2)),
            name="m2",
        )
    xv = np.array([1.0, -1.0, 4.0])
    out, nodes = run_graph(g, m, {x: xv}, disabled_passes=("elementwise_fusion",))
    np.testing.assert_allclose(out, ((xv + np.array([1.0, 2.0, 3.0])) - 10 + 0.5 - 2) * 6)
    assert sorted(ops_of(nodes)) == ["Add", "Const", "Const", "Mul"]


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint8])
def test_a_sub_from_a_constant_flips_the_sign_and_the_chain_still_folds(dtype: type) -> None:
    """``c - x`` links anywhere in an additive chain: every sign pattern of x and of the
    constants folds to one node (``x + k``, ``x - k`` or ``k - x``) with numpy's values
    (integers wrap alike in either order)."""
    k = [dtype(v) for v in (7, 3, 250, 9, 5, 100)]
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [4], name="x")
        c = [kl.constant(v) for v in k]
        y = kl.ops.sub(c[0], kl.ops.sub(x, c[1]))  # 7 - (x - 3)
        y = kl.ops.add(kl.ops.sub(c[2], y), c[3])  # (250 - y) + 9
        y = kl.ops.sub(kl.ops.sub(y, c[4]), c[5])  # (y - 5) - 100
        y = kl.ops.sub(c[1], kl.ops.add(c[0], y), name="y")  # 3 - (7 + y)
    xv = np.array([0, 1, 2, 200], dtype)
    with np.errstate(over="ignore"):
        v = k[0] - (xv - k[1])
        v = (k[2] - v) + k[3]
        v = (v - k[4]) - k[5]
        want = k[1] - (k[0] + v)
    on, nodes = run_graph(g, y, {x: xv}, disabled_passes=("elementwise_fusion",))
    off, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    np.testing.assert_array_equal(off, want)
    np.testing.assert_allclose(on, want, rtol=1e-12)
    assert [op for op in ops_of(nodes) if op != "Const"] == ["Sub"]  # k - x


def test_integer_push_down_wraps_exactly_as_the_original() -> None:
    """(x + big) + big overflows int32 in both orders alike: modular arithmetic."""
    big = np.int32(2**31 - 10)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.int32, [3], name="x")
        y = kl.ops.sub(
            kl.ops.add(kl.ops.add(x, kl.constant(big)), kl.constant(big)), kl.constant(np.int32(-7))
        )
    xv = np.array([0, 100, -(2**31)], np.int32)
    on, nodes = run_graph(g, y, {x: xv})
    off, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    np.testing.assert_array_equal(on, off)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(on, xv + big + big + np.int32(7))
    assert len([op for op in ops_of(nodes) if op != "Const"]) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_maximum_and_minimum_chains_with_constants_fold_to_one_node(dtype: type) -> None:
    """``max(max(x, c1), c2)`` -> ``max(x, max(c1, c2))``, either operand order, constants
    of other shapes (broadcast); a NaN in a constant stays NaN; a Minimum between two
    Maximum chains ends one and starts the other, never mixed in."""
    rng = np.random.default_rng(11)
    floats = np.issubdtype(dtype, np.floating)
    ks = [rng.integers(0, 50, shape).astype(dtype) for shape in ((4,), (), (1,), (4,), ())]
    if floats:
        ks[0][2] = np.nan
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [4], name="x")
        c = [kl.constant(k) for k in ks]
        y = kl.ops.maximum(c[0], kl.ops.maximum(x, c[1]))
        y = kl.ops.maximum(y, c[2])
        y = kl.ops.minimum(kl.ops.minimum(y, c[3]), c[4], name="y")
    xv = np.array([3, 60, 7, 20], dtype)
    want = np.minimum(
        np.minimum(np.maximum(np.maximum(ks[0], np.maximum(xv, ks[1])), ks[2]), ks[3]), ks[4]
    )
    on, nodes = run_graph(g, y, {x: xv}, disabled_passes=("elementwise_fusion",))
    off, _ = run_graph(g, y, {x: xv}, graph_optimizer=False)
    np.testing.assert_array_equal(off, want)
    np.testing.assert_array_equal(on, want)
    assert np.isnan(on[2]) == floats
    assert sorted(op for op in ops_of(nodes) if op != "Const") == ["Maximum", "Minimum"]


def test_add_chains_of_tensors_merge_into_one_add_n() -> None:
    g = kl.Graph()
    with g.as_default():
        xs = [kl.placeholder(kl.float32, [2, 2], name=f"x{i}") for i in range(4)]
        y = kl.ops.add(kl.ops.add(kl.ops.add(xs[0], xs[1]), xs[2]), xs[3], name="y")
    sg = step_graph(g, ["y:0"], [f"x{i}:0" for i in range(4)])
    new, _ = run_pass(ArithmeticSimplification(), sg)
    add_n = node_named(new.nodes, "y")
    assert add_n.op == "AddN" and len(add_n.inputs) == 4
    values = [np.full((2, 2), i + 1, np.float32) for i in range(4)]
    out, _ = run_graph(
        g, y, dict(zip(xs, values, strict=True)), disabled_passes=("elementwise_fusion",)
    )
    np.testing.assert_array_equal(out, np.full((2, 2), 10, np.float32))


def test_an_inner_link_with_another_consumer_is_not_absorbed() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        a = kl.ops.add(x, kl.constant(np.float32(1)), name="a")
        b = kl.ops.add(a, kl.constant(np.float32(2)), name="b")
        kl.ops.mul(a, b, name="c")
    sg = step_graph(g, ["c:0"], ["x:0"])
    new, _ = run_pass(ArithmeticSimplification(), sg)
    assert new is sg


# -- CSE ----------------------------------------------------------------------------------------


def test_cse_merges_equal_nodes_commutative_ones_in_either_order() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        w = kl.placeholder(kl.float32, [2], name="w")
        a1, a2 = kl.ops.mul(x, w, name="a1"), kl.ops.mul(w, x, name="a2")
        s1, s2 = kl.ops.sub(x, w, name="s1"), kl.ops.sub(w, x, name="s2")  # not commutative
        c1 = kl.constant(np.float32(3), name="c1")
        c2 = kl.constant(np.float32(3), name="c2")
        y = kl.ops.add_n([a1, a2, s1, s2, c1 * x, c2 * x], name="y")
    sg = step_graph(g, ["y:0"], ["x:0", "w:0"])
    new, _ctx = run_pass(CommonSubexpressionElimination(), sg)
    names = {n.name for n in new.nodes}
    assert "a2" not in names and "c2" not in names
    assert {"s1", "s2"} <= names
    assert len(new.nodes) == len(sg.nodes) - 3  # a2, c2, and the second c * x
    xv, wv = np.array([1.0, 2.0], np.float32), np.array([5.0, -1.0], np.float32)
    out, _ = run_graph(g, y, {x: xv, w: wv})
    np.testing.assert_allclose(out, 2 * xv * wv + 6 * xv)


@pytest.mark.parametrize("size", [4, 5000], ids=["small", "large"])
def test_cse_merges_equal_constants_and_keeps_unequal_ones(size: int) -> None:
    """Constants compare by content: small ones by their bytes, large ones (over 4 KiB) by a
    digest of them -- equal content merges, one element's difference does not, nor a
    different shape or dtype of the same bytes."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal(size).astype(np.float32)
    changed = base.copy()
    changed[-1] += 1
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [size], name="x")
        same_a = kl.constant(base, name="same_a")
        same_b = kl.constant(base.copy(), name="same_b")  # another array, equal content
        other = kl.constant(changed, name="other")
        ints = kl.constant(base.view(np.int32), name="ints")  # the same bytes, int32
        y = kl.ops.add_n([x * same_a, x * same_b, x * other], name="y")
        kl.ops.cast(ints, DstT=kl.float32, name="z")
    sg = step_graph(g, ["y:0", "z:0"], ["x:0"])
    new, _ = run_pass(CommonSubexpressionElimination(), sg)
    names = {n.name for n in new.nodes}
    assert "same_b" not in names
    assert {"same_a", "other", "ints"} <= names
    xv = rng.standard_normal(size).astype(np.float32)
    out, _ = run_graph(g, y, {x: xv})
    np.testing.assert_allclose(out, xv * base * 2 + xv * changed, rtol=1e-5)


def test_cse_never_merges_stateful_nodes() -> None:
    g = kl.Graph()
    with g.as_default():
        v = kl.Variable(np.float32(1), name="v")
        kl.ops.add(v.read_value(), v.read_value(), name="y")
    sg = step_graph(g, ["y:0"])
    new, _ = run_pass(CommonSubexpressionElimination(), sg)
    assert [n.op for n in new.nodes].count("ReadVariableOp") == 2


# -- dead branches ------------------------------------------------------------------------------


def test_a_constant_predicate_removes_the_untaken_branch() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        out = kl.cond(
            kl.constant(True),
            lambda: kl.ops.exp(x, name="taken"),
            lambda: kl.ops.log(x, name="untaken"),
        )
    xv = np.array([0.5, 1.0], np.float32)
    got, nodes = run_graph(g, out, {x: xv})
    np.testing.assert_allclose(got, np.exp(xv))
    assert not {"Switch", "Merge", "Log"} & set(ops_of(nodes))
    assert "Exp" in ops_of(nodes) or "_FusedElementwise" in ops_of(nodes)


def test_a_fed_predicate_keeps_both_branches() -> None:
    g = kl.Graph()
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        x = kl.placeholder(kl.float32, [2], name="x")
        out = kl.cond(p, lambda: kl.ops.exp(x), lambda: kl.ops.log(x))
    sg = step_graph(g, [out.name], ["p:0", "x:0"])
    new, _ = run_pass(DeadBranchRemoval(), sg)
    assert new is sg


def test_loops_are_left_alone() -> None:
    g = kl.Graph()
    with g.as_default():
        (_i, total) = kl.while_loop(
            lambda i, t: kl.ops.less(i, 5),
            lambda i, t: (
                kl.ops.add(i, 1),
                kl.ops.add(t, kl.ops.mul(kl.constant(2), kl.constant(3))),
            ),
            [kl.constant(0), kl.constant(0)],
        )
    got, nodes = run_graph(g, total)
    assert got == 30
    assert "Mul" in ops_of(nodes)  # in the loop frame: not folded


# -- fusions ------------------------------------------------------------------------------------


def _dense(activation: str | None) -> tuple[kl.Graph, kl.Tensor, kl.Tensor, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 5], name="x")
        h = kl.ops.bias_add(kl.ops.mat_mul(x, kl.constant(w), name="mm"), kl.constant(b), name="ba")
        if activation is not None:
            h = getattr(kl.ops, activation)(h, name="act")
    return g, x, h, {"w": w, "b": b}


@pytest.mark.parametrize("activation", [None, "relu", "relu6", "elu", "leaky_relu"])
def test_matmul_bias_add_activation_become_one_fused_matmul(activation: str | None) -> None:
    g, x, h, p = _dense(activation)
    xv = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32) * 3
    out, nodes = run_graph(g, h, {x: xv})
    z = xv @ p["w"] + p["b"]
    want = activated(activation, z)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    fused = [n for n in nodes if n.op == "_FusedMatMul"]
    assert len(fused) == 1
    expected = ["mm", "ba"] + (["act"] if activation else [])
    assert fused[0].name == expected[-1] and fused[0].attrs["_fused_from"] == expected


def test_a_product_with_another_consumer_is_not_fused() -> None:
    g, _x, h, _ = _dense("relu")
    mm = g.node("mm").outputs[0]
    sg = step_graph(g, [h.name, mm.name], ["x:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("CPU",))
    assert new is sg  # mm is fetched itself


def test_no_fusion_where_the_device_has_no_fused_kernel() -> None:
    """The FAKE_ACCEL test device has MatMul and BiasAdd kernels but no _FusedMatMul."""
    from runtime_helpers import make_registry

    registry = make_registry(accel=True)
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 2], name="x")
        with g.device("/device:FAKE_ACCEL:0"):
            h = kl.ops.bias_add(kl.ops.mat_mul(x, x), kl.constant(np.ones(2, np.float32)))
    sg = step_graph(g, [h.name], ["x:0"])
    new, _ = run_pass(Remapper(), sg, device_types=("FAKE_ACCEL", "CPU"))
    assert new is sg
    new, _ = run_pass(ElementwiseFusion(), sg, device_types=("FAKE_ACCEL", "CPU"))
    assert new is sg


def test_elementwise_fusion_fuses_a_connected_group_with_broadcasting() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [64, 300], name="x")
        v = kl.placeholder(kl.float32, [300], name="v")
        a = kl.ops.mul(x, v, name="a")
        b = kl.ops.sigmoid(kl.ops.sub(a, kl.constant(np.float32(0.5)), name="s"), name="b")
        c = kl.ops.maximum(kl.ops.square(b, name="sq"), kl.ops.tanh(v, name="t"), name="c")
        y = kl.ops.real_div(c, kl.ops.exp(x, name="e"), name="y")
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((64, 300)).astype(np.float32)
    vv = rng.standard_normal(300).astype(np.float32)
    out, nodes = run_graph(g, y, {x: xv, v: vv})
    sig = 1 / (1 + np.exp(-(xv * vv - 0.5)))
    np.testing.assert_allclose(out, np.maximum(sig**2, np.tanh(vv)) / np.exp(xv), rtol=1e-5)
    fused = node_named(nodes, "y")
    assert fused.op == "_FusedElementwise"
    assert sorted(fused.attrs["_fused_from"]) == ["a", "b", "c", "e", "s", "sq", "t", "y"]
    assert ops_of(nodes) == ["Const", "_FusedElementwise"]


def test_a_value_used_outside_ends_a_group_one_used_inside_does_not() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [8], name="x")
        shared = kl.ops.exp(kl.ops.neg(x, name="n"), name="shared")
        y = kl.ops.add(kl.ops.tanh(shared, name="t"), kl.ops.sqrt(shared, name="r"), name="y")

    def groups(fetches: list[str]) -> list[list[str]]:
        sg = step_graph(g, fetches, ["x:0"])
        new, _ = run_pass(ElementwiseFusion(), sg, device_types=("CPU",))
        fused = [n for n in new.nodes if n.op == "_FusedElementwise"]
        return sorted(sorted(n.attrs["_fused_from"]) for n in fused)

    assert groups(["y:0"]) == [["n", "r", "shared", "t", "y"]]  # shared: a step reused
    assert groups(["y:0", "shared:0"]) == [["n", "shared"], ["r", "t", "y"]]
    xv = np.linspace(-1, 1, 8, dtype=np.float32)
    (out, sh), _ = run_graph(g, [y, shared], {x: xv})
    np.testing.assert_allclose(out, np.tanh(np.exp(-xv)) + np.sqrt(np.exp(-xv)), rtol=1e-6)
    np.testing.assert_allclose(sh, np.exp(-xv), rtol=1e-6)


def test_integer_elementwise_chains_are_not_fused() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.int32, [3], name="x")
        kl.ops.neg(kl.ops.square(x), name="y")
    sg = step_graph(g, ["y:0"], ["x:0"])
    new, _ = run_pass(ElementwiseFusion(), sg, device_types=("CPU",))
    assert new is sg


def _vendor_tanh_registry(calls: list[int]) -> klp.Registry:
    """The numpy CPU plugin and a kernel library ('vendor_tanh') that replaces the CPU's
    Tanh by priority with one that saturates to exactly +-1 beyond |x| > 4."""
    from runtime_helpers import make_registry

    lib = klp.KernelLibrary()

    @lib.kernel("Tanh", device="CPU", priority=5, type_constraints={"T": ["float32"]})
    def tanh_clamped(ctx: klp.OpKernelContext) -> None:
        calls.append(1)
        x = ctx.input(0)
        ctx.set_output(0, np.where(np.abs(x) > 4, np.sign(x), np.tanh(x)).astype(np.float32))

    class Plugin:
        @klp.hookimpl
        def kernloom_register(self, registrar: klp.Registrar) -> None:
            registrar.register_kernels(lib)

    registry = make_registry()
    registry.register_plugin(Plugin(), name="vendor_tanh")
    return registry


@pytest.mark.parametrize("vendor", [True, False])
def test_a_node_whose_kernel_a_plugin_replaced_by_priority_is_not_fused(vendor: bool) -> None:
    """A fused node evaluates the device plugin's own elementwise functions: a node whose
    kernel another plugin replaced by priority runs that kernel, unfused; without the
    plugin the same graph fuses."""
    calls: list[int] = []
    registry = _vendor_tanh_registry(calls) if vendor else None
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [2], name="x")
        b = kl.placeholder(kl.float32, [2], name="b")
        y = kl.ops.add_v2(kl.ops.tanh(x, name="t"), b, name="y")
    xv = np.array([5.0, -5.0], np.float32)
    out, nodes = run_graph(g, y, {x: xv, b: np.zeros(2, np.float32)})
    if vendor:
        np.testing.assert_array_equal(out, [1.0, -1.0])  # the vendor's kernel ran
        assert len(calls) == 1
        assert node_named(nodes, "t").op == "Tanh" and node_named(nodes, "y").op == "AddV2"
    else:
        np.testing.assert_allclose(out, np.tanh(xv), rtol=1e-6)
        assert node_named(nodes, "y").op == "_FusedElementwise"
        assert node_named(nodes, "y").attrs["_fused_from"] == ["t", "y"]


@pytest.mark.parametrize("taken", [True, False])
def test_a_constant_cond_with_two_outputs_and_branch_constants(taken: bool) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        w = kl.placeholder(kl.float32, [3], name="w")
        a, b = kl.cond(
            kl.constant(taken),
            lambda: (kl.ops.mul(x, kl.constant(np.float32(2))), kl.ops.add(w, x)),
            lambda: (kl.ops.neg(w), kl.ops.sub(kl.constant(np.float32(1)), x)),
        )
        y = kl.ops.add(a, b, name="y")
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    wv = np.array([0.5, -1.0, 4.0], np.float32)
    (got_a, got_y), nodes = run_graph(g, [a, y], {x: xv, w: wv})
    want_a, want_b = (2 * xv, wv + xv) if taken else (-wv, 1 - xv)
    np.testing.assert_allclose(got_a, want_a)
    np.testing.assert_allclose(got_y, want_a + want_b)
    assert not {"Switch", "Merge"} & set(ops_of(nodes))
