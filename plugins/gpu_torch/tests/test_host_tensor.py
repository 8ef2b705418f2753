"""``host_tensor``: torch sees the CPU device's arrays without copying them, read-only
constants included (a copy of each weight on every run cost the MLP 10 %)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import kernloom as kl
from kernloom.graph.graph import constant_value
from kernloom_gpu_torch.device import host_tensor


def frozen(array: np.ndarray) -> np.ndarray:
    """A read-only array whose memory cannot be made writeable through a view (how the
    graph owns a constant)."""
    array = np.array(array, copy=True)
    array.flags.writeable = False
    return array


def test_a_constant_read_only_at_its_source_is_viewed_not_copied_and_not_warned() -> None:
    weight = frozen(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ValueError, match="WRITEABLE"):
        weight.view().flags.writeable = True  # no writeable view exists
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        viewed = host_tensor(weight)
        torch.from_numpy(frozen(np.ones(2, np.float32)))  # a user's own call: not warned
    assert caught == []
    assert viewed.data_ptr() == weight.ctypes.data
    np.testing.assert_array_equal(viewed.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))


def test_a_graph_constant_reaches_torch_as_the_graphs_own_memory() -> None:
    g = kl.Graph()
    with g.as_default():
        c = kl.constant(np.ones((4, 4), np.float32))
    owned = constant_value(c)
    assert owned is not None and not owned.flags.writeable
    assert host_tensor(owned).data_ptr() == owned.ctypes.data


@given(
    st.sampled_from([(5,), (3, 4), (2, 3, 4)]),
    st.sampled_from(["c", "transpose", "reverse", "step", "scalar"]),
    st.booleans(),
)
def test_values_and_layout_survive_any_view(shape: tuple[int, ...], form: str, ro: bool) -> None:
    base = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    array = {
        "c": base,
        "transpose": base.T,
        "reverse": base[::-1],
        "step": base[..., ::2],
        "scalar": base.reshape(-1)[3],
    }[form]
    array = np.asarray(array)
    if ro:
        array = frozen(array) if form == "scalar" else array.view()
        array.flags.writeable = False
    viewed = host_tensor(array)
    np.testing.assert_array_equal(viewed.numpy(), array)
    if form != "reverse":  # torch has no negative strides: that one is copied
        assert viewed.data_ptr() == array.ctypes.data
        assert tuple(s * array.itemsize for s in viewed.stride()) == array.strides
