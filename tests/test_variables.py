"""Resource variables: semantics across runs, threads and sessions, errors, placement."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.graph.builder import apply_op


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


W0 = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)


def test_values_persist_across_runs_and_updates_match_numpy(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(W0, name="w")
        delta = kl.placeholder(kl.float32, [2, 2], name="delta")
        added = w.assign_add(delta)
        subtracted = w.assign_sub(delta * 3.0)
        replaced = w.assign(kl.constant(np.ones((2, 2), np.float32)) * 5.0)
        doubled = w * 2.0  # a variable stands for its value in expressions
        init = kl.variables_initializer()
    d = np.array([[0.5, -1.0], [2.0, 0.0]], np.float32)
    with kl.Session(g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run(w.value()), W0)
        np.testing.assert_array_equal(s.run(added, {delta: d}), W0 + d)
        np.testing.assert_array_equal(s.run(added, {delta: d}), W0 + 2 * d)
        np.testing.assert_array_equal(s.run(subtracted, {delta: d}), W0 + 2 * d - 3 * d)
        np.testing.assert_array_equal(s.run(doubled), 2 * (W0 - d))
        np.testing.assert_array_equal(s.run(replaced), np.full((2, 2), 5.0, np.float32))
        s.run(w.initializer)
        np.testing.assert_array_equal(s.run(w.value()), W0)


def test_a_fetched_value_does_not_change_with_later_updates(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.zeros(3, np.float32), name="v")
        bump = v.assign_add(np.ones(3, np.float32))
    with kl.Session(g) as s:
        s.run(v.initializer)
        first = s.run(v.value())
        s.run(bump)
        np.testing.assert_array_equal(first, np.zeros(3))
        np.testing.assert_array_equal(s.run(v.value()), np.ones(3))


def test_the_caller_feeding_an_assign_keeps_its_array(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.zeros(3, np.float32), name="v")
        x = kl.placeholder(kl.float32, [3], name="x")
        assigned = v.assign(x)
    fed = np.arange(3, dtype=np.float32)
    with kl.Session(g) as s:
        s.run(v.initializer)
        np.testing.assert_array_equal(s.run(assigned, {x: fed}), fed)
        fed[:] = 100  # the variable copied the value on assignment
        np.testing.assert_array_equal(s.run(v.value()), [0, 1, 2])


def test_reading_an_uninitialised_variable_names_it(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(1.0, name="learning_rate")
        is_init = v.is_initialized()
    with kl.Session(g) as s:
        assert not s.run(is_init)
        with pytest.raises(kl.KernelError, match="variable 'learning_rate' was never initialised"):
            s.run(v.value())
        s.run(v.initializer)
        assert s.run(is_init)
        assert s.run(v.value()) == 1.0


def test_wrong_dtype_or_shape_is_an_error_naming_both(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(np.zeros((2, 3), np.float32), name="kernel")
        with pytest.raises(
            kl.InvalidArgumentError, match=r"'kernel'.*shape \(4,\).*shape \(2, 3\)"
        ):
            v.assign(np.zeros(4, np.float32))
        with pytest.raises(kl.InvalidArgumentError, match=r"'kernel'.*int32.*float32"):
            v.assign(kl.constant(np.zeros((2, 3), np.int32)))
        # Shapes only known at run time are checked by the kernel.
        anything = kl.placeholder(kl.float32, None, name="anything")
        late = apply_op("AssignVariableOp", [v.handle, anything], {}, name="late")
    with kl.Session(g) as s:
        s.run(v.initializer)
        with pytest.raises(
            kl.KernelError, match=r"'late'.*shape \[5\] to variable 'kernel' of shape \(2, 3\)"
        ):
            s.run(late, {anything: np.zeros(5, np.float32)})
        s.run(late, {anything: np.ones((2, 3), np.float32)})
        np.testing.assert_array_equal(s.run(v.value()), np.ones((2, 3)))


def test_threads_updating_one_variable_count_every_update(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        counter = kl.Variable(np.int64(0), name="counter")
        total = kl.Variable(np.zeros(4, np.float64), name="total")
        bump = counter.assign_add(np.int64(1))
        add_ones = total.assign_add(np.ones(4))
        init = kl.variables_initializer([counter, total])
    with kl.Session(g, kl.SessionConfig(inter_op_threads=4)) as s:
        s.run(init)

        def worker() -> None:
            for _ in range(200):
                s.run([bump, add_ones])

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert s.run(counter.value()) == 8 * 200
        np.testing.assert_array_equal(s.run(total.value()), np.full(4, 1600.0))


def test_variables_belong_to_the_session_and_go_with_it(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        v = kl.Variable(3, name="v")
        bump = v.assign_add(1)
    first = kl.Session(g)
    second = kl.Session(g)
    try:
        first.run(v.initializer)
        second.run(v.initializer)
        assert first.run(bump) == 4 and first.run(bump) == 5
        assert second.run(v.value()) == 3  # sessions do not share variables
        assert first.resource_mgr.names() == ["v"]
    finally:
        first.close()
        second.close()
    assert first.resource_mgr.names() == []
    with kl.Session(g) as third, pytest.raises(kl.KernelError, match="never initialised"):
        third.run(v.value())


def test_a_variable_updated_inside_a_while_loop(registry: klp.Registry) -> None:
    target = np.array([1.0, -2.0, 3.0], np.float32)
    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(np.zeros(3, np.float32), name="w")
        lr = kl.placeholder(kl.float32, [], name="lr")

        def body(i: kl.Tensor) -> kl.Tensor:
            with kl.control_dependencies([w.assign_sub((w - target) * lr)]):
                return i + 1

        (steps,) = kl.while_loop(lambda i: i < 30, body, [0], parallel_iterations=1)
    with kl.Session(g) as s:
        s.run(w.initializer)
        assert s.run(steps, {lr: 0.25}) == 30
        got = s.run(w.value())
    want = np.zeros(3, np.float32)
    for _ in range(30):
        want = want - (want - target) * np.float32(0.25)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_variables_users_are_placed_with_it() -> None:
    registry = make_registry(accel=True)
    g = kl.Graph(registry)
    with g.as_default():
        w = kl.Variable(np.ones(3, np.float32), name="w")
        scaled = w * 2.0  # Mul has a FAKE_ACCEL kernel, ReadVariableOp does not
        update = w.assign_add(scaled)
    with kl.Session(g) as s:
        s.run(w.initializer)
        md = kl.RunMetadata()
        np.testing.assert_array_equal(s.run(update, run_metadata=md), np.full(3, 3.0))
        placement = md.placement
        cpu = {placement[n] for n in ("w", "w/Read", "w/AssignAdd", "w/Read_1")}
        assert len(cpu) == 1 and "CPU" in cpu.pop()
        assert "FAKE_ACCEL" in placement["mul"]


def test_an_initializer_for_a_graph_without_variables_says_where_to_build_it() -> None:
    with pytest.raises(kl.InvalidArgumentError, match=r"has no kl\.Variable"):
        kl.variables_initializer(graph=kl.Graph())


@pytest.mark.parametrize(
    ("name", "problem", "suggestion"),
    [
        ("layer:0", "':' is not allowed in a node name", "layer_0"),
        ("bad name", "' ' is not allowed in a node name", "bad_name"),
        ("_w", "it starts with '_'", "w"),
        ("", "is empty", "Variable"),
        # kernloom's own: TensorFlow takes 'w/' as its scope re-entered (variable 'w');
        # here it used to give a handle 'w/' and an initializer 'w//Assign'.
        ("w/", "it ends with '/'", "w"),
    ],
)
def test_a_name_that_is_no_node_name_names_the_argument(
    registry: klp.Registry, name: str, problem: str, suggestion: str
) -> None:
    # TensorFlow 2.21 refuses these too: tf.compat.v1.Variable(..., name="layer:0") raises
    # "'layer:0' is not a valid root scope name" (':' would read as a tensor's output index).
    g = kl.Graph(registry)
    for initial in (np.ones(1, np.float32), kl.constant(np.ones(1, np.float32), graph=g)):
        with g.as_default(), pytest.raises(kl.InvalidArgumentError) as info:
            kl.Variable(initial, name=name)
        message = str(info.value)
        assert message.startswith(f"kl.Variable: name={name!r} ")
        assert problem in message
        assert f"pass e.g. name={suggestion!r}" in message
    assert not any(n.op == "VarHandleOp" for n in g.nodes)  # refused before adding anything
    with g.as_default():
        assert kl.Variable(np.ones(1, np.float32), name=suggestion).name == suggestion


def test_a_variable_in_a_name_scope_is_named_once_and_keeps_its_own_value(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        with kl.name_scope("sc"):
            v = kl.Variable(np.float32(1.0), name="v")
            bumped = v.assign_add(10.0)
        other = kl.Variable(np.float32(100.0), name="sc/v")  # another variable
        other_read = other.value()
        init = kl.variables_initializer()
    # TensorFlow 2.21 (tf.compat.v1.Variable(use_resource=True)): 'sc/v', then 'sc/v_1', with
    # shared_name b'sc/v' and b'sc/v_1', initializers 'sc/v/Assign' and 'sc/v_1/Assign'.
    # (They were 'sc/sc/v' and 'sc/v', both stored under 'sc/v': one value for two.)
    assert (v.name, other.name) == ("sc/v", "sc/v_1")
    assert [x.handle.node.attrs["shared_name"] for x in (v, other)] == ["sc/v", "sc/v_1"]
    assert (v.initializer.name, other.initializer.name) == ("sc/v/Assign", "sc/v_1/Assign")
    assert [n.name for n in g.nodes] == [
        "sc/v/initial_value",
        "sc/v",
        "sc/v/Assign",
        "sc/v/AssignAdd_value",
        "sc/v/AssignAdd",
        "sc/v/Read",
        "sc/v_1/initial_value",
        "sc/v_1",
        "sc/v_1/Assign",
        "sc/v_1/Read",
        "init",
    ]
    path = tmp_path / "scoped.json"
    g.save(path)
    for graph in (g, kl.Graph.load(path)):
        with kl.Session(graph) as s:
            s.run(init.name)
            assert s.run(bumped.name) == 11.0  # TF 2.21: v 11.0, the other 100.0
            assert s.run(other_read.name) == 100.0
            assert sorted(s.resource_mgr.names()) == ["sc/v", "sc/v_1"]


def test_variable_names_are_made_unique_as_in_tensorflow(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        kl.constant(1.0, name="d")
        after_node = kl.Variable(1.0, name="d")
        with kl.name_scope("sc2"):
            scoped = kl.Variable(1.0, name="q")
        root = kl.Variable(1.0, name="q")
        nested = kl.Variable(1.0, name="a/b")
        with kl.name_scope("sc"):
            first = kl.Variable(1.0, name="u")
        second, third = kl.Variable(1.0, name="sc/u"), kl.Variable(1.0, name="sc/u")
        node_after = kl.constant(1.0, name="q")
    # TensorFlow 2.21: d_1, sc2/q, q, a/b, sc/u, sc/u_1, sc/u_2 (and a node 'q' is then 'q_1').
    assert [x.name for x in (after_node, scoped, root, nested, first, second, third)] == [
        "d_1",
        "sc2/q",
        "q",
        "a/b",
        "sc/u",
        "sc/u_1",
        "sc/u_2",
    ]
    assert node_after.name == "q_1:0"
    with pytest.raises(kl.InvalidArgumentError, match="initial value has shape"):
        kl.Variable(np.ones(2, np.float32), shape=[3], name="refused", graph=g)
    assert kl.Variable(np.ones(3, np.float32), name="refused", graph=g).name == "refused"


def test_a_variable_created_in_a_cond_branch_is_created_outside_it(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        made: list[kl.Variable] = []

        def true_fn() -> kl.Tensor:
            made.append(kl.Variable(5.0, name="incond"))
            return made[0].value()

        r = kl.cond(p, true_fn, lambda: kl.constant(1.0))
        init = kl.variables_initializer()
    (v,) = made
    # TensorFlow 2.21 names it 'cond/incond' (its initializer 'cond/incond/Assign'), built
    # outside the cond: its initializer runs with no feed (it used to need p, and p=False
    # silently initialised nothing).
    assert (v.name, v.initializer.name) == ("cond/incond", "cond/incond/Assign")
    assert v.handle.node.control_inputs == v.initializer.control_inputs == []
    assert [t.node.op for t in v.initializer.inputs] == ["VarHandleOp", "Const"]  # no Switch
    assert g.node("cond/incond/initial_value").control_inputs == []  # no pivot
    path = tmp_path / "cond_var.json"
    g.save(path)
    for graph in (g, kl.Graph.load(path)):
        with kl.Session(graph) as s:
            s.run(init.name)  # no feed
            assert s.run(r.name, {"p:0": True}) == 5.0  # TF 2.21: 5.0
            assert s.run(r.name, {"p:0": False}) == 1.0


def test_a_variable_created_in_a_loop_body_can_be_read_after_the_loop(
    registry: klp.Registry, tmp_path: Path
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        holder: list[kl.Variable] = []

        def body(i: kl.Tensor) -> kl.Tensor:
            if not holder:
                holder.append(kl.Variable(0.0, name="inloop"))
            bumped = holder[0].assign_add(1.0)
            with kl.control_dependencies([bumped]):
                return i + 1

        (loop,) = kl.while_loop(lambda i: i < 4, body, [0])
        read = holder[0].value()  # used to be fetchable only inside the loop's frame
        init = kl.variables_initializer()
    assert holder[0].name == "while/inloop"  # TF 2.21: 'while/inloop'
    path = tmp_path / "loop_var.json"
    g.save(path)
    for graph in (g, kl.Graph.load(path)):
        with kl.Session(graph) as s:
            s.run(init.name)
            assert s.run(loop.name) == 4 and s.run(read.name) == 4.0  # TF 2.21: '4 4.0'


def test_a_cond_in_a_loop_body_creating_a_variable(registry: klp.Registry) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        holder: list[kl.Variable] = []

        def body(i: kl.Tensor) -> kl.Tensor:
            def bump() -> kl.Tensor:
                if not holder:
                    holder.append(kl.Variable(10.0, name="deep"))
                return holder[0].assign_add(1.0)

            done = kl.cond(i > 0, bump, lambda: kl.constant(0.0))
            with kl.control_dependencies([done]):
                return i + 1

        (loop,) = kl.while_loop(lambda i: i < 4, body, [0])
        init = kl.variables_initializer()
        after = holder[0].value()
    assert holder[0].name == "while/cond/deep"
    with kl.Session(g) as s:
        s.run(init)
        assert s.run(loop) == 4 and s.run(after) == 13.0  # bumped for i = 1, 2, 3


def test_an_initial_value_computed_in_control_flow_is_an_error_naming_the_variable(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        p = kl.placeholder(kl.bool_, [], name="p")
        x = kl.placeholder(kl.float32, [], name="x")

        def from_branch() -> kl.Tensor:
            return kl.Variable(x * 2.0, name="fromin").value()

        def from_loop(i: kl.Tensor) -> kl.Tensor:
            kl.Variable(kl.ops.cast(i, DstT=kl.float32), name="fromloop")
            return i + 1

        # TensorFlow 2.21 refuses both: ValueError "The `initial_value` passed to
        # `tf.Variable` cond/fromin/ is from inside a control-flow construct ..."
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"kl.Variable 'cond/fromin': the initial value 'cond/mul:0' is computed "
            r"inside a kl.cond branch",
        ):
            kl.cond(p, from_branch, lambda: kl.constant(1.0))
        with pytest.raises(
            kl.InvalidArgumentError, match=r"kl.Variable 'while/fromloop': .*'while/cast:0'"
        ):
            kl.while_loop(lambda i: i < 3, from_loop, [0])
        assert not any(n.op == "VarHandleOp" for n in g.nodes)

        made: list[kl.Variable] = []

        def from_outside() -> kl.Tensor:  # a tensor from outside the cond is fine (TF too)
            made.append(kl.Variable(x, name="fromout"))
            return made[0].value()

        r = kl.cond(p, from_outside, lambda: kl.constant(1.0))
        init = kl.variables_initializer()
    assert made[0].initializer.inputs[1] is x
    with kl.Session(g) as s:
        s.run(init, {x: 3.0})
        assert s.run(r, {p: True}) == 3.0


def test_a_variable_is_initialised_without_the_open_control_dependencies(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        a = kl.constant(1.0, name="a")
        with kl.control_dependencies([a]), kl.device("CPU:0"):
            w = kl.Variable(2.0, name="w")
            read = w.value()
    # TensorFlow 2.21: no control inputs on 'w', 'w/Assign', 'w/Initializer/initial_value'.
    for node in (w.handle.node, w.initializer, g.node("w/initial_value")):
        assert node.control_inputs == [] and node.requested_device == "CPU:0"
    assert read.node.control_inputs == [a.node]  # a read built in the scope waits
