"""The Python session API against careless and hostile calls: fetch structures and keys
TensorFlow 1's ``Session.run`` takes (or refuses), feeds of odd kinds, ``make_callable``'s
arguments, ``targets``, and ``SessionConfig``/``RunOptions`` values that must be errors
naming the argument, in Python API terms.

The expected values come from numpy and from what ``tf.compat.v1.Session`` does (noted
per test), never from kernloom itself.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import numpy as np
import pytest
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


class Model:
    """A small graph: a float placeholder with a known inner size, an int placeholder of a
    known shape, a constant, a two-output node, and a variable."""

    def __init__(self, registry: klp.Registry) -> None:
        self.graph = g = kl.Graph(registry)
        with g.as_default():
            self.x = kl.placeholder(kl.float32, [None, 3], name="x")
            self.c = kl.constant(np.array([0.0, 1.0, 2.0], np.float32), name="c")
            self.y = kl.ops.add(self.x, self.c, name="y")
            self.i = kl.placeholder(kl.int32, [2], name="i")
            self.twice = kl.ops.add(self.i, self.i, name="twice")
            self.top = kl.ops.top_kv2(self.c, 2, name="top")
            self.scaled = kl.ops.mul(self.top[0], 2.0, name="scaled")
            self.v = kl.Variable(np.zeros(3, np.float32), name="v")
            self.init = kl.variables_initializer()
            self.read = self.v.value()
            self.set_ones = self.v.assign(np.ones(3, np.float32))


@pytest.fixture
def model(registry: klp.Registry) -> Model:
    return Model(registry)


XV = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
Y_EXPECTED = XV + np.array([0.0, 1.0, 2.0], np.float32)


# -- fetch structures ----------------------------------------------------------------------------


def test_a_defaultdict_of_fetches_comes_back_as_a_defaultdict(model: Model) -> None:
    """TF1's ``_DictFetchMapper`` rebuilds a defaultdict with its default factory; kernloom
    called ``defaultdict(built)``, a TypeError ("first argument must be callable")."""
    fetches = collections.defaultdict(list, {"y": model.y, "nested": {"c": model.c}})
    with kl.Session(model.graph) as sess:
        out = sess.run(fetches, {model.x: XV})
        made = sess.make_callable(fetches, [model.x])(XV)
    for result in (out, made):
        assert type(result) is collections.defaultdict
        assert result.default_factory is list
        np.testing.assert_array_equal(result["y"], Y_EXPECTED)
        np.testing.assert_array_equal(result["nested"]["c"], [0.0, 1.0, 2.0])
        assert result["missing"] == []  # the factory still works


def _other_graph(registry: klp.Registry) -> tuple[kl.Tensor, kl.Node]:
    """A graph with nodes named as the model's ('y', 'x') but other values."""
    other = kl.Graph(registry)
    with other.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        y = kl.ops.add(x, 100.0, name="y")
    return y, y.node


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s, m, node: s.run(node, {m.x: XV}), id="run-fetch-node"),
        pytest.param(lambda s, m, node: s.run([m.y, node], {m.x: XV}), id="run-fetch-in-list"),
        pytest.param(lambda s, m, node: s.make_callable(node, [m.x]), id="make_callable"),
        pytest.param(lambda s, m, node: s.run(m.y, {m.x: XV}, targets=[node]), id="target"),
    ],
)
def test_a_node_of_another_graph_is_refused_even_when_the_name_exists(
    registry: klp.Registry, model: Model, call: Any
) -> None:
    """A tensor of another graph was refused, but a node of another graph whose name the
    session's graph also has silently ran the session graph's node. TF1 refuses both
    ("... is not an element of this graph")."""
    _, node = _other_graph(registry)
    with (
        kl.Session(model.graph) as sess,
        pytest.raises(kl.InvalidArgumentError, match=r"node 'y' belongs to another graph"),
    ):
        call(sess, model, node)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        pytest.param(
            lambda s, m: s.run(m.v),
            r"fetch <kl.Variable 'v'.*fetch its value: v\.value\(\)",
            id="fetch",
        ),
        pytest.param(
            lambda s, m: s.run({"v": [m.v]}),
            r"fetch <kl.Variable 'v'.*v\.value\(\)",
            id="fetch-nested",
        ),
        pytest.param(
            lambda s, m: s.run(m.read, {m.v: np.ones(3, np.float32)}),
            r"feed <kl.Variable 'v'.*v\.value\(\).*v\.assign\(value\)",
            id="feed",
        ),
        pytest.param(
            lambda s, m: s.run(m.scaled, {m.top[0].node: [7.0, 8.0]}),
            r"feed <kl.Node 'top'.*is a kl.Node.*'top:0' or 'top:1'",
            id="feed-node",
        ),
    ],
)
def test_a_variable_or_node_where_a_tensor_belongs_says_which_tensor_to_use(
    model: Model, call: Any, match: str
) -> None:
    """A TF1 user writes ``sess.run(v)``; here a variable is state (``v.value()`` adds a
    read), so the error must say so, not only "cannot fetch"."""
    with kl.Session(model.graph) as sess:
        sess.run(model.init)
        with pytest.raises(TypeError, match=match):
            call(sess, model)


@pytest.mark.parametrize("name", ["y:-1", "y:", "y:one"])
def test_a_malformed_output_index_is_named_as_such(model: Model, name: str) -> None:
    """'y:-1' was reported as "not a node of the graph", though node 'y' exists."""
    with (
        kl.Session(model.graph) as sess,
        pytest.raises(kl.NotFoundError, match=r"is not an output index.*node 'y' \(op Add\) has 1"),
    ):
        sess.run(name, {model.x: XV})


# -- feeds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tensor", "value", "expected"),
    [
        ("i", np.array([1, 2], dtype=object), [2, 4]),
        ("i", np.array([np.int64(3), 4], dtype=object), [6, 8]),
        ("x", np.array([[1, 2.5, 3]], dtype=object), [[1.0, 3.5, 5.0]]),
        ("x", np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=object), Y_EXPECTED.tolist()),
    ],
)
@pytest.mark.parametrize("via", ["run", "make_callable"])
def test_an_object_array_of_numbers_feeds_like_the_list_it_holds(
    model: Model, tensor: str, value: np.ndarray, expected: list[Any], via: str
) -> None:
    """TF1 feeds ``np.asarray(value, dtype)``, which takes an object array of numbers;
    kernloom said "value 1 (int) cannot be converted to int32"."""
    fetch = model.twice if tensor == "i" else model.y
    with kl.Session(model.graph) as sess:
        if via == "run":
            out = sess.run(fetch, {tensor: value})
        else:
            out = sess.make_callable(fetch, [tensor])(value)
    np.testing.assert_array_equal(out, np.asarray(expected))


@pytest.mark.parametrize(
    ("value", "shown"),
    [(np.array(["1", "2"], dtype=object), r"'1' \(str\)"), (np.array([1, None], object), "None")],
)
def test_an_object_array_of_non_numbers_names_the_value_and_the_fix(
    model: Model, value: np.ndarray, shown: str
) -> None:
    """Taking object arrays of numbers must not let other objects through."""
    with kl.Session(model.graph) as sess:
        numbers = sess.run(model.twice, {model.i: np.array([1, 2], dtype=object)})
        np.testing.assert_array_equal(numbers, [2, 4])
        with pytest.raises(kl.InvalidArgumentError) as caught:
            sess.run(model.twice, {model.i: value})
    message = str(caught.value)
    assert message.startswith("feed for 'i:0' (int32, shape (2,)): value ")
    assert re.search(shown, message)
    assert "feed_dict={'i': np.asarray(values, dtype='int32')}" in message


@pytest.mark.parametrize(
    ("key", "value", "shape", "fix"),
    [
        ("i", [1, 2, 3], r"\[3\]", r"Give a value of shape \(2,\) as feed_dict=\{'i': value\}"),
        ("i", np.int32(3), r"\[\]", r"Give a value of shape \(2,\) as feed_dict=\{'i': value\}"),
        (
            "x",
            np.ones(3, np.float32),
            r"\[3\]",
            r"Give a value of shape \(\?, 3\) \(\? is any size\) as feed_dict=\{'x': value\}",
        ),
    ],
)
def test_a_feed_of_the_wrong_shape_names_both_shapes_and_the_fix(
    model: Model, key: str, value: object, shape: str, fix: str
) -> None:
    """TF1: "Cannot feed value of shape (3,) for Tensor i:0, which has shape (2,)"; the
    guide promises an error naming the tensor, and every error says what would fix it."""
    fetch = model.twice if key == "i" else model.y
    with (
        kl.Session(model.graph) as sess,
        pytest.raises(
            kl.InvalidArgumentError,
            match=rf"^feed for '{key}:0' .* has shape {shape}, which does not fit .*\. {fix}\.$",
        ),
    ):
        sess.run(fetch, {key: value})


def test_a_tensor_fed_twice_says_to_keep_one_key(model: Model) -> None:
    with (
        kl.Session(model.graph) as sess,
        pytest.raises(kl.InvalidArgumentError, match=r"'x:0' is fed twice: .*keep one"),
    ):
        sess.run(model.y, {model.x: XV, "x:0": XV})


# -- make_callable and targets -------------------------------------------------------------------


def test_make_callable_takes_feed_list_none_as_no_feeds(model: Model) -> None:
    """TF1's signature is ``make_callable(fetches, feed_list=None)``."""
    with kl.Session(model.graph) as sess:
        constant = sess.make_callable(model.c, None)
        pair = sess.make_callable([model.top[0], "top:1"], feed_list=None)
        np.testing.assert_array_equal(constant(), [0.0, 1.0, 2.0])
        values, indices = pair()
    np.testing.assert_array_equal(values, [2.0, 1.0])
    np.testing.assert_array_equal(indices, [2, 1])


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("options", {"timeout_s": 5}),
        ("run_metadata", {}),
        ("cancellation", 1),
    ],
)
def test_a_callables_run_arguments_are_checked_by_name(
    model: Model, argument: str, value: object
) -> None:
    """``Session.run`` refused these with a TypeError naming the argument; the callable
    failed later with ``AttributeError: 'dict' object has no attribute 'trace'``."""
    with kl.Session(model.graph) as sess:
        call = sess.make_callable(model.y, [model.x])
        with pytest.raises(TypeError, match=rf"callable: {argument} must be a kl\."):
            call(XV, **{argument: value})


def test_a_callable_given_the_wrong_number_of_values_says_how_to_call_it(model: Model) -> None:
    with kl.Session(model.graph) as sess:
        call = sess.make_callable(model.y, [model.x])
        with pytest.raises(kl.InvalidArgumentError, match=r"one value per tensor of .*feed_list"):
            call()


@pytest.mark.parametrize("feed_list", ["x", "x:0"])
def test_a_lone_feed_name_for_feed_list_says_to_wrap_it_in_a_list(
    model: Model, feed_list: str
) -> None:
    with (
        kl.Session(model.graph) as sess,
        pytest.raises(TypeError, match=r"for one feed, pass a list of one"),
    ):
        sess.make_callable(model.y, feed_list)


def test_a_tensor_as_a_target_runs_its_node(model: Model) -> None:
    """``v.assign(...)`` returns a tensor; naming it in ``targets`` was "not a node of the
    graph" (with the tensor's repr), though TF1 runs a fetched tensor's op."""
    with kl.Session(model.graph) as sess:
        sess.run(model.init)
        assert sess.run(model.c, targets=[model.set_ones]).tolist() == [0.0, 1.0, 2.0]
        np.testing.assert_array_equal(sess.run(model.read), np.ones(3, np.float32))
        with pytest.raises(TypeError, match=r"target int 3 is not a node"):
            sess.run(model.c, targets=[3])  # type: ignore[list-item]


# -- SessionConfig and RunOptions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: kl.SessionConfig(inter_op_threads=-1), r"^SessionConfig\(inter_op_threads=-1\): "),
        (lambda: kl.SessionConfig(inter_op_threads=0), r"^SessionConfig\(inter_op_threads=0\): "),
        (
            lambda: kl.SessionConfig(inter_op_threads=True),
            r"^SessionConfig\(inter_op_threads=True\): .*whole number, not a bool",
        ),
        (
            lambda: kl.SessionConfig(inter_op_threads="4"),
            r"^SessionConfig\(inter_op_threads='4'\): .*whole number, not a str",
        ),
        (lambda: kl.SessionConfig(intra_op_threads=-3), r"^SessionConfig\(intra_op_threads=-3\)"),
        (
            lambda: kl.SessionConfig(device_filters="CPU"),
            r"^SessionConfig\(device_filters='CPU'\): .*write device_filters=\('CPU',\)",
        ),
        (
            lambda: kl.SessionConfig(disabled_passes="cse"),
            r"^SessionConfig\(disabled_passes='cse'\): .*write disabled_passes=\('cse',\)",
        ),
        (
            lambda: kl.SessionConfig(device_count={"CPU": -1}),
            r"^SessionConfig\(device_count=\{'CPU': -1\}\): .*0 .* or more",
        ),
        (
            lambda: kl.SessionConfig(memory_limit={"CPU": -5}),
            r"^SessionConfig\(memory_limit=\{'CPU': -5\}\): .*bytes greater than 0",
        ),
        (
            lambda: kl.SessionConfig(allow_soft_placment=True),
            r"SessionConfig has no argument 'allow_soft_placment'.*"
            r"Did you mean 'allow_soft_placement'",
        ),
        (lambda: kl.RunOptions(timeout_s=0), r"^RunOptions\(timeout_s=0\): must be greater than 0"),
        (lambda: kl.RunOptions(timeout_s=-1.5), r"^RunOptions\(timeout_s=-1.5\): "),
        (lambda: kl.RunOptions(timeout_s="10"), r"^RunOptions\(timeout_s='10'\): .*seconds"),
        (lambda: kl.RunOptions(timeout=1), r"no argument 'timeout'.*Did you mean 'timeout_s'"),
    ],
)
def test_bad_config_and_options_values_are_errors_naming_the_argument(
    make: Any, match: str
) -> None:
    """The guide: "Every error is a kl.KernloomError" naming what is at fault, in Python API
    terms. These raised pydantic's ``ValidationError`` (with a URL), or were accepted
    (``inter_op_threads=True`` as 1 thread, ``device_count={'CPU': -1}``, a negative
    memory limit that surfaced later as "no device could be created")."""
    with pytest.raises(kl.InvalidArgumentError, match=match) as caught:
        make()
    assert isinstance(caught.value, ValueError)  # as pydantic's ValidationError was
    assert "pydantic" not in str(caught.value)


@pytest.mark.parametrize("argument", ["memory_limit", "device_count"])
def test_an_unknown_device_type_in_the_config_is_an_error_with_a_suggestion(
    registry: klp.Registry, model: Model, argument: str
) -> None:
    """A typo ('CPX') was silently ignored: the limit or count never applied. A count of 0
    for a type no plugin provides stays fine (``device_count={'GPU': 0}``, TF's idiom)."""
    config = kl.SessionConfig(**{argument: {"CPX": 1 << 20}})
    with pytest.raises(
        kl.NotFoundError,
        match=rf"^SessionConfig\({argument}=\{{'CPX': 1048576\}}\): no device type 'CPX'; "
        r"the types are: CPU\. Did you mean 'CPU'\?",
    ):
        kl.Session(model.graph, config)
    with kl.Session(model.graph, kl.SessionConfig(device_count={"TPU": 0})) as sess:
        np.testing.assert_array_equal(sess.run(model.y, {model.x: XV}), Y_EXPECTED)


# -- conversions (kernloom/convert.py) and device selection (kernloom/registry.py) ----------------


def test_a_huge_python_int_feeds_a_float_tensor_and_object_arrays_make_constants(
    registry: klp.Registry,
) -> None:
    """2**70 is a float64 (TF1 feeds it; numpy's array of the list is an object array), and
    an object array of numbers is the constant its numbers make; an int tensor still
    refuses the huge int, naming it."""
    g = kl.Graph(registry)
    with g.as_default():
        u = kl.placeholder(kl.float64, [2], name="u")
        doubled = kl.ops.mul(u, 2.0)
        k = kl.constant(np.array([1, 2], dtype=object), dtype=kl.int32)
        i = kl.placeholder(kl.int32, [2], name="i")
    with kl.Session(g) as sess:
        np.testing.assert_array_equal(sess.run(doubled, {u: [2**70, 1]}), [2.0**71, 2.0])
        np.testing.assert_array_equal(sess.run(k), np.array([1, 2], np.int32))
        with pytest.raises(kl.InvalidArgumentError, match="1180591620717411303424 is out of range"):
            sess.run(i, {i: [2**70, 1]})


def test_a_bad_factory_override_names_the_session_argument(model: Model) -> None:
    """Not ``DeviceOptions.factory_overrides`` (the plugin API's name): the session's words."""
    config = kl.SessionConfig(factory_overrides={"CPU": "nope"})
    with pytest.raises(kl.NotFoundError, match=r"SessionConfig\(factory_overrides="):
        kl.Session(model.graph, config)
