"""Control flow and variables from an adversarial audit: each program runs with the default
session, without the graph optimizer, with four inter-op threads and traced, against values
computed in plain Python or TensorFlow 1's (``tf.compat.v1``, graph mode, control flow v1,
grappler off; TensorFlow 2.21), hard-coded here. Every run has a deadline, so a hang fails."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom import ops

DEADLINE_S = 10.0

CONFIGS: dict[str, tuple[kl.SessionConfig | None, bool]] = {
    "default": (None, False),
    "no-optimizer": (kl.SessionConfig(graph_optimizer=False), False),
    "4-threads": (kl.SessionConfig(inter_op_threads=4), False),
    "traced": (None, True),
}


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


def session(g: kl.Graph, config: str) -> kl.Session:
    cfg, _ = CONFIGS[config]
    return kl.Session(g, cfg) if cfg is not None else kl.Session(g)


def run(sess: kl.Session, config: str, fetches: Any, feed: Any = None) -> Any:
    """One run with a deadline (a hang fails the test), traced where ``config`` says."""
    traced = CONFIGS[config][1]
    options = kl.RunOptions(trace=traced, timeout_s=DEADLINE_S)
    return sess.run(fetches, feed, options, kl.RunMetadata())


# -- a body that returns an outside tensor unchanged -----------------------------------------------


def test_a_body_returning_an_outside_tensor_ends_and_gives_tensorflow_s_values(
    registry: klp.Registry,
) -> None:
    """``lambda i, s: (i + 1, x)``: the NextIteration of ``s`` is fed by the loop-invariant
    Enter of ``x``. It ran live in the last iteration too (where the predicate is false) and
    started iteration after iteration: a traced run never ended. TensorFlow 1 gives the
    NextIteration a control input from the body's pivot."""
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.float32, [], name="x")
        n = kl.placeholder(kl.int32, [], name="n")
        out = kl.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, x), [0, kl.constant(5.0)])
        swapped = kl.while_loop(
            lambda i, a, b: i < n, lambda i, a, b: (i + 1, b, x), [0, kl.constant(1.0), x * 2.0]
        )
    # TensorFlow 1: (0, 5.0), (1, 1.5), (3, 1.5), (10, 1.5).
    tf_values = {0: 5.0, 1: 1.5, 3: 1.5, 10: 1.5}
    for config in CONFIGS:  # the untraced runs were right; the traced one hung
        with session(g, config) as sess:
            for count, want in tf_values.items():
                got = run(sess, config, [out, swapped], {x: 1.5, n: count})
                assert got[0][0] == count and got[0][1] == np.float32(want), config
                a, b = (1.0, 3.0) if count == 0 else (3.0, 1.5) if count == 1 else (1.5, 1.5)
                assert got[1][0] == count and (got[1][1], got[1][2]) == (a, b), config


# -- a stateful op of loop invariants only ---------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_an_update_of_loop_invariants_runs_once_per_iteration(
    registry: klp.Registry, config: str
) -> None:
    """``v.assign_add(x)`` in a body, with ``x`` from outside: both inputs of the update are
    loop invariants, so it ran in the last iteration as well (n + 1 updates; one for a loop
    of no iterations). TensorFlow 1 reads 0.0, 1.0 and 4.0 after 0, 1 and 4 iterations."""
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.float32(0.0), name="v")
        x = kl.placeholder(kl.float32, [], name="x")
        n = kl.placeholder(kl.int32, [], name="n")

        def body(i: kl.Tensor) -> kl.Tensor:
            with kl.control_dependencies([v.assign_add(x)]):
                return i + 1

        out = kl.while_loop(lambda i: i < n, body, [0])
        with kl.control_dependencies(out):
            after = v.value()
    with session(g, config) as sess:
        for count, want in {0: 0.0, 1: 1.0, 4: 4.0}.items():
            sess.run(v.initializer)
            assert run(sess, config, after, {x: 1.0, n: count}) == np.float32(want)
        # and two runs in sequence see each other's updates
        sess.run(v.initializer)
        run(sess, config, after, {x: 0.5, n: 3})
        assert run(sess, config, after, {x: 0.25, n: 2}) == np.float32(2.0)


# -- fetching a tensor of a loop body --------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_fetching_a_tensor_inside_a_loop_body_is_an_error(
    registry: klp.Registry, config: str
) -> None:
    """A tensor of a loop body has one value per iteration: the run returned the first one
    (0 after 3 iterations) and called it dead after none. TensorFlow 1 refuses to fetch it
    ("marked as not fetchable") whatever the count."""
    inside: list[kl.Tensor] = []
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")

        def body(i: kl.Tensor) -> kl.Tensor:
            inside.append(i * 2)
            return i + 1

        out = kl.while_loop(lambda i: i < n, body, [0])
    with session(g, config) as sess:
        for count in (0, 3):
            for fetches in (inside[0], [inside[0], out]):
                with pytest.raises(
                    kl.InvalidArgumentError, match=r"cannot fetch 'while/mul:0'.*loop"
                ):
                    run(sess, config, fetches, {n: count})
        assert run(sess, config, out, {n: 4}) == [4]  # the session goes on


@pytest.mark.parametrize("config", CONFIGS)
def test_feeding_a_tensor_inside_a_loop_is_an_error_naming_the_feed(
    registry: klp.Registry, config: str
) -> None:
    """A tensor of a loop body (or of a loop nested in it) has one value per iteration; a
    feed would stand in the root frame for all of them. The error names the feed, as the
    fetch's does, not the frames of the internal nodes it would have met. A loop's output
    is outside the loop: it may be fed."""
    inside: list[kl.Tensor] = []
    g = kl.Graph(registry)
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")

        def inner(j: kl.Tensor, b: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            inside.append(b * 3.0)
            return j + 1, b + 1.0

        def body(i: kl.Tensor, a: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            a2 = a + 1.0
            inside.append(a2)
            _, b = kl.while_loop(lambda j, b: j < 2, inner, [0, a2])
            return i + 1, b * 1.0

        _, out = kl.while_loop(lambda i, a: i < n, body, [0, kl.constant(0.0)])
        doubled = out * 2.0
    outer, nested = inside
    with session(g, config) as sess:
        for tensor in (outer, nested):
            frame = tensor.name.rpartition("/")[0]
            with pytest.raises(
                kl.InvalidArgumentError,
                match=rf"^cannot feed '{tensor.name}': it is computed inside a loop \(frame "
                rf"'{frame}'\), where it has one value per iteration.*Feed a value from "
                r"outside the loop",
            ):
                run(sess, config, out, {n: 3, tensor: 5.0})
        assert run(sess, config, doubled, {out: 7.0}) == np.float32(14.0)
        # each iteration: a + 1, then + 1 twice (the inner loop): 3 iterations give 9
        assert run(sess, config, out, {n: 3}) == np.float32(9.0)


# -- random programs against a Python interpreter --------------------------------------------------

MOD = 9973
"""Every arithmetic result is reduced modulo this (floor modulo: Python's % and FloorMod
agree), so int32 never overflows."""

leaves = st.one_of(
    st.tuples(st.just("var"), st.integers(0, 7)),
    st.tuples(st.just("const"), st.integers(-20, 20)),
)


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pred = st.one_of(
        st.tuples(st.just("less"), inner, inner),
        st.tuples(st.just("fed"), st.just(0)),
        st.tuples(st.just("constant"), st.booleans()),
    )
    return st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul"]), inner, inner),
        st.tuples(st.just("cond"), pred, inner, inner),
        # (loop, count, maximum_iterations or -1, initial value, body)
        st.tuples(st.just("loop"), inner, st.integers(-1, 3), inner, inner),
    )


programs = st.recursive(leaves, _extend, max_leaves=10)


def interpret(expr: Any, env: list[int], flag: bool) -> int:
    """The reference: what the program computes, in Python."""
    kind = expr[0]
    if kind == "var":
        return env[expr[1] % len(env)]
    if kind == "const":
        return int(expr[1])
    if kind in ("add", "sub", "mul"):
        a, b = interpret(expr[1], env, flag), interpret(expr[2], env, flag)
        return {"add": a + b, "sub": a - b, "mul": a * b}[kind] % MOD
    if kind == "cond":
        pred = expr[1]
        if pred[0] == "less":
            taken = interpret(pred[1], env, flag) < interpret(pred[2], env, flag)
        else:
            taken = flag if pred[0] == "fed" else bool(pred[1])
        return interpret(expr[2] if taken else expr[3], env, flag)
    _, count, limit, initial, body = expr
    iterations = interpret(count, env, flag) % 4
    if limit >= 0:
        iterations = min(iterations, limit)
    acc = interpret(initial, env, flag)
    for i in range(iterations):
        acc = interpret(body, [*env, i, acc], flag)
    return acc


def build(expr: Any, env: list[kl.Tensor], flag: kl.Tensor) -> kl.Tensor:
    """The same program as a kernloom graph (loops capture every enclosing level's values)."""
    kind = expr[0]
    if kind == "var":
        return env[expr[1] % len(env)]
    if kind == "const":
        return kl.constant(np.int32(expr[1]))
    if kind in ("add", "sub", "mul"):
        a, b = build(expr[1], env, flag), build(expr[2], env, flag)
        value = {"add": ops.add, "sub": ops.sub, "mul": ops.mul}[kind](a, b)
        return ops.floor_mod(value, kl.constant(np.int32(MOD)))
    if kind == "cond":
        pred = expr[1]
        if pred[0] == "less":
            p = ops.less(build(pred[1], env, flag), build(pred[2], env, flag))
        else:
            p = flag if pred[0] == "fed" else kl.constant(bool(pred[1]))
        result: kl.Tensor = kl.cond(
            p, lambda: build(expr[2], env, flag), lambda: build(expr[3], env, flag)
        )
        return result
    _, count, limit, initial, body = expr
    bound = ops.floor_mod(build(count, env, flag), kl.constant(np.int32(4)))
    _, acc = kl.while_loop(
        lambda i, a: i < bound,
        lambda i, a: (i + 1, build(body, [*env, i, a], flag)),
        [0, build(initial, env, flag)],
        maximum_iterations=limit if limit >= 0 else None,
    )
    return acc


@settings(max_examples=30, deadline=None)
@given(
    program=programs,
    inputs=st.tuples(st.integers(-50, 50), st.integers(-50, 50)),
    flag=st.booleans(),
)
# A body that returns a value from outside the loop unchanged (a traced run never ended).
@example(program=("loop", ("const", 3), -1, ("const", 1), ("var", 0)), inputs=(7, 2), flag=True)
# A loop in a cond in a loop, with captures from each level.
@example(
    program=(
        "loop",
        ("const", 3),
        -1,
        ("var", 1),
        (
            "cond",
            ("fed", 0),
            ("loop", ("var", 2), 2, ("var", 3), ("add", ("var", 4), ("var", 5))),
            ("mul", ("var", 3), ("var", 0)),
        ),
    ),
    inputs=(5, -3),
    flag=True,
)
def test_random_programs_against_a_python_interpreter(
    registry: klp.Registry, program: Any, inputs: tuple[int, int], flag: bool
) -> None:
    want = interpret(program, list(inputs), flag)
    g = kl.Graph(registry)
    with g.as_default():
        xs = [kl.placeholder(kl.int32, [], name=f"x{k}") for k in range(2)]
        p = kl.placeholder(kl.bool_, [], name="p")
        out = build(program, xs, p)
    feed = {xs[0]: inputs[0], xs[1]: inputs[1], p: flag}
    for config in CONFIGS:
        with session(g, config) as sess:
            got = run(sess, config, out, feed)
        assert got == want, (config, program)


# -- control dependencies on nodes outside the loop ------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_a_control_dependency_on_an_outside_node_inside_a_loop_body(
    registry: klp.Registry, config: str
) -> None:
    """``kl.control_dependencies([outer])`` opened in a body, ``outer`` built outside the loop
    (an assign with an output; a no-output group): the body waits on it through a value
    brought into the frame (TensorFlow 1's ``_RemoveExternalControlEdges``), in a loop and
    in a loop nested in another. It was kept as an edge from the root frame into the loop
    frame, which every run refused ("fed from two frames"). TensorFlow 1: (3, 30.0)."""
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.float32(0.0), name="v")
        u = kl.Variable(np.float32(0.0), name="u")
        n = kl.placeholder(kl.int32, [], name="n")
        outer = v.assign(kl.constant(10.0))
        with kl.control_dependencies([u.assign(kl.constant(2.0)).node]):
            grouped = kl.ops.no_op(name="grouped")  # a node with no outputs

        def body(i: kl.Tensor, s: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            with kl.control_dependencies([outer, grouped]):
                read = v.value() + u.value()
            return i + 1, s + read

        out = kl.while_loop(lambda i, s: i < n, body, [0, 0.0])

        def outer_body(j: kl.Tensor, t: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
            inner = kl.while_loop(lambda i, s: i < n, body, [0, t])
            return j + 1, inner[1]

        nested = kl.while_loop(lambda j, t: j < 2, outer_body, [0, 0.0])
    with session(g, config) as sess:
        sess.run([v.initializer, u.initializer])
        assert list(run(sess, config, out, {n: 3})) == [3, 36.0]
        assert list(run(sess, config, out, {n: 0})) == [0, 0.0]
        assert list(run(sess, config, nested, {n: 3})) == [2, 72.0]


@pytest.mark.parametrize("config", CONFIGS)
def test_a_control_dependency_on_an_outside_node_in_a_cond_inside_a_loop(
    registry: klp.Registry, config: str
) -> None:
    """The same dependencies taken in a ``kl.cond`` branch (and in a cond in a cond) inside
    the loop body: the branch handed them on unchanged, an edge from the root frame into
    the loop's, and every run refused the graph ("fed from two frames"); the enclosing
    loop now brings them into its frame as it does for its body. TensorFlow 1 runs it:
    3, 3 and 0 (its cond branch drops the outside dependency, so its ``v`` stays 0.0; here
    the dependency holds, and ``outer`` runs once per run of a loop, as in a body)."""
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.float32(0.0), name="v")
        u = kl.Variable(np.float32(0.0), name="u")
        n = kl.placeholder(kl.int32, [], name="n")
        outer = v.assign_add(kl.constant(100.0))
        with kl.control_dependencies([u.assign(kl.constant(2.0)).node]):
            grouped = kl.ops.no_op(name="grouped")  # a node with no outputs

        def waiting(i: kl.Tensor) -> kl.Tensor:
            with kl.control_dependencies([outer, grouped]):
                return i + 1

        def body(i: kl.Tensor) -> Any:
            return kl.cond(i > 0, lambda: waiting(i), lambda: i + 1)

        def nested_body(i: kl.Tensor) -> Any:
            return kl.cond(
                i > 0, lambda: kl.cond(i > 1, lambda: waiting(i), lambda: i + 1), lambda: i + 1
            )

        (out,) = kl.while_loop(lambda i: i < n, body, [0])
        (nested,) = kl.while_loop(lambda i: i < n, nested_body, [0])
        read = v.value() + u.value()
    with session(g, config) as sess:
        sess.run([v.initializer, u.initializer])
        assert run(sess, config, out, {n: 3}) == 3
        assert sess.run(read) == 102.0
        assert run(sess, config, nested, {n: 3}) == 3
        assert run(sess, config, out, {n: 0}) == 0
        assert sess.run(read) == 302.0


# -- a loop and an independent branch ----------------------------------------------------------

FAIRNESS_CONFIGS = {
    "1-thread": kl.SessionConfig(inter_op_threads=1),
    "2-threads": kl.SessionConfig(inter_op_threads=2),
    "2-threads-no-optimizer": kl.SessionConfig(inter_op_threads=2, graph_optimizer=False),
}


@pytest.mark.parametrize("config", FAIRNESS_CONFIGS)
@pytest.mark.parametrize("two_variables", [False, True], ids=["i", "i-and-s"])
def test_a_loop_waiting_on_an_independent_branch_ends(
    registry: klp.Registry, config: str, two_variables: bool
) -> None:
    """The loop spins until a variable is set by a branch that does not depend on it
    (TensorFlow 1, two inter-op threads: ends after a few iterations). The node loop took
    ready nodes last in, first out, so the loop's own nodes, always the newest, kept the
    branch's Gather waiting for ever; a loop on its schedule, alone on the step's one
    thread, ran to its end before the nodes ready beside it."""
    g = kl.Graph(registry)
    with g.as_default():
        index = kl.placeholder(kl.int32, [1], name="index")
        flag = kl.Variable(np.float32(0.0), name="flag")

        def spinning(i: kl.Tensor, *rest: kl.Tensor) -> kl.Tensor:
            return ops.logical_and(ops.less(flag.value(), 1.0), i < 10**9)

        start = [0, 0.0] if two_variables else [0]
        body = (lambda i, s: (i + 1, s + 1.0)) if two_variables else (lambda i: i + 1)
        count = kl.while_loop(spinning, body, start)[0]
        work = ops.exp(ops.gather_v2(kl.constant([1.0, 2.0]), ops.neg(index), 0))
        with kl.control_dependencies([work]):
            set_flag = flag.assign(1.0)
    with kl.Session(g, FAIRNESS_CONFIGS[config]) as sess:
        sess.run(flag.initializer)
        options = kl.RunOptions(timeout_s=DEADLINE_S)
        iterations, value = sess.run([count, set_flag], {index: [-1]}, options)
        assert value == np.float32(1.0)
        assert 0 <= iterations < 10**9


@pytest.mark.parametrize("config", FAIRNESS_CONFIGS)
def test_an_error_beside_a_long_loop_ends_the_step_before_the_loop(
    registry: klp.Registry, config: str
) -> None:
    """A Gather out of range on a branch independent of a loop of 10**9 iterations: the
    first error stops the step, so the run raises it (TensorFlow's InvalidArgument) rather
    than first running the loop to its end (the deadline would fail the test)."""
    g = kl.Graph(registry)
    with g.as_default():
        index = kl.placeholder(kl.int32, [1], name="index")
        _, spun = kl.while_loop(lambda i, s: i < 10**9, lambda i, s: (i + 1, s + 1.0), [0, 0.0])
        bad = ops.exp(ops.gather_v2(kl.constant([1.0, 2.0]), ops.neg(index), 0, name="bad"))
    with kl.Session(g, FAIRNESS_CONFIGS[config]) as sess:
        options = kl.RunOptions(timeout_s=DEADLINE_S)
        with pytest.raises(kl.InvalidArgumentError, match="bad"):
            sess.run([spun, bad], {index: [-5]}, options)
