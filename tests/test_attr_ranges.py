"""Attr values are checked against the range their type holds, at graph-building time.

TensorFlow's ``AttrValue`` stores an int as int64, so an int attr (or an entry of a
list(int)) beyond int64 is an error naming the node, op, attr, value and range, through
the Python API and the graph-file loader alike; a float where an int is declared, a bool
where a number is, an integer no float holds, a shape dimension (or element count)
beyond int64 and a type outside the declared list are errors too. The references below
are written from those ranges directly, not from the checking code.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT64_OVERFLOW = 2**1024 - 2**970
"""The smallest integer magnitude that rounds to infinity as a float64 (half-way between
the largest finite double, 2**1024 - 2**971, and 2**1024)."""


def _int_ok(value: object) -> bool:
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def _float_ok(value: object) -> bool:
    if type(value) is float:
        return True  # inf and nan included, as in TensorFlow
    return type(value) is int and abs(value) < FLOAT64_OVERFLOW


int_values = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([INT64_MIN, INT64_MAX, INT64_MIN - 1, INT64_MAX + 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)


def _conv_attrs(strides: list[object]) -> dict[str, Any]:
    return {
        "T": kl.float32,
        "strides": strides,
        "padding": "VALID",
    }


@settings(max_examples=150, deadline=None)
@given(st.lists(int_values, min_size=1, max_size=5))
def test_list_int_entries_are_int64(strides: list[object]) -> None:
    op_def = kl.Graph().op_def("Conv2D")
    expected = all(_int_ok(v) for v in strides)
    if expected:
        checked = op_def.check_attrs(_conv_attrs(strides), "c")
        assert checked["strides"] == strides
        return
    with pytest.raises(kl.InvalidArgumentError) as info:
        op_def.check_attrs(_conv_attrs(strides), "c")
    message = str(info.value)
    assert message.startswith("node 'c' (op Conv2D): attr 'strides: list(int)'")
    bad = next(i for i, v in enumerate(strides) if not _int_ok(v))
    assert f"entry {bad}" in message and repr(strides[bad]) in message
    if type(strides[bad]) is int:
        assert f"int64: {INT64_MIN}..{INT64_MAX}" in message


@settings(max_examples=150, deadline=None)
@given(int_values)
def test_int_attr_is_int64(axis: object) -> None:
    op_def = kl.Graph().op_def("Pack")
    attrs = {"N": 2, "T": kl.float32, "axis": axis}
    if _int_ok(axis):
        assert op_def.check_attrs(attrs, "p")["axis"] == axis
        return
    with pytest.raises(kl.InvalidArgumentError) as info:
        op_def.check_attrs(attrs, "p")
    message = str(info.value)
    assert message.startswith("node 'p' (op Pack): attr 'axis: int = 0'")
    assert repr(axis) in message
    if type(axis) is int:
        assert f"out of range for an int attr (int64: {INT64_MIN}..{INT64_MAX})" in message


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(2**1100), 2**1100),
        st.sampled_from([FLOAT64_OVERFLOW, FLOAT64_OVERFLOW - 1, -FLOAT64_OVERFLOW]),
        st.booleans(),
    )
)
def test_float_attr_holds_what_a_float64_holds(alpha: object) -> None:
    op_def = kl.Graph().op_def("LeakyRelu")
    attrs = {"T": kl.float32, "alpha": alpha}
    if _float_ok(alpha):
        value = op_def.check_attrs(attrs, "r")["alpha"]
        assert type(value) is float
        if type(alpha) is int:  # rounded to the nearest double: within half an ulp
            assert abs(int(value) - alpha) <= abs(alpha) >> 52
        else:
            assert value == alpha or (np.isnan(value) and np.isnan(alpha))  # type: ignore[arg-type]
        return
    with pytest.raises(kl.InvalidArgumentError, match=r"^node 'r' \(op LeakyRelu\): attr 'alpha"):
        op_def.check_attrs(attrs, "r")


dims = st.one_of(st.none(), st.integers(-3, 2**70), st.sampled_from([INT64_MAX, INT64_MAX + 1]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(dims, max_size=4))
def test_shape_attr_dims_and_size_fit_int64(shape: list[int | None]) -> None:
    known = [d for d in shape if d is not None and d != -1]
    count = 1
    for d in known:
        count *= d
    expected = all(0 <= d <= INT64_MAX for d in known) and count <= INT64_MAX
    g = kl.Graph()
    if expected:
        with g.as_default():
            p = kl.placeholder(kl.float32, shape, name="p")
        assert p.shape.dims == tuple(None if d in (None, -1) else d for d in shape)
        return
    with g.as_default(), pytest.raises(kl.InvalidArgumentError) as info:
        kl.placeholder(kl.float32, shape, name="p")
    assert str(info.value).startswith("node 'p' (op Placeholder): attr 'shape")


@pytest.mark.parametrize("dtype", [kl.float32, kl.int8, kl.uint16, kl.bool_, kl.complex64])
def test_type_attr_outside_the_declared_list(dtype: kl.DType) -> None:
    op_def = kl.Graph().op_def("Conv2D")
    allowed = op_def.attr("T").allowed_values
    assert allowed is not None
    attrs = {**_conv_attrs([1, 1, 1, 1]), "T": dtype}
    if dtype in allowed:
        assert op_def.check_attrs(attrs, "c")["T"] == dtype
        return
    with pytest.raises(kl.InvalidArgumentError) as info:
        op_def.check_attrs(attrs, "c")
    assert str(info.value).startswith("node 'c' (op Conv2D): attr 'T: {")
    assert f"value {dtype.name} is not allowed" in str(info.value)


# -- the graph-file loader and the op wrappers check the same -----------------------------------


def _conv_graph_file(tmp_path: Path) -> dict[str, Any]:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 4, 4, 1], name="x")
        w = kl.constant(np.ones((1, 1, 1, 1), np.float32))
        kl.ops.conv2d(x, w, strides=[1, 1, 1, 1], padding="VALID", name="c")
    path = tmp_path / "conv.json"
    g.save(path)
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


@pytest.mark.parametrize("stride", [2**63, 2**70, -(2**63) - 1])
def test_out_of_range_ints_through_the_loader_and_the_wrapper(tmp_path: Path, stride: int) -> None:
    document = copy.deepcopy(_conv_graph_file(tmp_path))
    conv = next(n for n in document["nodes"] if n["name"] == "c")
    conv["attrs"]["strides"] = {"list": {"i": [1, stride, 1, 1]}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(kl.InvalidArgumentError) as info:
        kl.Graph.load(path)
    message = str(info.value)
    assert str(path) in message and "node 'c' (op Conv2D)" in message
    assert "attr 'strides" in message and str(stride) in message
    assert f"int64: {INT64_MIN}..{INT64_MAX}" in message

    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 4, 4, 1], name="x")
        w = kl.constant(np.ones((1, 1, 1, 1), np.float32))
        with pytest.raises(kl.InvalidArgumentError) as built:
            kl.ops.conv2d(x, w, strides=[1, stride, 1, 1], padding="VALID", name="c")
    assert "node 'c' (op Conv2D): attr 'strides: list(int)'" in str(built.value)
    assert f"entry 1: {stride} is out of range" in str(built.value)
