"""The ``Tensor`` operators with TensorFlow's meaning: ``x[...]`` against numpy's basic
indexing (hypothesis over shapes and index expressions), ``/`` on integers in floating
point, ``//`` and ``%`` floored, the comparisons, and ``&``/``|``/``^``/``~`` on bools."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.errors import KernloomError


def _run(build: Any, feeds: dict[str, Any]) -> Any:
    """Build with placeholders for ``feeds`` (named as the keys), run, return the value."""
    g = kl.Graph()
    with g.as_default():
        placeholders = {
            name: kl.placeholder(kl.as_dtype(value.dtype), list(np.shape(value)), name=name)
            for name, value in feeds.items()
        }
        fetch = build(**placeholders)
    with kl.Session(g) as session:
        return session.run(fetch, {placeholders[k]: v for k, v in feeds.items()})


_bounds = st.one_of(st.none(), st.integers(-6, 6))
_items = st.one_of(
    st.integers(-5, 5),
    st.builds(slice, _bounds, _bounds, st.one_of(st.none(), st.sampled_from([-3, -1, 1, 2, 3]))),
    st.just(Ellipsis),
    st.none(),
)


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=4),
    index=st.lists(_items, min_size=0, max_size=5).map(tuple),
)
def test_indexing_is_numpys_basic_indexing(shape: list[int], index: tuple[Any, ...]) -> None:
    """Same values and shape as numpy's ``x[index]``; where numpy refuses the index (an
    integer out of range, too many indices, two ellipses) kernloom refuses it too."""
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    try:
        want = x[index]
    except IndexError:
        with pytest.raises((KernloomError, IndexError, ValueError)):
            _run(lambda x: x[index], {"x": x})
        return
    got = _run(lambda x: x[index], {"x": x})
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)


def test_a_single_index_and_scalar_tensors_index_as_in_tensorflow() -> None:
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    i, j = np.int32(1), np.int64(-1)
    got = _run(lambda x, i, j: [x[i], x[:, i:], x[j, i, ::2], x[1, j]], {"x": x, "i": i, "j": j})
    for value, want in zip(got, [x[1], x[:, 1:], x[-1, 1, ::2], x[1, -1]], strict=True):
        np.testing.assert_array_equal(value, want)


def test_bad_indices_say_what_is_allowed() -> None:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [3], name="x")
        f = kl.placeholder(kl.float32, [], name="f")
        for bad, shown in ((1.5, "1.5"), ([0, 1], r"\[0, 1\]"), (True, "True"), (f, "'f:0'")):
            with pytest.raises(TypeError, match=f"indexing tensor 'x:0'.*{shown}.*valid indices"):
                x[bad]
        with pytest.raises(IndexError, match=r"only have one '\.\.\.'"):
            x[..., ...]
        with pytest.raises(KernloomError, match=r"'strided_slice'.*index 3 of dimension 0 out"):
            x[3]  # the shape is known: refused as the node is built
        unknown = kl.placeholder(kl.float32, [None], name="unknown")
        out_of_range = unknown[3]
    with kl.Session(g) as session, pytest.raises(KernloomError, match="index 3 of dimension 0"):
        session.run(out_of_range, {unknown: np.zeros(3, np.float32)})


@pytest.mark.parametrize(
    ("dtype", "result"),
    [
        (np.int8, np.float32),
        (np.uint8, np.float32),
        (np.int16, np.float32),
        (np.int32, np.float64),
        (np.int64, np.float64),
        (np.float32, np.float32),
        (np.float64, np.float64),
    ],
)
def test_true_division_of_integers_is_in_floating_point(dtype: Any, result: Any) -> None:
    """TensorFlow's ``/``: integers cast to float32 (8 and 16 bits) or float64 first."""
    a = np.array([-7, 1, 5, 0] if np.dtype(dtype).kind != "u" else [7, 1, 5, 0], dtype)
    b = np.array([2, 3, -2, 4] if np.dtype(dtype).kind != "u" else [2, 3, 9, 4], dtype)
    quotient, left, right = _run(lambda a, b: [a / b, a / 2, 7 / b], {"a": a, "b": b})
    for value, want in ((quotient, a / b), (left, a / 2), (right, 7 / b)):
        assert value.dtype == result
        np.testing.assert_allclose(value, want.astype(result), rtol=1e-7)


def test_true_division_needs_one_integer_type() -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.int32, [2], name="a")
        b = kl.placeholder(kl.int64, [2], name="b")
        with pytest.raises(TypeError, match=r"same dtype, got int32 \(a:0\) and int64 \(b:0\)"):
            a / b


def test_floor_division_modulo_and_comparisons() -> None:
    a = np.array([-7, 7, -7, 7, 0], np.int32)
    b = np.array([2, -2, -2, 2, 3], np.int32)
    got = _run(
        lambda a, b: [a // b, a % b, -7 // b, 7 % b, a <= b, a >= b, abs(a)], {"a": a, "b": b}
    )
    wants = [a // b, a % b, -7 // b, 7 % b, a <= b, a >= b, np.abs(a)]
    for value, want in zip(got, wants, strict=True):
        assert value.dtype == want.dtype
        np.testing.assert_array_equal(value, want)


def test_logical_operators_on_bools() -> None:
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    got = _run(
        lambda p, q: [p & q, p | q, p ^ q, ~p, True & q, False | q, True ^ q], {"p": p, "q": q}
    )
    wants = [p & q, p | q, p ^ q, ~p, True & q, False | q, True ^ q]
    for value, want in zip(got, wants, strict=True):
        np.testing.assert_array_equal(value, want)


def test_logical_operators_refuse_numbers() -> None:
    g = kl.Graph()
    with g.as_default():
        a = kl.placeholder(kl.int32, [2], name="a")
        with pytest.raises(TypeError, match=r"'&' on tensor 'a:0' of dtype int32.*bool"):
            a & a
        with pytest.raises(TypeError, match=r"'~' on tensor 'a:0'"):
            _ = ~a
