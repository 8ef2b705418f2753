"""IdentityN and Assert: ops whose inputs are lists of tensors of several dtypes
(``T: list(type)``), built, run, saved, loaded and imported from TensorFlow's GraphDef.

The expected values are written by hand, or TensorFlow's own (``fixtures/tf``, written by
``make_fixtures.py`` with tensorflow-cpu 2.21).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cupy_helpers import stand_in_registry
from torch_helpers import torch_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.tf import import_graph_def

assert_op = kl.ops.assert_  # TensorFlow's Assert (`assert` is a keyword)

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
BACKENDS: dict[str, Callable[[], klp.Registry]] = {
    "numpy": klp.default_registry,
    "torch": torch_registry,
    "cupy": stand_in_registry,
}


def _guarded(registry: klp.Registry | None = None) -> tuple[kl.Graph, dict[str, kl.Tensor]]:
    """x -> IdentityN([x, n, flag]); an Assert that every x >= 0, showing 7.5, n and flag,
    guards y = 2 * x."""
    graph = kl.Graph(registry)
    with graph.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        n = kl.placeholder(kl.int64, [], name="n")
        xs, ns, flags = kl.ops.identity_n([x, n, np.array([True, False])], name="ident")
        ok = kl.ops.all(kl.ops.greater_equal(xs, 0.0), [0, 1], name="ok")
        check = assert_op(ok, [np.float32(7.5), ns, flags], summarize=2, name="check")
        with kl.control_dependencies([check]):
            y = kl.ops.mul(xs, 2.0, name="doubled")
    return graph, {"x": x, "n": n, "xs": xs, "ns": ns, "flags": flags, "y": y}


def test_identity_n_infers_a_dtype_per_input_and_keeps_shapes() -> None:
    _, t = _guarded()
    assert [v.dtype for v in (t["xs"], t["ns"], t["flags"])] == [kl.float32, kl.int64, kl.bool_]
    assert [v.shape.as_list() for v in (t["xs"], t["ns"], t["flags"])] == [[None, 3], [], [2]]
    node = t["xs"].node
    assert node.attrs["T"] == [kl.float32, kl.int64, kl.bool_]
    assert kl.ops.identity_n.__name__ == "identity_n"
    assert kl.ops.assert_.__name__ == "assert_"  # `assert` is a Python keyword


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_identity_n_passes_each_value_through_and_a_true_assert_lets_the_step_run(
    backend: str,
) -> None:
    registry = BACKENDS[backend]()
    graph, t = _guarded(registry)
    x = np.array([[0.0, 1.5, 2.0]], np.float32)
    with kl.Session(graph, registry=registry) as session:
        y, n, flags = session.run([t["y"], t["ns"], t["flags"]], {t["x"]: x, t["n"]: 4})
    np.testing.assert_array_equal(y, [[0.0, 3.0, 4.0]])
    assert n.dtype == np.int64 and int(n) == 4
    np.testing.assert_array_equal(flags, [True, False])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_false_assert_fails_the_step_naming_the_node_and_showing_the_data(
    backend: str,
) -> None:
    registry = BACKENDS[backend]()
    graph, t = _guarded(registry)
    with (
        kl.Session(graph, registry=registry) as session,
        pytest.raises(kl.InvalidArgumentError) as info,
    ):
        session.run(t["y"], {t["x"]: [[-1.0, 0.0, 1.0]], t["n"]: 4})
    # TensorFlow's message: each data tensor's first `summarize` values, bools as 1/0.
    assert "node 'check' (op Assert): assertion failed: [7.5] [4] [1 0]" in str(info.value)


@pytest.mark.parametrize(
    ("summarize", "shown"),
    [
        (1, "[[1...]...] [2.5]"),
        (3, "[[1 2][3...]...] [2.5]"),
        (-1, "[[1 2][3 4]] [2.5]"),
    ],
)
def test_summarize_limits_the_values_shown(summarize: int, shown: str) -> None:
    graph = kl.Graph()
    with graph.as_default():
        check = assert_op(
            False, [np.array([[1, 2], [3, 4]], np.int32), 2.5], summarize=summarize, name="a"
        )
    with kl.Session(graph) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run([], targets=[check])
    assert str(info.value).endswith(f"assertion failed: {shown}")


_SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.1, 1 / 3, 1e20, 1.0000001, 123456789.0, 2.5e-7]
_SPECIAL += [65504.0, 100000.0, 1e6]
_NAN = float("nan")


def _tf_case_value(dtype: str, shape: tuple[int, ...], values: object) -> np.ndarray:
    """A grid case's data: ``"seq"`` (bools every third True; numbers counting up from
    -n//3, floats in steps of 1.25), ``"special"`` (``_SPECIAL`` repeated) or the values."""
    n = int(np.prod(shape))
    if values == "seq":
        if dtype == "bool":
            return (np.arange(n) % 3 == 0).reshape(shape)
        base = np.arange(n) - n // 3
        return (base * 1.25 if dtype.startswith("float") else base).astype(dtype).reshape(shape)
    if values == "special":
        return np.resize(np.array(_SPECIAL), n).astype(dtype).reshape(shape)
    return np.array(values, dtype).reshape(shape)


# TensorFlow 2.21's messages, pasted as it printed them (tensorflow-cpu 2.21.0, the
# /work/main/.venv-tf environment; run with `.venv-tf/bin/python` as below, all cases in one
# graph). Per case, with `v1 = tf.compat.v1`:
#     c = v1.placeholder(tf.bool, [])
#     check = tf.raw_ops.Assert(condition=c, summarize=summarize,
#                               data=[tf.constant(_tf_case_value(dtype, shape, values))])
#     v1.Session().run(check, {c: False})  # InvalidArgumentError
# and the error message's line "assertion failed: <tf_message>". TensorFlow's
# Tensor::SummarizeValue nests the values per dimension and stops after `summarize` of them
# with "..."; -_NAN is a NaN with the sign bit set, which it prints as -nan.
TF_ASSERT_MESSAGES: list[tuple[str, tuple[int, ...], object, int, str]] = [
    ("int32", (), "seq", 3, "[0]"),
    ("int32", (), "seq", 0, "[...]"),
    ("int32", (0,), "seq", 3, "[]"),
    ("int32", (4,), "seq", 3, "[-1 0 1...]"),
    ("int32", (4,), "seq", 0, "[...]"),
    ("int32", (2, 2), [1, 2, 3, 4], 1, "[[1...]...]"),
    ("int32", (2, 2), [1, 2, 3, 4], 2, "[[1 2]...]"),
    ("int32", (2, 2), [1, 2, 3, 4], 3, "[[1 2][3...]...]"),
    ("int32", (2, 2), [1, 2, 3, 4], -1, "[[1 2][3 4]]"),
    ("int32", (2, 2), [1, 2, 3, 4], 0, "[...]"),
    ("int32", (0, 3), "seq", 3, "[]"),
    ("int32", (3, 0), "seq", -1, "[]"),
    ("int32", (2, 0, 3), "seq", 3, "[]"),
    ("int32", (3, 1), "seq", 2, "[[-1][0]...]"),
    ("int32", (1, 3), "seq", 2, "[[-1 0...]...]"),
    ("int32", (1, 1), "seq", -1, "[[0]]"),
    ("int32", (2, 3, 4), "seq", 0, "[...]"),
    ("int32", (2, 3, 4), "seq", 1, "[[[-8...]]...]"),
    ("int32", (2, 3, 4), "seq", 3, "[[[-8 -7 -6...]]...]"),
    ("int32", (2, 3, 4), "seq", 4, "[[[-8 -7 -6 -5]]...]"),
    ("int32", (2, 3, 4), "seq", 5, "[[[-8 -7 -6 -5][-4...]]...]"),
    ("int32", (2, 3, 4), "seq", 12, "[[[-8 -7 -6 -5][-4 -3 -2 -1][0 1 2 3]]...]"),
    ("int32", (2, 3, 4), "seq", 13, "[[[-8 -7 -6 -5][-4 -3 -2 -1][0 1 2 3]][[4...]]...]"),
    (
        "int32",
        (2, 3, 4),
        "seq",
        30,
        "[[[-8 -7 -6 -5][-4 -3 -2 -1][0 1 2 3]][[4 5 6 7][8 9 10 11][12 13 14 15]]]",
    ),
    ("int32", (2, 1, 3), "seq", 4, "[[[-2 -1 0]][[1...]]...]"),
    ("int32", (1, 2, 1, 3), "seq", 5, "[[[[-2 -1 0]][[1 2...]]]...]"),
    ("int32", (2, 2, 2, 2), "seq", 3, "[[[[-5 -4][-3...]]]...]"),
    ("int32", (2, 2, 2, 2), "seq", 7, "[[[[-5 -4][-3 -2]][[-1 0][1...]]]...]"),
    (
        "int32",
        (2, 2, 2, 2),
        "seq",
        -1,
        "[[[[-5 -4][-3 -2]][[-1 0][1 2]]][[[3 4][5 6]][[7 8][9 10]]]]",
    ),
    ("bool", (), "seq", 0, "[]"),
    ("bool", (3,), "seq", 0, "[]"),
    ("bool", (2, 3), "seq", 4, "[[1 0 0][1...]...]"),
    ("bool", (0,), "seq", -1, "[]"),
    ("uint8", (2, 3), [0, 255, 7, 1, 2, 3], -1, "[[0 255 7][1 2 3]]"),
    (
        "int64",
        (2, 1),
        [-(2**63), 2**63 - 1],
        -1,
        "[[-9223372036854775808][9223372036854775807]]",
    ),
    ("uint64", (1, 2), [0, 2**64 - 1], 1, "[[0...]...]"),
    ("float16", (2, 3), "special", -1, "[[nan inf -inf][-0 0.0999755859 0.333251953]]"),
    (
        "float32",
        (3, 4),
        "special",
        30,
        "[[nan inf -inf -0][0.1 0.333333343 1e+20 1.00000012][123456792 2.5e-07 65504 100000]]",
    ),
    ("float32", (3, 4), "seq", 5, "[[-5 -3.75 -2.5 -1.25][0...]...]"),
    (
        "float64",
        (3, 4),
        "special",
        -1,
        "[[nan inf -inf -0][0.1 0.33333333333333331 1e+20 1.0000001][123456789 2.5e-07 65504 "
        "100000]]",
    ),
    (
        "float64",
        (2, 3),
        [_NAN, -_NAN, 0.3, -1e-300, 1e300, 2.0],
        -1,
        "[[nan -nan 0.3][-1e-300 1e+300 2]]",
    ),
    (
        "float32",
        (2, 2, 2),
        [_NAN, -_NAN, 0.3, 3e38, 1e-30, 2.0, 1e-7, 7.0],
        3,
        "[[[nan -nan][0.3...]]...]",
    ),
]


@pytest.mark.parametrize(
    ("dtype", "shape", "values", "summarize", "tf_message"),
    TF_ASSERT_MESSAGES,
    ids=[f"{c[0]}{list(c[1])}-{c[3]}" for c in TF_ASSERT_MESSAGES],
)
def test_the_message_is_tensorflows_for_every_rank_dtype_and_summarize(
    dtype: str, shape: tuple[int, ...], values: object, summarize: int, tf_message: str
) -> None:
    """TensorFlow's ``Tensor::SummarizeValue``: nested per dimension, ``summarize``
    elements, ``...`` after; floats in the fewest digits that read back, NaN's sign."""
    graph = kl.Graph()
    with graph.as_default():
        data = kl.constant(_tf_case_value(dtype, shape, values))
        check = assert_op(False, [data], summarize=summarize, name="a")
    with kl.Session(graph) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run([], targets=[check])
    assert str(info.value) == f"node 'a' (op Assert): assertion failed: {tf_message}"


def test_the_message_of_several_data_tensors_is_tensorflows() -> None:
    # TensorFlow 2.21's message for these three tensors and summarize=3 (as above).
    graph = kl.Graph()
    with graph.as_default():
        data = [np.array([[1, 2], [3, 4]], np.int32), np.float32(2.5), np.array([True, False])]
        check = assert_op(False, data, summarize=3, name="a")
    with kl.Session(graph) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run([], targets=[check])
    assert str(info.value).endswith("assertion failed: [[1 2][3...]...] [2.5] [1 0]")


def test_complex_values_print_as_python_does_where_tensorflow_prints_question_marks() -> None:
    """TensorFlow prints '[? ? ?...]' for these; kernloom shows the values, nested."""
    graph = kl.Graph()
    with graph.as_default():
        data = np.array([[1 + 2j, 3], [4, 5]], np.complex64)
        check = assert_op(False, [data], summarize=3, name="a")
    with kl.Session(graph) as session, pytest.raises(kl.InvalidArgumentError) as info:
        session.run([], targets=[check])
    assert str(info.value).endswith("assertion failed: [[(1+2j) (3+0j)][(4+0j)...]...]")


def test_the_condition_must_be_a_scalar() -> None:
    graph = kl.Graph()
    with graph.as_default():
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"node 'a' \(op Assert\).*condition must be a scalar bool, got shape \(1,\)",
        ):
            assert_op([True], [1.0], name="a")
        unknown = kl.placeholder(kl.bool_, None, name="c")
        check = assert_op(unknown, [1.0], name="b")
    with (
        kl.Session(graph) as session,
        pytest.raises(kl.InvalidArgumentError, match=r"node 'b' \(op Assert\).*got shape \[2\]"),
    ):
        session.run([], {unknown: [True, True]}, targets=[check])


def test_an_empty_list_is_refused_when_the_node_is_built() -> None:
    with (
        kl.Graph().as_default(),
        pytest.raises(kl.InvalidArgumentError, match="length 0 is below the minimum 1"),
    ):
        kl.ops.identity_n([], name="none")


def test_the_graph_file_keeps_the_type_lists(tmp_path: Path) -> None:
    graph, _ = _guarded()
    path = tmp_path / "guarded.json"
    graph.save(path)
    loaded = kl.Graph.load(path)
    assert loaded.node("ident").attrs["T"] == [kl.float32, kl.int64, kl.bool_]
    assert loaded.node("check").attrs == graph.node("check").attrs
    assert loaded.to_json() == graph.to_json()
    with kl.Session(loaded) as session:
        (y,) = session.run(["doubled:0"], {"x:0": np.ones((1, 3), np.float32), "n:0": 1})
        np.testing.assert_array_equal(y, [[2.0, 2.0, 2.0]])
        with pytest.raises(kl.InvalidArgumentError, match="assertion failed"):
            session.run(["doubled:0"], {"x:0": -np.ones((1, 3), np.float32), "n:0": 1})


def test_tensorflows_identity_n_and_assert_import_and_give_its_outputs() -> None:
    graph = import_graph_def(FIXTURES / "identity_n_assert.pb")
    assert graph.node("ident").attrs["T"] == [kl.float32, kl.int64, kl.bool_]
    assert graph.node("check").attrs["summarize"] == 2
    with np.load(FIXTURES / "identity_n_assert.npz") as archive:
        feeds = {k[5:]: archive[k] for k in archive.files if k.startswith("feed:")}
        fetches = {k[6:]: archive[k] for k in archive.files if k.startswith("fetch:")}
    with kl.Session(graph) as session:
        values = session.run(list(fetches), feeds)
        for (name, want), got in zip(fetches.items(), values, strict=True):
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
        negative = {**feeds, "x:0": -np.abs(feeds["x:0"])}
        with pytest.raises(kl.InvalidArgumentError) as info:
            session.run(["doubled:0"], negative)
    assert "node 'check' (op Assert): assertion failed: [7.5] [4] [1 0]" in str(info.value)
