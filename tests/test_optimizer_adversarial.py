"""Adversarial semantic checks of the graph optimizer: small graphs built to tempt each
pass into a wrong rewrite (broadcasting identities, NaN and infinity, integer wrap-around,
control-flow deadness, fed and fetched intermediates, shared producers, broadcasting
inside fused chains), each run with the optimizer on and off and compared with numpy
computed here, independently of both."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(20240611)


def run(
    graph: kl.Graph,
    fetches: Any,
    feeds: Mapping[Any, Any] | None = None,
    *,
    optimize: bool = True,
    targets: Sequence[Any] | None = None,
    setup: Any = None,
) -> Any:
    config = kl.SessionConfig(graph_optimizer=optimize)
    with kl.Session(graph, config) as session:
        if setup is not None:
            session.run(setup)
        return session.run(fetches, feeds, targets=list(targets) if targets else None)


def both(graph: kl.Graph, fetches: Any, feeds: Mapping[Any, Any] | None = None) -> tuple[Any, Any]:
    """(optimized, as built) values of ``fetches``."""
    return run(graph, fetches, feeds), run(graph, fetches, feeds, optimize=False)


def assert_same(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same shape and dtype, equal values (NaN where NaN), within float tolerance."""
    got_list = got if isinstance(got, list) else [got]
    want_list = want if isinstance(want, list) else [want]
    assert len(got_list) == len(want_list)
    for g, w in zip(got_list, want_list, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def check(
    graph: kl.Graph,
    fetches: Any,
    feeds: Mapping[Any, Any] | None,
    expected: Any,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """The optimized and the as-built run both return ``expected`` (numpy's)."""
    optimized, as_built = both(graph, fetches, feeds)
    assert_same(as_built, expected, rtol, atol)
    assert_same(optimized, expected, rtol, atol)


def f32(*shape: int) -> Array:
    return RNG.standard_normal(shape).astype(np.float32)


# -- arithmetic: identities ------------------------------------------------------------------


def test_identity_constants_that_broadcast_keep_the_broadcast_shape() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        plus_zeros = kl.ops.add(x, kl.constant(np.zeros((2, 3), np.float32)))
        zeros_plus = kl.ops.add_v2(kl.constant(np.zeros((2, 1), np.float32)), x)
        times_ones = kl.ops.mul(x, kl.constant(np.ones((2, 3), np.float32)))
        times_row = kl.ops.mul(kl.constant(np.ones((1, 3), np.float32)), x)
        minus_zero = kl.ops.sub(x, kl.constant(np.zeros((4, 1), np.float32)))
        over_one = kl.ops.real_div(x, kl.constant(np.ones((1, 1, 3), np.float32)))
        times_one = kl.ops.mul(x, kl.constant(1.0))
    xv = np.array([1.5, -0.0, np.nan], np.float32)
    check(
        g,
        [plus_zeros, zeros_plus, times_ones, times_row, minus_zero, over_one, times_one],
        {x: xv},
        [
            xv + np.zeros((2, 3), np.float32),
            np.zeros((2, 1), np.float32) + xv,
            xv * np.ones((2, 3), np.float32),
            np.ones((1, 3), np.float32) * xv,
            xv - np.zeros((4, 1), np.float32),
            xv / np.ones((1, 1, 3), np.float32),
            xv,
        ],
    )


def test_x_times_zero_and_x_minus_x_keep_nan_and_inf() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [4], name="x")
        times_zero = kl.ops.mul(x, kl.constant(0.0))
        zero_times = kl.ops.mul(kl.constant(np.zeros(4, np.float32)), x)
        minus_self = kl.ops.sub(x, x)
        plus_neg = kl.ops.add(x, kl.ops.neg(x))
    xv = np.array([np.nan, np.inf, -np.inf, 2.0], np.float32)
    with np.errstate(invalid="ignore"):
        expected = [xv * 0, 0 * xv, xv - xv, xv + -xv]
    check(g, [times_zero, zero_times, minus_self, plus_neg], {x: xv}, expected)


def test_integer_division_identities_and_chains_follow_tensorflow() -> None:
    """``Div`` on integers truncates toward zero (C's ``/``) and ``FloorDiv`` floors;
    neither chain may be merged into one division."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.int32, [6], name="x")
        over_one = kl.ops.div(x, kl.constant(1))
        trunc_chain = kl.ops.div(kl.ops.div(x, kl.constant(2)), kl.constant(3))
        floor_chain = kl.ops.floor_div(kl.ops.floor_div(x, kl.constant(2)), kl.constant(3))
        triple_neg = kl.ops.neg(kl.ops.neg(kl.ops.neg(x)))
        double_neg = kl.ops.neg(kl.ops.neg(x))
    xv = np.array([-7, 7, -1, 5, -13, 0], np.int32)
    trunc = np.trunc(np.trunc(xv / 2) / 3).astype(np.int32)
    check(
        g,
        [over_one, trunc_chain, floor_chain, triple_neg, double_neg],
        {x: xv},
        [xv, trunc, (xv // 2) // 3, -xv, xv],
    )


def test_a_dropped_identity_constant_keeps_its_deadness() -> None:
    """``x + zero`` where ``zero`` waits (by a control edge) for the taken side of a
    Switch is dead when the other side is taken: the Merge then returns the other input.
    Rewriting it to ``x`` dropped the control edge and made it live (the Merge returned
    ``x`` whichever side was taken)."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        p = kl.placeholder(kl.bool_, [], name="p")
        when_false, when_true = kl.ops.switch(x, p)
        with kl.control_dependencies([kl.ops.identity(when_true, name="pivot")]):
            zero = kl.constant(np.zeros(3, np.float32), name="zero")
            one = kl.constant(1.0, name="one")
        plus = kl.ops.add(x, zero, name="plus")
        times = kl.ops.mul(one, x, name="times")
        merged, _ = kl.ops.merge([plus, kl.ops.mul(when_false, 2.0)], name="merged")
        merged2, _ = kl.ops.merge([times, kl.ops.mul(when_false, 3.0)], name="merged2")
    xv = np.arange(3, dtype=np.float32)
    check(g, [merged, merged2], {x: xv, p: True}, [xv, xv])
    check(g, [merged, merged2], {x: xv, p: False}, [xv * 2, xv * 3])


# -- arithmetic: push-down ---------------------------------------------------------------


def test_sub_push_down_keeps_signs() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        c_minus = kl.ops.sub(kl.constant(10.0), kl.ops.sub(x, kl.constant(3.0)))
        minus_minus = kl.ops.sub(kl.ops.sub(x, kl.constant(3.0)), kl.constant(4.0))
        plus_minus = kl.ops.add(kl.constant(2.0), kl.ops.sub(x, kl.constant(5.0)))
        minus_plus = kl.ops.sub(kl.ops.add(kl.constant(2.0), x), kl.constant(5.0))
        c_minus_x_plus = kl.ops.add(kl.ops.sub(kl.constant(1.0), x), kl.constant(4.0))
    xv = np.array([0.5, -2.0, 8.0], np.float32)
    check(
        g,
        [c_minus, minus_minus, plus_minus, minus_plus, c_minus_x_plus],
        {x: xv},
        [10 - (xv - 3), (xv - 3) - 4, 2 + (xv - 5), (2 + xv) - 5, (1 - xv) + 4],
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64])
def test_integer_push_down_wraps_as_built(dtype: type) -> None:
    info = np.iinfo(dtype)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [4], name="x")
        add_sub = kl.ops.sub(kl.ops.add(x, kl.constant(dtype(5))), kl.constant(dtype(7)))
        sub_sub = kl.ops.sub(kl.ops.sub(x, kl.constant(dtype(info.max))), kl.constant(dtype(3)))
        mul_mul = kl.ops.mul(kl.ops.mul(x, kl.constant(dtype(100))), kl.constant(dtype(3)))
    xv = np.array([info.min, 0, 1, info.max], dtype)
    with np.errstate(over="ignore"):
        expected = [
            (xv + dtype(5)) - dtype(7),
            (xv - dtype(info.max)) - dtype(3),
            (xv * dtype(100)) * dtype(3),
        ]
    check(g, [add_sub, sub_sub, mul_mul], {x: xv}, expected)


def test_push_down_with_scalar_vector_and_matrix_constants() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        column = kl.constant(np.arange(2, dtype=np.float32).reshape(2, 1))
        row = kl.constant(np.array([1.0, 2.0, 4.0], np.float32))
        additive = kl.ops.sub(kl.ops.add(x, column), row)
        additive3 = kl.ops.add(kl.ops.sub(kl.ops.add(x, column), row), kl.constant(0.5))
        product = kl.ops.mul(kl.ops.mul(column, x), kl.constant(3.0))
    xv = f32(3)
    c, r = np.arange(2, dtype=np.float32).reshape(2, 1), np.array([1.0, 2.0, 4.0], np.float32)
    check(
        g, [additive, additive3, product], {x: xv}, [(xv + c) - r, (xv + c) - r + 0.5, c * xv * 3]
    )


def test_push_down_leaves_a_shared_or_fetched_inner_link() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        inner = kl.ops.add(x, kl.constant(5.0), name="inner")
        outer = kl.ops.sub(inner, kl.constant(2.0), name="outer")
        other = kl.ops.mul(inner, kl.constant(2.0), name="other")
    xv = f32(3)
    check(g, [outer, other], {x: xv}, [xv + 5 - 2, (xv + 5) * 2])
    check(g, [outer, inner], {x: xv}, [xv + 5 - 2, xv + 5])


def test_add_n_merging_keeps_broadcasting_and_shared_links() -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float32, [2, 3], name="a")
        b = kl.placeholder(kl.float32, [2, 3], name="b")
        r = kl.placeholder(kl.float32, [3], name="r")
        ab = kl.ops.add(a, b, name="ab")
        total = kl.ops.add(ab, kl.ops.add(a, a), name="total")
        with_row = kl.ops.add(kl.ops.add(a, r), b, name="with_row")
        reuse = kl.ops.add(ab, ab, name="reuse")
    av, bv, rv = f32(2, 3), f32(2, 3), f32(3)
    check(
        g,
        [total, with_row, reuse, ab],
        {a: av, b: bv, r: rv},
        [(av + bv) + (av + av), (av + rv) + bv, (av + bv) * 2, av + bv],
    )


# -- constant folding --------------------------------------------------------------------


def test_a_constant_subgraph_whose_kernel_fails_fails_at_run_time_naming_it() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1], name="x")
        table = kl.constant(np.arange(3, dtype=np.float32))
        bad = kl.ops.gather_v2(table, kl.constant([5]), kl.constant(0), name="bad")
        y = kl.ops.add(x, bad, name="y")
    for optimize in (True, False):
        with pytest.raises(kl.KernelError, match="node 'bad'"):
            run(g, y, {x: np.zeros(1, np.float32)}, optimize=optimize)
    # A signature that does not need it never reports it.
    with g.as_default():
        fine = kl.ops.mul(x, 2.0, name="fine")
    assert run(g, fine, {x: np.ones(1, np.float32)}).tolist() == [2.0]


def test_folding_over_the_cap_is_not_materialized_but_computes_the_same() -> None:
    g = kl.Graph()
    with g.as_default():
        big = kl.ops.tile(
            kl.constant(np.ones((1000, 1000), np.float32)), kl.constant([4, 1]), name="big"
        )
        total = kl.ops.sum(big, kl.constant([0, 1]), name="total")
        filled = kl.ops.fill(kl.constant([1500, 2000]), kl.constant(0.5), name="filled")
        half = kl.ops.mean(filled, kl.constant([0, 1]), name="half")
    metadata = kl.RunMetadata()
    with kl.Session(g) as session:
        got = session.run([total, half], run_metadata=metadata)
    ops = {n.name: n.op for p in metadata.partition_graphs.values() for n in p.nodes}
    assert (ops["big"], ops["filled"]) == ("Tile", "Fill")
    assert_same(got, [np.float32(4e6), np.float32(0.5)])


@pytest.mark.parametrize(
    "dtype", [np.float16, np.float64, np.int8, np.uint8, np.int16, np.int32, np.int64]
)
def test_folding_keeps_the_dtype(dtype: type) -> None:
    values = np.array([1, 0, 3], dtype)
    g = kl.Graph()
    with g.as_default():
        c = kl.constant(values)
        folded = kl.ops.add(kl.ops.mul(c, c), kl.ops.neg(c) if dtype != np.uint8 else c)
        shape = kl.ops.shape(c)
    second = -values if dtype != np.uint8 else values
    check(g, [folded, shape], None, [values * values + second, np.array([3], np.int32)])


def test_folding_bool_and_empty_constants() -> None:
    g = kl.Graph()
    with g.as_default():
        flags = kl.constant(np.array([True, False, True]))
        none = kl.ops.logical_and(flags, kl.ops.logical_not(flags))
        empty = kl.constant(np.zeros((0, 3), np.float32))
        scaled = kl.ops.mul(kl.ops.add(empty, kl.constant(1.0)), kl.constant(2.0))
        summed = kl.ops.sum(empty, kl.constant([0]))
        size = kl.ops.size(empty)
    check(
        g,
        [none, scaled, summed, size],
        None,
        [np.zeros(3, bool), np.zeros((0, 3), np.float32), np.zeros(3, np.float32), np.int32(0)],
    )


def test_shapes_in_a_cond_branch_stay_dead_when_the_other_branch_is_taken() -> None:
    """``Size``/``Shape`` of a branch's input fold to constants; the constant must stay
    dead with its branch. It waited for the Switch itself, whose control edges are live
    on both sides, so the taken branch's Merge got the wrong (folded) value."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3, 2], name="x")
        p = kl.placeholder(kl.bool_, [], name="p")
        size = kl.cond(p, lambda: kl.ops.size(x), lambda: kl.constant(7), name="size")
        shape = kl.cond(p, lambda: kl.ops.shape(x), lambda: kl.constant([9, 9]), name="shape")
        ones = kl.cond(
            p,
            lambda: kl.ops.add(kl.ops.ones_like(x), kl.constant(1.0)),
            lambda: kl.ops.mul(x, 3.0),
            name="ones",
        )
    xv = np.ones((3, 2), np.float32)
    fetches = [size, shape, ones]
    check(g, fetches, {x: xv, p: True}, [np.int32(6), np.array([3, 2], np.int32), xv * 2])
    check(g, fetches, {x: xv, p: False}, [np.int32(7), np.array([9, 9], np.int32), xv * 3])


@pytest.mark.parametrize("taken", [True, False])
def test_shapes_in_a_cond_with_a_constant_predicate(taken: bool) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3, 2], name="x")
        p = kl.constant(taken)
        size = kl.cond(p, lambda: kl.ops.size(x), lambda: kl.constant(7), name="size")
        shape = kl.cond(p, lambda: kl.ops.shape(x), lambda: kl.constant([9, 9]), name="shape")
    if taken:
        expected = [np.int32(6), np.array([3, 2], np.int32)]
    else:
        expected = [np.int32(7), np.array([9, 9], np.int32)]
    check(g, [size, shape], {x: np.ones((3, 2), np.float32)}, expected)


# -- cse ---------------------------------------------------------------------------------


def test_cse_does_not_merge_variable_reads_around_an_assign() -> None:
    g = kl.Graph()
    with g.as_default():
        v = kl.Variable(np.ones(3, np.float32), name="v")
        before = kl.ops.mul(v.value(), 2.0, name="before")
        with kl.control_dependencies([before]):
            assign = v.assign(np.full(3, 5.0, np.float32))
        with kl.control_dependencies([assign]):
            after = kl.ops.mul(v.value(), 2.0, name="after")
        init = kl.variables_initializer()
    for optimize in (True, False):
        got = run(g, [before, after], optimize=optimize, setup=init)
        assert_same(got, [np.full(3, 2.0, np.float32), np.full(3, 10.0, np.float32)])


def test_cse_keeps_nodes_that_differ_in_attrs_or_control_inputs() -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.float32, [2, 3], name="a")
        b = kl.placeholder(kl.float32, [3, 2], name="b")
        ab = kl.ops.mat_mul(a, b)
        ba = kl.ops.mat_mul(a, b, transpose_a=True, transpose_b=True)
        leaky1 = kl.ops.leaky_relu(a, alpha=0.1)
        leaky2 = kl.ops.leaky_relu(a, alpha=0.3)
        s1 = kl.ops.sum(a, kl.constant([1]), keep_dims=True)
        s2 = kl.ops.sum(a, kl.constant([1]), keep_dims=False)
    av, bv = f32(2, 3), f32(3, 2)
    check(
        g,
        [ab, ba, leaky1, leaky2, s1, s2],
        {a: av, b: bv},
        [
            av @ bv,
            av.T @ bv.T,
            np.where(av > 0, av, 0.1 * av),
            np.where(av > 0, av, 0.3 * av),
            av.sum(1, keepdims=True),
            av.sum(1),
        ],
    )


# -- dead branch -------------------------------------------------------------------------


@pytest.mark.parametrize("taken", [True, False])
def test_cond_with_constant_and_fed_predicates(taken: bool) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        fixed = kl.cond(
            kl.constant(taken), lambda: kl.ops.mul(x, 2.0), lambda: kl.ops.sub(x, 1.0), name="a"
        )
        folded_pred = kl.ops.greater(kl.constant(2.0), kl.constant(1.0), name="folded_pred")
        computed = kl.cond(
            folded_pred, lambda: kl.ops.mul(x, 2.0), lambda: kl.ops.sub(x, 1.0), name="b"
        )
    xv = np.arange(3, dtype=np.float32)
    check(g, [fixed, computed], {x: xv}, [xv * 2 if taken else xv - 1, xv * 2])
    # The predicate is a constant computation, but fed: the feed decides.
    check(g, computed, {x: xv, folded_pred: taken}, xv * 2 if taken else xv - 1)


def test_a_fed_constant_predicate_of_a_raw_switch_is_not_folded() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        p = kl.constant(True, name="p")
        when_false, when_true = kl.ops.switch(x, p)
        out, index = kl.ops.merge([kl.ops.mul(when_false, 3.0), kl.ops.add(when_true, 1.0)])
    xv = np.arange(3, dtype=np.float32)
    check(g, [out, index], {x: xv}, [xv + 1, np.int32(1)])
    check(g, [out, index], {x: xv, p: False}, [xv * 3, np.int32(0)])


def test_while_loop_body_with_foldable_arithmetic() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        i, total = kl.while_loop(
            lambda i, v: kl.ops.less(i, kl.constant(3)),
            lambda i, v: [
                kl.ops.add(i, kl.constant(1)),
                kl.ops.add(
                    kl.ops.add(kl.ops.mul(v, 1.0), kl.constant(1.0)),
                    kl.ops.add(kl.constant(1.0), kl.constant(1.0)),
                ),
            ],
            [kl.constant(0), x],
        )
    xv = np.arange(3, dtype=np.float32)
    check(g, [i, total], {x: xv}, [np.int32(3), xv + 9])


# -- feeds, fetches, targets -------------------------------------------------------------


def test_fed_intermediates_override_folding_push_down_and_fusion() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        a = kl.ops.add(x, 5.0, name="a")
        b = kl.ops.sub(a, 2.0, name="b")
        c = kl.ops.add(kl.constant(np.ones(3, np.float32)), 1.0, name="c")
        d = kl.ops.mul(b, c, name="d")
        e = kl.ops.exp(kl.ops.mul(d, 0.01), name="e")
        f = kl.ops.neg(e, name="f")
    xv = np.arange(3, dtype=np.float32)
    fed_a, fed_c = np.full(3, 100.0, np.float32), np.full(3, 3.0, np.float32)
    d_ref = (fed_a - 2) * fed_c
    check(
        g,
        [f, b, d, d, f],
        {x: xv, a: fed_a, c: fed_c},
        [-np.exp(d_ref * 0.01), fed_a - 2, d_ref, d_ref, -np.exp(d_ref * 0.01)],
    )
    fed_e = np.full(3, 7.0, np.float32)
    check(g, [f, e], {x: xv, e: fed_e}, [-fed_e, fed_e])


def test_fetching_inside_a_fusible_chain_and_its_end() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [200, 100], name="x")
        a = kl.ops.exp(kl.ops.mul(x, 0.1), name="a")
        b = kl.ops.mul(a, 2.0, name="b")
        c = kl.ops.add(b, x, name="c")
        d = kl.ops.tanh(c, name="d")
    xv = f32(200, 100)
    a_ref = np.exp(xv * np.float32(0.1))
    b_ref = a_ref * 2
    check(g, [d, b, b, a], {x: xv}, [np.tanh(b_ref + xv), b_ref, b_ref, a_ref])


def test_targets_still_run() -> None:
    g = kl.Graph()
    with g.as_default():
        v = kl.Variable(np.zeros(3, np.float32), name="v")
        x = kl.placeholder(kl.float32, [3], name="x")
        bump = v.assign_add(kl.ops.add(kl.ops.mul(x, 1.0), 0.0))
        y = kl.ops.add(x, 1.0, name="y")
        init = kl.variables_initializer()
    for optimize in (True, False):
        with kl.Session(g, kl.SessionConfig(graph_optimizer=optimize)) as session:
            session.run(init)
            for _ in range(2):
                got = session.run(y, {x: np.ones(3, np.float32)}, targets=[bump.node])
            assert_same(got, np.full(3, 2.0, np.float32))
            assert_same(session.run(v.value()), np.full(3, 2.0, np.float32))


def test_feeds_and_constants_are_not_overwritten_by_a_fused_output() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [300, 100], name="x")
        c = kl.constant(np.full((300, 100), 2.0, np.float32), name="c")
        y = kl.ops.relu(kl.ops.sub(kl.ops.mul(c, 3.0), x), name="y")
        z = kl.ops.exp(kl.ops.neg(x), name="z")
    xv = np.ones((300, 100), np.float32)
    kept = xv.copy()
    with kl.Session(g) as session:
        first = session.run([y, z], {x: xv})
        second = session.run([y, z], {x: xv})
    np.testing.assert_array_equal(xv, kept)
    assert_same(first, [np.full((300, 100), 5.0, np.float32), np.exp(-kept)])
    assert_same(second, first)


# -- remapper and batch-norm folding -----------------------------------------------------


def _dense(
    x: kl.Tensor, w: Array, b: Array, activation: Callable[..., kl.Tensor], name: str
) -> tuple[kl.Tensor, kl.Tensor, kl.Tensor]:
    mm = kl.ops.mat_mul(x, kl.constant(w), name=f"{name}_mm")
    ba = kl.ops.bias_add(mm, kl.constant(b), name=f"{name}_ba")
    return mm, ba, activation(ba, name=name)


def test_matmul_fusion_keeps_values_others_read() -> None:
    w, b = f32(4, 3), f32(3)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 4], name="x")
        mm, ba, y = _dense(x, w, b, kl.ops.relu, "y")
        negated = kl.ops.neg(mm)
        _, ba2, leaky = _dense(
            x, w, b, lambda t, name: kl.ops.leaky_relu(t, alpha=0.3, name=name), "l"
        )
        doubled = kl.ops.mul(ba2, 2.0)
        _, _, six = _dense(x, w, b, kl.ops.relu6, "six")
        _, _, elu = _dense(x, w, b, kl.ops.elu, "elu")
    xv = f32(2, 4) * 3
    pre = xv @ w + b
    check(
        g,
        [y, negated, leaky, doubled, six, elu],
        {x: xv},
        [
            np.maximum(pre, 0),
            -(xv @ w),
            np.where(pre > 0, pre, np.float32(0.3) * pre),
            pre * 2,
            np.clip(pre, 0, 6),
            np.where(pre > 0, pre, np.expm1(pre)),
        ],
        rtol=1e-5,
        atol=1e-5,
    )
    check(g, [y, mm, ba], {x: xv}, [np.maximum(pre, 0), xv @ w, pre], atol=1e-5)


def _conv_ref(images: Array, filters: Array, stride: int = 1) -> Array:
    """NHWC 'SAME' convolution (odd square kernels) in float64."""
    k = filters.shape[0]
    pad = k // 2
    padded = np.pad(images.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    n, h, w, _ = images.shape
    out = np.zeros((n, h, w, filters.shape[3]))
    for i in range(h):
        for j in range(w):
            patch = padded[:, i : i + k, j : j + k, :]
            out[:, i, j, :] = np.tensordot(patch, filters, axes=([1, 2, 3], [0, 1, 2]))
    return out[:, ::stride, ::stride, :]


def test_conv_bias_fusions_nhwc_nchw_and_broadcast_residual() -> None:
    filters, bias = f32(3, 3, 3, 4), f32(4)
    g = kl.Graph()
    with g.as_default():
        im = kl.placeholder(kl.float32, [1, 6, 6, 3], name="im")
        imn = kl.placeholder(kl.float32, [1, 3, 6, 6], name="imn")
        conv = kl.ops.conv2d(im, kl.constant(filters), strides=[1, 1, 1, 1], padding="SAME")
        biased = kl.ops.bias_add(conv, kl.constant(bias))
        row = kl.constant(np.full((1, 1, 1, 4), 0.5, np.float32))
        residual = kl.ops.relu(kl.ops.add_v2(biased, row))
        nchw = kl.ops.conv2d(
            imn, kl.constant(filters), strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW"
        )
        nchw_out = kl.ops.relu(kl.ops.bias_add(nchw, kl.constant(bias), data_format="NCHW"))
    iv = f32(1, 6, 6, 3)
    ref = _conv_ref(iv, filters) + bias
    check(
        g,
        [residual, nchw_out],
        {im: iv, imn: iv.transpose(0, 3, 1, 2)},
        [
            np.maximum(ref + 0.5, 0).astype(np.float32),
            np.maximum(ref, 0).astype(np.float32).transpose(0, 3, 1, 2),
        ],
        rtol=1e-4,
        atol=1e-4,
    )


def test_batch_norm_is_not_folded_where_it_must_not_be() -> None:
    filters = f32(3, 3, 3, 4)
    scale, offset = RNG.uniform(0.5, 1.5, 4).astype(np.float32), f32(4)
    mean, var = f32(4), RNG.uniform(0.5, 2.0, 4).astype(np.float32)
    eps = 1e-3
    g = kl.Graph()
    with g.as_default():
        im = kl.placeholder(kl.float32, [1, 6, 6, 3], name="im")

        def conv() -> kl.Tensor:
            return kl.ops.conv2d(im, kl.constant(filters), strides=[1, 1, 1, 1], padding="SAME")

        stats = [kl.constant(a) for a in (scale, offset, mean, var)]
        shared = conv()
        n1, *_ = kl.ops.fused_batch_norm_v3(shared, *stats, epsilon=eps, is_training=False)
        other = kl.ops.mul(shared, 2.0)
        moving = kl.Variable(mean, name="moving_mean")
        n2, *_ = kl.ops.fused_batch_norm_v3(
            conv(), stats[0], stats[1], moving.value(), stats[3], epsilon=eps, is_training=False
        )
        empty = kl.constant(np.zeros(0, np.float32))
        n3, batch_mean, *_ = kl.ops.fused_batch_norm_v3(
            conv(), stats[0], stats[1], empty, empty, epsilon=eps, is_training=True
        )
        init = kl.variables_initializer()
    iv = f32(1, 6, 6, 3)
    c = _conv_ref(iv, filters)
    inference = (c - mean) / np.sqrt(var + eps) * scale + offset
    bm, bv = c.mean((0, 1, 2)), c.var((0, 1, 2))
    training = (c - bm) / np.sqrt(bv + eps) * scale + offset
    expected = [inference, c * 2, inference, training, bm]
    fetches = [n1, other, n2, n3, batch_mean]
    for optimize in (True, False):
        got = run(g, fetches, {im: iv}, optimize=optimize, setup=init)
        for value, want in zip(got, expected, strict=True):
            np.testing.assert_allclose(value, want.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_batch_norm_affine_with_a_broadcasting_scale_layer() -> None:
    scale, offset = RNG.uniform(0.5, 1.5, 4).astype(np.float32), f32(4)
    mean, var = f32(4), RNG.uniform(0.5, 2.0, 4).astype(np.float32)
    c, d = f32(3, 1, 4), f32(2, 1, 1, 1)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3, 3, 4], name="x")
        stats = [kl.constant(a) for a in (scale, offset, mean, var)]
        normed, *_ = kl.ops.fused_batch_norm_v3(x, *stats, epsilon=1e-3, is_training=False)
        out = kl.ops.add(kl.constant(d), kl.ops.mul(normed, kl.constant(c)))
    xv = f32(2, 3, 3, 4)
    n_ref = (xv - mean) / np.sqrt(var + np.float32(1e-3)) * scale + offset
    check(g, [out], {x: xv}, [d + n_ref * c], rtol=1e-4, atol=1e-5)
    check(g, [out, normed], {x: xv}, [d + n_ref * c, n_ref], rtol=1e-4, atol=1e-5)


# -- elementwise fusion ------------------------------------------------------------------

BROADCAST_CASES = [
    ((300, 1), (1, 200), ()),
    ((1, 200), (300, 200), (300, 1)),
    ((5, 1, 4000), (1, 7, 1), (4000,)),
    ((40000,), (), (1,)),
    ((3, 40000), (3, 1), (1, 40000)),
    ((0, 5), (1, 5), ()),
    ((2, 0), (2, 1), (1,)),
]


@pytest.mark.parametrize(("xs", "ys", "zs"), BROADCAST_CASES)
def test_fused_chains_broadcast_across_blocks_with_nan(
    xs: tuple[int, ...], ys: tuple[int, ...], zs: tuple[int, ...]
) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, list(xs), name="x")
        y = kl.placeholder(kl.float32, list(ys), name="y")
        z = kl.placeholder(kl.float32, list(zs), name="z")
        out = kl.ops.relu(kl.ops.add(kl.ops.mul(kl.ops.sub(x, y), z), kl.ops.tanh(y)))
        out2 = kl.ops.maximum(kl.ops.exp(kl.ops.neg(z)), kl.ops.minimum(x, y))
    xv, yv, zv = f32(*xs), f32(*ys), f32(*zs)
    if xv.size:
        xv.flat[0] = np.nan
    expected = [
        np.maximum((xv - yv) * zv + np.tanh(yv), 0),
        np.maximum(np.exp(-zv), np.minimum(xv, yv)),
    ]
    check(g, [out, out2], {x: xv, y: yv, z: zv}, expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_fused_chains_in_other_float_dtypes(dtype: type) -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.as_dtype(dtype), [50000], name="x")
        y = kl.ops.sigmoid(kl.ops.add(kl.ops.mul(x, 2.0), 1.0))
        mixed = kl.ops.mul(kl.ops.cast(kl.ops.exp(x), DstT=kl.float32), 2.0)
    xv = RNG.standard_normal(50000).astype(dtype)
    wide = xv.astype(np.float64)
    tol = 2e-3 if dtype == np.float16 else 1e-12
    check(
        g,
        [y, mixed],
        {x: xv},
        [(1 / (1 + np.exp(-(wide * 2 + 1)))).astype(dtype), np.exp(xv).astype(np.float32) * 2],
        rtol=tol,
        atol=tol,
    )


def test_fusion_respects_a_user_pinned_op() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        a = kl.ops.exp(x)
        with kl.device("/device:CPU:0"):
            b = kl.ops.mul(a, 2.0, name="pinned")
        c = kl.ops.add(b, 1.0)
    xv = np.arange(3, dtype=np.float32)
    check(g, c, {x: xv}, np.exp(xv) * 2 + 1)


UNARY: dict[str, tuple[Callable[..., Any], Callable[[Array], Array]]] = {
    "neg": (kl.ops.neg, np.negative),
    "exp": (kl.ops.exp, np.exp),
    "tanh": (kl.ops.tanh, np.tanh),
    "relu": (kl.ops.relu, lambda v: np.maximum(v, 0)),
    "square": (kl.ops.square, np.square),
}
BINARY: dict[str, tuple[Callable[..., Any], Callable[[Array, Array], Array]]] = {
    "add": (kl.ops.add, np.add),
    "sub": (kl.ops.sub, np.subtract),
    "mul": (kl.ops.mul, np.multiply),
    "maximum": (kl.ops.maximum, np.maximum),
    "minimum": (kl.ops.minimum, np.minimum),
}
SHAPES = [(), (1,), (4,), (3, 1), (1, 4), (3, 4)]
SPECIALS = [0.0, 1.0, -0.0, np.nan, np.inf, -np.inf]


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], list[tuple[Any, ...]], list[bool]]:
    """Leaves (shapes), then steps over earlier values (unary, binary, or a constant
    0/1 identity operand), and which values to fetch."""
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(draw(st.integers(1, 3)))]
    steps: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 8))):
        size = len(shapes) + len(steps)
        kind = draw(st.sampled_from(["unary", "binary", "binary", "identity"]))
        a, b = draw(st.integers(0, size - 1)), draw(st.integers(0, size - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), a))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), a, b))
        else:
            op = draw(st.sampled_from(["add", "sub", "mul"]))
            shape = draw(st.sampled_from(SHAPES))
            steps.append(("identity", op, a, shape, draw(st.booleans())))
    fetched = [draw(st.booleans()) for _ in steps]
    fetched[-1] = True
    return shapes, steps, fetched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.integers(0, 2**31 - 1))
def test_random_chains_with_identities_and_specials(
    program: tuple[list[tuple[int, ...]], list[tuple[Any, ...]], list[bool]], seed: int
) -> None:
    shapes, steps, fetched = program
    rng = np.random.default_rng(seed)
    values = []
    for shape in shapes:
        v = rng.standard_normal(shape).astype(np.float32)
        if v.size and rng.random() < 0.5:
            v.flat[rng.integers(v.size)] = rng.choice(SPECIALS)
        values.append(v)
    g = kl.Graph()
    with g.as_default():
        feeds = [kl.placeholder(kl.float32, list(s)) for s in shapes]
        tensors: list[Any] = list(feeds)
        refs: list[Array] = list(values)
        with np.errstate(all="ignore"):
            for step in steps:
                if step[0] == "unary":
                    op, ref = UNARY[step[1]]
                    tensors.append(op(tensors[step[2]]))
                    refs.append(ref(refs[step[2]]))
                elif step[0] == "binary":
                    op2, ref2 = BINARY[step[1]]
                    tensors.append(op2(tensors[step[2]], tensors[step[3]]))
                    refs.append(ref2(refs[step[2]], refs[step[3]]))
                else:
                    _, name, a, shape, left = step
                    neutral = np.full(shape, 1.0 if name == "mul" else 0.0, np.float32)
                    op2, ref2 = BINARY[name]
                    const = kl.constant(neutral)
                    if left and name != "sub":
                        tensors.append(op2(const, tensors[a]))
                        refs.append(ref2(neutral, refs[a]))
                    else:
                        tensors.append(op2(tensors[a], const))
                        refs.append(ref2(refs[a], neutral))
    offset = len(shapes)
    fetches = [tensors[offset + i] for i, f in enumerate(fetched) if f]
    expected = [refs[offset + i].astype(np.float32) for i, f in enumerate(fetched) if f]
    check(g, fetches, dict(zip(feeds, values, strict=True)), expected, rtol=1e-4, atol=1e-5)


def test_feeding_a_matmul_pattern_inner_node() -> None:
    w, b = f32(4, 3), f32(3)
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 4], name="x")
        mm, ba, y = _dense(x, w, b, kl.ops.relu, "y")
    xv, fed = f32(2, 4), f32(2, 3)
    check(g, [y, y, ba], {x: xv, mm: fed}, [np.maximum(fed + b, 0)] * 2 + [fed + b])
    check(g, y, {x: xv, ba: fed}, np.maximum(fed, 0))
