"""The array, shape and indexing ops' edge cases against TensorFlow 2.21's CPU kernels.

``fixtures/tf_array_edge/cases.npz`` holds TensorFlow's inputs and answers (written by
``fixtures/tf_array_edge/make_fixtures.py``, one TF1 graph per case, grappler off):
StridedSlice (masks, negative strides, out-of-range bounds, rank 0) and the Python
operator ``x[...]``, Slice, GatherV2, GatherNd, ScatterNd, Pad/PadV2/MirrorPad, Tile,
ConcatV2, Split/SplitV, Reshape, Transpose, ExpandDims/Squeeze, BroadcastTo, Fill, Range,
OneHot, TopKV2, Where, Unique, ReverseV2, Rank/Size/Shape, Select/SelectV2,
ZerosLike/OnesLike, Cast to and from bool, Identity/IdentityN, Pack/Unpack, BatchMatMulV2,
Einsum and ArgMax. Each case runs

- in two modes: ``static`` (the first input fed with its shape known, the others
  constants, so the shape functions see their values and the optimizer may fold them) and
  ``dynamic`` (every input fed through a placeholder whose dimensions are all unknown);
- on the numpy CPU kernels, on the CPU with the torch plugin (its kernels labelled
  ``torch`` where it has them, and its CPU defaults), and on the torch plugin's GPU kernels
  bound to torch's CPU (``torchgpu``; ops without a torch GPU kernel stay on the CPU);
- with the graph optimizer on and off.

Where TensorFlow raises, kernloom must raise ``InvalidArgumentError`` (when the graph is
built or when it runs), not crash and not return a value.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tf_edge_harness as harness

import kernloom as kl
from kernloom.graph.builder import apply_op

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tf_array_edge" / "cases.npz"
ARRAYS = np.load(FIXTURE)
META: list[dict[str, Any]] = json.loads(str(ARRAYS["__meta__"]))
BY_NAME = {m["name"]: m for m in META}

GPU_OUT_OF_RANGE = {
    "gather_neg_index",
    "gather_oob_index",
    "gather_empty_params_oob",
    "gather_empty_params_dim",
    "gathernd_oob",
    "gathernd_neg",
    "scatter_oob",
    "scatter_neg",
}
"""Out-of-range indices: TensorFlow's CPU kernels raise, its GPU kernels (and kernloom's,
documented in the ops' doc strings) give zeros or skip them. Not run on ``torchgpu``."""

GPU_KEEPS = {"range_int8", "range_int16"}
"""Range of int8 and int16: TensorFlow's CPU has no kernel (see ``RANGE_NO_CPU_KERNEL``); the
torch GPU keeps its own, as the GPU plugins keep float16 ``Where``
(docs/tensorflow_fidelity.md). Not run on ``torchgpu``."""

TOPK_UNSORTED = (
    "TopKV2 with sorted=false: TensorFlow returns its heap's order, kernloom the sorted one "
    "(documented: kernloom ops TopKV2)"
)
RANGE_NO_CPU_KERNEL = (
    "documented deviation (docs/tensorflow_fidelity.md): Range of int8, int16, uint16, "
    "uint32 -- the op allows them, TensorFlow's CPU has no kernel (the node is refused when "
    "it runs); kernloom computes the values"
)
DEVIATIONS: dict[str, str] = {
    **dict.fromkeys(
        ("range_int8", "range_int16", "range_uint16", "range_uint32"), RANGE_NO_CPU_KERNEL
    ),
    "topk_unsorted": TOPK_UNSORTED,
}
"""Cases kernloom does not follow on purpose or cannot follow in the files this suite may
change (strict xfails, so that a change of either side is seen); keys: a case's name, or
``name-mode-backend``."""


MIRROR_PAD_SCALAR = (
    "MirrorPad of a rank-0 input (paddings of shape [0, 2]): the numpy kernel crashed in "
    "np.pad (TypeError) instead of returning the scalar"
)
SCATTER_DEPTH_0 = (
    "ScatterNd with indices.shape[-1] == 0: TensorFlow's kernel refuses it, kernloom's "
    "CPU and torch kernels wrote updates into the output"
)
FIXED: dict[str, tuple[tuple[str, ...], str]] = {
    "mirror_reflect_rank0": (("numpy",), MIRROR_PAD_SCALAR),
    "mirror_symmetric_rank0": (("numpy",), MIRROR_PAD_SCALAR),
    **dict.fromkeys(
        ("scatter_depth0", "scatter_depth0_empty", "scatter_depth0_one"),
        (("numpy", "torchgpu"), SCATTER_DEPTH_0),
    ),
}
"""The deviations fixed with this suite: case -> (the backends where kernloom differed,
what it did). Run in both modes, with the optimizer on and off."""


@cache
def torch_labels() -> dict[str, str]:
    """Every op of the fixture with a CPU kernel labelled ``torch``, mapped to that label."""
    return harness.torch_labels({m["op"] for m in META} - {"getitem"})


@cache
def torch_cpu_ops() -> frozenset[str]:
    """The fixture's ops the torch plugin adds CPU kernels for (``harness.torch_cpu_ops``)."""
    return harness.torch_cpu_ops({m["op"] for m in META} - {"getitem"})


def _inputs(name: str) -> list[np.ndarray]:
    return harness.fixture_inputs(ARRAYS, name)


class _Key:
    def __getitem__(self, key: Any) -> Any:
        return key


def _attr(value: Any) -> Any:
    if isinstance(value, dict) and "dtype" in value:
        return kl.as_dtype(np.dtype(value["dtype"]))
    return value


def _build(meta: dict[str, Any], dynamic: bool) -> tuple[list[kl.Tensor], dict[Any, Any]]:
    """The case's node in the default graph: its first input fed (static), or all of them
    with every dimension unknown (dynamic)."""
    leaves = iter(_inputs(meta["name"]))
    feeds: dict[Any, Any] = {}

    def tensor(value: np.ndarray) -> kl.Tensor:
        if feeds and not dynamic:
            return kl.constant(value)
        shape = [None] * value.ndim if dynamic else list(value.shape)
        t = kl.placeholder(kl.as_dtype(value.dtype), shape)
        feeds[t] = value
        return t

    args: list[Any] = []
    for n in meta["arity"]:
        args.append(tensor(next(leaves)) if n is None else [tensor(next(leaves)) for _ in range(n)])
    if meta["op"] == "getitem":
        key = eval("_Key()" + meta["attrs"]["key"], {"_Key": _Key, "T": args[-1]})
        out: Any = args[0][key]  # the key's T: the second input, a scalar tensor
    else:
        attrs = {k: _attr(v) for k, v in meta["attrs"].items()}
        out = apply_op(meta["op"], args, attrs, name="op")
    if isinstance(out, kl.Node):  # no outputs (Unpack of num 0)
        return [], feeds
    return (list(out) if isinstance(out, tuple) else [out]), feeds


def run_kernloom(name: str, mode: str, backend: str, optimize: bool) -> list[np.ndarray]:
    meta = BY_NAME[name]
    graph = kl.Graph(harness.registry(backend))
    with graph.as_default():
        fetches, feeds = _build(meta, mode == "dynamic")
    labels = torch_labels() if backend == "torch" else {}
    try:
        return _run(graph, fetches, feeds, optimize, labels)
    except kl.InvalidArgumentError as error:  # no torch kernel for this dtype: the default
        if "asks for label 'torch'" not in str(error):
            raise
        labels = {k: v for k, v in labels.items() if k != meta["op"]}
        return _run(graph, fetches, feeds, optimize, labels)


def _run(
    graph: kl.Graph, fetches: list[kl.Tensor], feeds: Any, optimize: bool, labels: Any
) -> list[np.ndarray]:
    config = kl.SessionConfig(graph_optimizer=optimize, kernel_labels=labels)
    with kl.Session(graph, config) as session:
        if not fetches:
            session.run([], feeds, targets=[graph.node("op")])
            return []
        values = session.run(fetches, feeds)
    return [np.asarray(v) for v in values]


def expected(name: str, mode: str) -> list[np.ndarray]:
    meta = BY_NAME[name]
    dynamic = mode == "dynamic" and not meta["dynamic_same"]
    prefix = f"{name}|dynamic|out" if dynamic else f"{name}|out"
    return [ARRAYS[f"{prefix}{j}"] for j in range(meta[f"n_out_{mode}"])]


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype.itemsize > 2 else 1e-3)
        zero = want == 0
        if want.dtype.kind == "f":  # a -0.0 copied, reversed or gathered stays -0.0
            np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    else:
        np.testing.assert_array_equal(got, want)


def _params() -> list[Any]:
    """The fixed cases on the backends where they differed, and the strict xfails. The
    fixture's other cases (``make_fixtures.py``) all matched TensorFlow on every mode and
    backend when this suite was written; run them with ``KERNLOOM_TF_EDGE_ALL=1``."""
    import os

    everything = bool(os.environ.get("KERNLOOM_TF_EDGE_ALL"))
    out = []
    for meta in META:
        name = meta["name"]
        for mode in ("static", "dynamic"):
            for backend in ("numpy", "torch", "torchgpu"):
                if backend == "torchgpu" and name in GPU_OUT_OF_RANGE | GPU_KEEPS:
                    continue
                if backend == "torch" and meta["op"] not in torch_cpu_ops():
                    continue
                key = f"{name}-{mode}-{backend}"
                reason = DEVIATIONS.get(key) or DEVIATIONS.get(name)
                fixed = name in FIXED and backend in FIXED[name][0]
                if not (everything or reason or fixed):
                    continue
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                out.append(pytest.param(name, mode, backend, marks=marks, id=key))
    return out


@pytest.mark.parametrize("optimize", [True, False], ids=["opt", "noopt"])
@pytest.mark.parametrize(("name", "mode", "backend"), _params())
def test_matches_tensorflow(name: str, mode: str, backend: str, optimize: bool) -> None:
    meta = BY_NAME[name]
    error = meta["errors"][mode]
    if error:
        # An error that explains, not a crash; x[...] refuses a bad subscript in Python, as
        # numpy does (IndexError; TensorFlow's shape function: ValueError).
        expected_errors = (kl.InvalidArgumentError, IndexError)
        with pytest.raises(expected_errors if meta["op"] == "getitem" else kl.InvalidArgumentError):
            run_kernloom(name, mode, backend, optimize)
        return
    got = run_kernloom(name, mode, backend, optimize)
    want = expected(name, mode)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
