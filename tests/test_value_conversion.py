"""One conversion rule for feeds and constants (``kernloom.convert``): a value converts only
when every element is representable in the dtype; anything else is an error naming the
feed (or op input), the dtype and the offending value."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runtime_helpers import make_registry

import kernloom as kl
import kernloom.plugin as klp
from kernloom.convert import convert_to_dtype, infer_array


@pytest.fixture(scope="module")
def registry() -> klp.Registry:
    return make_registry()


@pytest.fixture(scope="module")
def session(registry: klp.Registry) -> object:
    g = kl.Graph(registry)
    with g.as_default():
        kl.placeholder(kl.int32, [None], name="i")
        kl.placeholder(kl.float32, [None], name="f")
        kl.placeholder(kl.uint8, [None], name="u")
        kl.placeholder(kl.bool_, [None], name="b")
    with kl.Session(g) as s:
        yield s


BAD_FEEDS = [
    ("i", np.array([2**40]), r"value 1099511627776 is out of range for int32"),
    ("i", [2**40], r"value 1099511627776 is out of range for int32"),
    ("i", [2**70], r"value 1180591620717411303424 is out of range"),
    ("i", [1.5], r"value 1.5 is not a whole number.*int32"),
    ("i", np.array([np.nan]), r"value nan is not a whole number"),
    ("i", np.array([3e9]), r"value 3000000000.0 is out of range for int32"),
    ("u", [-1], r"value -1 is out of range for uint8 \(0..255\)"),
    ("f", [None], r"value None cannot be converted to float32"),
    ("f", None, r"value None cannot be converted to float32"),
    ("f", [True, False], r"value True is a bool.*float32"),
    ("f", ["a"], r"value 'a' \(str\) cannot be converted to float32"),
    ("f", "hello", r"value 'hello' \(str\) cannot be converted to float32"),
    ("f", [1e300], r"value 1e\+300 overflows float32"),
    ("f", np.array([1.0, -1e39]), r"value -1e\+39 overflows float32"),
    ("f", [1 + 2j], r"value \(1\+2j\) is complex128.*float32"),
    ("f", [[1.0], [1.0, 2.0]], r"cannot make an array"),
    ("b", [1, 0], r"value 1 is a number \(int64\).*bool"),
]


@pytest.mark.parametrize(("name", "value", "match"), BAD_FEEDS)
def test_a_feed_that_does_not_fit_its_dtype_is_an_error_naming_it(
    session: kl.Session, name: str, value: object, match: str
) -> None:
    tensor = session.graph.tensor(name)
    with pytest.raises(kl.InvalidArgumentError, match=rf"feed for '{name}:0' .*: {match}"):
        session.run(tensor, {tensor: value})
    run = session.make_callable(tensor, [tensor])  # the same check on every call
    with pytest.raises(kl.InvalidArgumentError, match=match):
        run(value)


GOOD_FEEDS = [
    ("i", [2.0, -3.0], np.array([2, -3], np.int32)),  # whole floats are representable
    ("i", np.array([2**31 - 1, -(2**31)], np.int64), np.array([2**31 - 1, -(2**31)], np.int32)),
    ("f", np.array([0.1], np.float64), np.array([0.1], np.float32)),  # rounding is fine
    ("f", [np.inf, -np.inf], np.array([np.inf, -np.inf], np.float32)),
    ("f", [1, 2**40], np.array([1, 2**40], np.float32)),
    ("u", [0, 255], np.array([0, 255], np.uint8)),
    ("b", [True, False], np.array([True, False])),
]


@pytest.mark.parametrize(("name", "value", "expected"), GOOD_FEEDS)
def test_a_representable_feed_converts(
    session: kl.Session, name: str, value: object, expected: np.ndarray
) -> None:
    tensor = session.graph.tensor(name)
    out = session.run(tensor, {tensor: value})
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(2**64), max_value=2**64), min_size=1, max_size=5))
def test_integers_convert_exactly_when_int32_holds_them(values: list[int]) -> None:
    fits = all(-(2**31) <= v < 2**31 for v in values)
    if fits:
        out = convert_to_dtype(values, kl.int32, what="feed")
        assert out.tolist() == values  # exact: compared as Python ints
    else:
        with pytest.raises(kl.InvalidArgumentError, match="out of range"):
            convert_to_dtype(values, kl.int32, what="feed")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5))
def test_floats_convert_to_int64_only_when_whole_and_in_range(values: list[float]) -> None:
    import math

    ok = all(math.isfinite(v) and v == int(v) and -(2**63) <= int(v) < 2**63 for v in values)
    if ok:
        assert convert_to_dtype(values, kl.int64, what="feed").tolist() == [int(v) for v in values]
    else:
        with pytest.raises(kl.InvalidArgumentError, match=r"not a whole number|out of range"):
            convert_to_dtype(values, kl.int64, what="feed")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5))
def test_floats_round_into_float16_unless_a_finite_one_overflows(values: list[float]) -> None:
    import math

    largest = 65504.0  # float16's largest finite value; ties at the edge round to inf
    overflows = any(math.isfinite(v) and abs(v) >= 65520.0 for v in values)
    if overflows:
        with pytest.raises(kl.InvalidArgumentError, match="overflows float16"):
            convert_to_dtype(values, kl.float16, what="feed")
    else:
        out = convert_to_dtype(values, kl.float16, what="feed")
        for got, v in zip(out.tolist(), values, strict=True):
            if math.isnan(v):
                assert math.isnan(got)
            elif math.isinf(v) or abs(v) <= largest:
                assert got == float(np.float16(v))


def test_an_array_of_the_dtype_is_taken_as_it_is() -> None:
    a = np.ones(3, np.float32)
    assert convert_to_dtype(a, kl.float32, what="feed") is a


def test_constants_that_overflow_their_dtype_fail_at_graph_building_time(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        x = kl.placeholder(kl.int32, [None], name="x")
        f = kl.placeholder(kl.float32, [None], name="f")
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"constant \(int32\): value 1099511627776 is out of range for int32",
        ):
            kl.constant(2**40, kl.int32)
        with pytest.raises(
            kl.InvalidArgumentError,
            match=r"op Mul input 'y': .*1099511627776 is out of range for int32",
        ):
            x * 2**40
        with pytest.raises(
            kl.InvalidArgumentError, match=r"op Add input 'y': .*not a whole number"
        ):
            x + 1.5
        with pytest.raises(kl.InvalidArgumentError, match=r"op Mul input 'y': .*overflows float32"):
            f * 1e300
        with pytest.raises(kl.InvalidArgumentError, match=r"constant: value None"):
            kl.constant(None)
        with pytest.raises(kl.InvalidArgumentError, match=r"out of range for uint8"):
            kl.Variable([256], kl.uint8, name="v")
        n = len(g)
        with pytest.raises(kl.InvalidArgumentError):
            kl.constant([1, 2**31], kl.int32)
        assert len(g) == n  # nothing was added
        # What TensorFlow infers without a dtype: int32 when it fits, else int64.
        assert kl.constant(2**31 - 1).dtype is kl.int32
        assert kl.constant(2**40).dtype is kl.int64
        assert kl.constant(1.0).dtype is kl.float32
        assert (x * 2).dtype is kl.int32


def test_infer_array_keeps_numpy_dtypes() -> None:
    assert infer_array(np.arange(3, dtype=np.int64), what="c").dtype == np.int64
    assert infer_array(np.float64(1.5), what="c").dtype == np.float64
    assert infer_array([True, False], what="c").dtype == np.bool_


# Where a Python int rounds to infinity: float16 at 65520; float32 and float64 half an ulp
# above their largest finite value (2**128 - 2**104, 2**1024 - 2**971) rounds to the even
# neighbour, which is infinity. numpy takes an int into float32 through a float64, so the
# float32 edge is tested on float(v), the float64 rounding of v.
_FLOAT_EDGES = {"float16": 65520.0, "float32": 2.0**128 - 2.0**103}


def _int_overflows(v: int, dtype: str) -> bool:
    try:
        as_double = float(v)
    except OverflowError:  # Python rounds beyond float64's range: 2**1024 - 2**970 up
        return True
    return dtype != "float64" and abs(as_double) >= _FLOAT_EDGES[dtype]


@pytest.mark.parametrize(
    ("value", "dtype", "shown"),
    [
        (2**64, kl.float16, "18446744073709551616"),
        (-(2**64), kl.float16, "-18446744073709551616"),
        (2**128, kl.float32, "340282366920938463463374607431768211456"),
        (-(2**200), kl.float32, str(-(2**200))),
        ([[1, 2], [3, 2**130]], kl.float32, str(2**130)),
        ([1.5, -(2**1030)], kl.float64, str(-(2**1030))[:77] + "..."),
        (2**1024, kl.float64, str(2**1024)[:77] + "..."),
        (2**200, kl.complex64, str(2**200)),
    ],
    ids=[
        "2**64-f16",
        "-2**64-f16",
        "2**128-f32",
        "-2**200-f32",
        "nested-f32",
        "mixed-f64",
        "2**1024-f64",
        "2**200-c64",
    ],
)
def test_a_python_int_beyond_a_float_dtype_is_an_overflow_error(
    value: object, dtype: kl.DType, shown: str
) -> None:
    import re

    match = rf"constant \({dtype.name}\): value {re.escape(shown)} overflows {dtype.name}"
    with kl.Graph().as_default(), pytest.raises(kl.InvalidArgumentError, match=match):
        kl.constant(value, dtype)


def test_a_feed_of_a_python_int_beyond_float16_is_an_overflow_error(
    registry: klp.Registry,
) -> None:
    g = kl.Graph(registry)
    with g.as_default():
        h = kl.placeholder(kl.float16, [None], name="h")
    with (
        kl.Session(g) as sess,
        pytest.raises(
            kl.InvalidArgumentError,
            match=r"feed for 'h:0' .*: value 18446744073709551616 overflows float16 "
            r"\(largest finite value 65504\)",
        ),
    ):
        sess.run(h, {h: [1, 2**64]})


def test_large_python_ints_that_fit_a_float_dtype_convert() -> None:
    # 2**64 and 2**127 are powers of two: exact in float32 (largest finite 3.4e38).
    out = convert_to_dtype([2**64, -(2**127), 3], kl.float32, what="feed")
    assert out.dtype == np.float32
    assert out.tolist() == [18446744073709551616.0, -170141183460469231731687303715884105728.0, 3.0]
    assert convert_to_dtype([[2**1000]], kl.float64, what="feed").tolist() == [[2.0**1000]]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(-(2**1100), 2**1100),
            st.integers(2**63, 2**66),
            st.integers(2**128 - 2**105, 2**128 + 2**105),
            st.integers(2**1024 - 2**972, 2**1024 + 2**972),
        ).flatmap(lambda v: st.sampled_from([v, -v])),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["float16", "float32", "float64"]),
)
def test_python_ints_convert_to_a_float_dtype_unless_one_overflows(
    values: list[int], dtype: str
) -> None:
    target = kl.as_dtype(dtype)
    if any(_int_overflows(v, dtype) for v in values):
        with pytest.raises(kl.InvalidArgumentError, match=f"overflows {dtype}"):
            convert_to_dtype(values, target, what="feed")
    else:
        out = convert_to_dtype(values, target, what="feed")
        assert out.dtype == np.dtype(dtype)
        assert out.tolist() == [float(np.dtype(dtype).type(float(v))) for v in values]
