"""GraphDef JSON: a round trip with every standard op, and a corpus of broken files."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest

import kernloom as kl
from kernloom.op_library import standard_ops

assert_op = kl.ops.assert_  # TensorFlow's Assert (`assert` is a keyword)

BROKEN = Path(__file__).parent / "fixtures" / "broken_graphs"
EXPECTED: dict[str, str] = json.loads((BROKEN / "expected_errors.json").read_text())


def every_op_graph() -> kl.Graph:
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [None, 3], name="x")
        m = kl.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="m")
        i = kl.constant(np.array([[1, -2, 3]], np.int32))
        with kl.device("CPU:0"), kl.kernel_label({"MatMul": "einsum"}):
            y = kl.ops.mat_mul(x, m, transpose_a=False)
        a = kl.ops.add_n([y, y, y])
        b = kl.ops.bias_add(a, kl.constant(np.ones(2, np.float32)), data_format="NHWC")
        unary = [
            f(b)
            for f in (
                kl.ops.neg,
                kl.ops.exp,
                kl.ops.log,
                kl.ops.sqrt,
                kl.ops.square,
                kl.ops.tanh,
                kl.ops.sigmoid,
                kl.ops.relu,
                kl.ops.softmax,
                kl.ops.log_softmax,
                kl.ops.identity,
                kl.ops.zeros_like,
                kl.ops.ones_like,
            )
        ]
        binary = [
            b + 1.0,
            b - 1.0,
            b * 2.0,
            b / 2.0,
            kl.ops.maximum(b, 0.0),
            kl.ops.minimum(b, 0.0),
            b**2.0,
            b < 0.0,
            b > 0.0,
            kl.ops.equal(b, b),
        ]
        s = kl.ops.select(binary[7], b, unary[0])
        reduced = [
            f(b, [1], keep_dims=k)
            for f, k in (
                (kl.ops.sum, True),
                (kl.ops.mean, False),
                (kl.ops.max, True),
                (kl.ops.min, False),
            )
        ]
        r = kl.ops.reshape(s, [-1])
        t = kl.ops.transpose(s, [1, 0])
        c = kl.ops.concat_v2([s, s], 0)
        f = kl.ops.fill([2, 2], 1.5)
        cast = kl.ops.cast(i, DstT=kl.float64)
        [  # (nodes of the graph; nothing reads them)
            kl.ops.bitwise_and(i, i),
            kl.ops.bitwise_or(i, i),
            kl.ops.bitwise_xor(i, i),
            kl.ops.left_shift(i, i),
            kl.ops.right_shift(i, i),
            kl.ops.invert(i),
            kl.ops.bitcast(i, type=kl.uint8),
            kl.ops.cumprod(b, kl.constant(np.int32(0)), exclusive=True),
            kl.ops.truncate_div(i, i),
            kl.ops.truncate_mod(i, i),
            kl.ops.mod(b, b),
            kl.ops.xdivy(b, b),
            kl.ops.xlogy(b, b),
            kl.ops.xlog1py(b, b),
            kl.ops.rint(b),
            kl.ops.euclidean_norm(b, kl.constant(np.int32([1])), keep_dims=True),
        ]
        shape = kl.ops.shape(x, out_type=kl.int64)
        arg = kl.ops.arg_max(i, 1, output_type=kl.int32)
        images = kl.placeholder(kl.float32, [1, 4, 4, 2], name="images")
        image_linalg = [
            kl.ops.resize_bilinear(images, [8, 8], half_pixel_centers=True),
            kl.ops.resize_bicubic(images, [3, 5], align_corners=True),
            kl.ops.crop_and_resize(images, [[0.0, 0.0, 1.0, 1.0]], [0], [2, 3], method="nearest"),
            kl.ops.non_max_suppression([[0.0, 0.0, 1.0, 1.0], [0.0, 0.5, 1.0, 1.5]], [0.9, 0.8], 2),
            kl.ops.resize_nearest_neighbor(images, [2, 2], align_corners=True),
            kl.ops.depth_to_space(kl.ops.space_to_depth(images, block_size=2), block_size=2),
            kl.ops.batch_mat_mul_v2(images, images, adj_y=True),
            kl.ops.einsum([images, images], equation="...ij,...kj->...ik"),
        ]
        sq = kl.placeholder(kl.float32, [2, 3, 3], name="sq")
        k_range = kl.constant(np.array([-1, 1], np.int32))
        image_linalg += [
            kl.ops.matrix_band_part(sq, np.int64(1), np.int64(-1)),
            kl.ops.matrix_diag_v3(
                kl.ops.matrix_diag_part_v3(sq, k_range, np.float32(0), align="LEFT_RIGHT"),
                k_range,
                np.int32(-1),
                np.int32(-1),
                np.float32(0),
            ),
            kl.ops.matrix_set_diag_v3(sq, kl.ops.matrix_diag_part_v3(sq, 0, np.float32(0)), 0),
            kl.ops.matrix_determinant(sq),
            *kl.ops.log_matrix_determinant(sq),
            kl.ops.matrix_inverse(sq, adjoint=True),
            kl.ops.cholesky(sq),
            kl.ops.matrix_solve(sq, sq, adjoint=True),
            kl.ops.matrix_triangular_solve(sq, sq, lower=False, adjoint=True),
        ]
        v = kl.Variable(np.zeros(2, np.float32), name="v")
        state = [v.assign_add([1.0, 2.0]), v.assign_sub([0.5, 0.5]), v.is_initialized()]
        (loop,) = kl.while_loop(lambda k: k < 3, lambda k: k + 1, [0])
        math_family = _math_family_nodes(b)
        indexing = _shape_and_indexing_ops(s)
        img = kl.placeholder(kl.float32, [1, 4, 4, 2], name="img")
        k = kl.constant(np.ones((2, 2, 2, 2), np.float32))
        window = {"strides": [1, 1, 1, 1], "padding": "SAME"}
        pooling = {"ksize": [1, 2, 2, 1], **window}
        stats = [kl.constant(np.ones(2, np.float32)) for _ in range(4)]
        conv = [
            kl.ops.conv2d(img, k, **window),
            kl.ops.depthwise_conv2d_native(img, k, **window),
            kl.ops.conv2d_backprop_input([1, 4, 4, 2], k, img, **window),
            kl.ops.max_pool(img, **pooling),
            kl.ops.avg_pool(img, **pooling),
            *kl.ops.max_pool_with_argmax(img, **pooling),
            *kl.ops.fused_batch_norm_v3(img, *stats),
            kl.ops.lrn(img),
        ]
        volume = kl.placeholder(kl.float32, [1, 3, 4, 4, 2], name="volume")
        window3d = {"strides": [1, 1, 2, 1, 1], "padding": "SAME"}
        conv += [
            kl.ops.conv3d(volume, kl.constant(np.ones((2, 2, 2, 2, 3), np.float32)), **window3d),
            kl.ops.max_pool3d(volume, ksize=[1, 2, 2, 2, 1], **window3d),
            kl.ops.avg_pool3d(volume, ksize=[1, 1, 2, 2, 1], **window3d),
            kl.ops.conv3d_backprop_input_v2(
                kl.constant(np.array([1, 3, 4, 4, 2], np.int32)),
                kl.constant(np.ones((2, 2, 2, 2, 3), np.float32)),
                kl.placeholder(kl.float32, [1, 3, 2, 4, 3], name="volume_grad"),
                **window3d,
            ),
        ]
        with kl.control_dependencies(
            [
                r,
                t,
                c,
                f,
                cast,
                shape,
                arg,
                loop,
                *state,
                *reduced,
                *unary,
                *binary,
                *math_family,
                *conv,
                *indexing,
                *image_linalg,
            ]
        ):
            kl.ops.no_op(name="done")
    return g


def _shape_and_indexing_ops(s: kl.Tensor) -> list[kl.Tensor]:
    """One node of each shape and indexing op (issue 18), built from ``s`` of shape [?, 2]."""
    i32 = np.int32
    pads = np.array([[1, 0], [0, 1]], i32)
    split = kl.ops.split(1, s, num_split=2)
    split_v = kl.ops.split_v(s, np.array([1, -1], np.int64), 1, num_split=2)
    return [
        kl.ops.pad(s, pads),
        kl.ops.pad_v2(s, pads, np.float32(-1)),
        kl.ops.mirror_pad(s, pads, mode="SYMMETRIC"),
        kl.ops.gather_v2(s, np.array([1, 0], i32), np.int64(1), batch_dims=0),
        kl.ops.gather_nd(s, np.array([[0, 1]], np.int64)),
        kl.ops.scatter_nd(np.array([[1]], i32), np.ones((1, 2), np.float32), np.array([3, 2], i32)),
        kl.ops.slice(s, np.array([0, 1], i32), np.array([-1, 1], i32)),
        kl.ops.strided_slice(
            s,
            np.array([0, 1], i32),
            np.array([0, 0], i32),
            np.array([1, -1], i32),
            begin_mask=1,
            end_mask=3,
            shrink_axis_mask=0,
            new_axis_mask=0,
            ellipsis_mask=0,
        ),
        *split,
        *split_v,
        kl.ops.squeeze(kl.ops.expand_dims(s, np.int32(0)), squeeze_dims=[0]),
        kl.ops.pack([s, s], axis=1),
        *kl.ops.unpack(kl.ops.reshape(s, [-1, 2]), num=2, axis=1),
        kl.ops.tile(s, np.array([1, 2], i32)),
        kl.ops.broadcast_to(np.float32(1), np.array([2, 2], np.int64)),
        kl.ops.size(s, out_type=kl.int64),
        kl.ops.rank(s),
        kl.ops.range(np.float32(0), np.float32(1), np.float32(0.5)),
        kl.ops.one_hot(np.array([0, 2], np.int64), np.int32(3), np.float32(1), np.float32(0)),
        kl.ops.where(s),
        kl.ops.select_v2(s > 0.0, s, np.float32(0)),
        kl.ops.reverse_v2(s, np.array([-1], i32)),
        kl.ops.stop_gradient(s),
        kl.ops.placeholder_with_default(s, shape=[None, None]),
        *kl.ops.unique(kl.ops.reshape(s, [-1]), out_idx=kl.int64),
        *kl.ops.identity_n([s, kl.ops.rank(s)]),
        *_asserted(s),
        kl.ops.space_to_batch_nd(s, np.array([2], i32), np.array([[0, 0]], np.int64)),
        kl.ops.batch_to_space_nd(s, np.array([1], i32), np.array([[0, 1]], i32)),
    ]


def _asserted(s: kl.Tensor) -> list[kl.Tensor]:
    """An Assert (no outputs) and an Identity that waits for it."""
    check = assert_op(kl.ops.all(s > -1.0, [0, 1]), [s, kl.ops.rank(s)], summarize=5)
    with kl.control_dependencies([check]):
        return [kl.ops.identity(s)]


def test_every_standard_op_survives_a_json_round_trip(tmp_path: Path) -> None:
    g = every_op_graph()
    public = {name for name in standard_ops().names() if not name.startswith("_")}
    assert {n.op for n in g.nodes} == public  # every op a user can build
    text = g.to_json()
    again = kl.Graph.from_json(text)
    assert again.to_json() == text
    for node in g.nodes:
        other = again.node(node.name)
        assert (other.op, other.input_names(), other.requested_device) == (
            node.op,
            node.input_names(),
            node.requested_device,
        )
        assert [t.shape for t in other.outputs] == [t.shape for t in node.outputs]
        assert [t.dtype for t in other.outputs] == [t.dtype for t in node.outputs]
        for key, value in node.attrs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(other.attrs[key], value)
                assert other.attrs[key].dtype == value.dtype
            else:
                assert other.attrs[key] == value
    path = tmp_path / "g.json"
    g.save(path)
    assert kl.Graph.load(path).to_json() == text


def test_every_dtype_survives_in_a_constant() -> None:
    g = kl.Graph()
    values = {d: (np.arange(6).reshape(2, 3) % 2).astype(d.numpy_dtype) for d in kl.all_dtypes()}
    with g.as_default():
        for dtype, value in values.items():
            kl.constant(value, name=f"c_{dtype.name}")
        kl.constant(np.float32(2.5), name="scalar")
        kl.constant(np.zeros((0, 4), np.int16), name="empty")
    again = kl.Graph.from_json(g.to_json())
    for dtype, value in values.items():
        loaded = again.node(f"c_{dtype.name}").attrs["value"]
        assert loaded.dtype == value.dtype and loaded.shape == (2, 3)
        np.testing.assert_array_equal(loaded, value)
    assert again.node("scalar").attrs["value"].shape == ()
    assert again.node("empty").outputs[0].shape == kl.TensorShape([0, 4])


def test_the_corpus_is_large_enough() -> None:
    assert len(EXPECTED) >= 15
    assert sorted(EXPECTED) == sorted(
        p.name for p in BROKEN.glob("*.json") if p.name != "expected_errors.json"
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_broken_graph_file_gives_its_message(name: str) -> None:
    path = BROKEN / name
    with pytest.raises(kl.InvalidArgumentError) as info:
        kl.Graph.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert EXPECTED[name] in message, message


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(kl.InvalidArgumentError, match="cannot read the graph file: no such file"):
        kl.Graph.load(tmp_path / "missing.json")
    with pytest.raises(OSError, match=r"missing\.json") as info:  # an OSError, as users expect
        kl.Graph.load(tmp_path / "missing.json")
    assert info.value.errno == errno.ENOENT
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(kl.InvalidArgumentError, match=r"not UTF-8 text \(byte 0 is 0xff\)"):
        kl.Graph.load(binary)


def test_an_object_without_nodes_is_not_an_empty_graph(tmp_path: Path) -> None:
    """``{}`` loaded as an empty graph (every GraphDef field has a default): refused, naming
    the file and saying what a graph file is. An empty graph as saved, or a hand-written
    ``{"nodes": []}``, is still an empty graph."""
    path = tmp_path / "empty_object.json"
    path.write_text("{}")
    with pytest.raises(kl.InvalidArgumentError) as info:
        kl.Graph.load(path)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert message.startswith(f"{path}: not a kernloom graph: ")
    assert "no 'nodes' list (no keys at all)" in message
    assert "Save the graph with Graph.save()" in message
    with pytest.raises(kl.InvalidArgumentError, match=r"^in\.json: not a kernloom graph: "):
        kl.Graph.from_json('{"version": 1}', source="in.json")
    kl.Graph().save(path)
    assert len(kl.Graph.load(path)) == 0
    assert len(kl.Graph.from_json('{"nodes": []}')) == 0


def _math_family_nodes(b: kl.Tensor) -> list[kl.Tensor]:
    """One node of each op of the math family (issue 18's activations, unary math, division,
    logic, reductions and orderings; issue 21's AddV2, Div, DivNoNan)."""
    ops = kl.ops
    unary = [
        f(b)
        for f in (
            ops.relu6,
            ops.elu,
            ops.selu,
            ops.leaky_relu,
            ops.softplus,
            ops.softsign,
            ops.erf,
            ops.rsqrt,
            ops.reciprocal,
            ops.abs,
            ops.sign,
            ops.floor,
            ops.ceil,
            ops.round,
            ops.sin,
            ops.cos,
            ops.atan,
            ops.tan,
            ops.asin,
            ops.acos,
            ops.sinh,
            ops.cosh,
            ops.asinh,
            ops.acosh,
            ops.atanh,
            ops.erfc,
            ops.expm1,
            ops.log1p,
            ops.is_inf,
            ops.is_finite,
        )
    ]
    binary = [
        f(b, b)
        for f in (
            ops.floor_div,
            ops.floor_mod,
            ops.squared_difference,
            ops.not_equal,
            ops.greater_equal,
            ops.less_equal,
            ops.add_v2,
            ops.div,
            ops.div_no_nan,
            ops.atan2,
        )
    ]
    nan = ops.is_nan(b)
    logic = [ops.logical_and(nan, nan), ops.logical_or(nan, nan), ops.logical_not(nan)]
    logic += [ops.all(nan, [1]), ops.any(nan, [1], keep_dims=True)]
    ordered = [
        ops.clip_by_value(b, 0.0, 1.0),
        ops.prod(b, [1]),
        ops.arg_min(b, 1, output_type=kl.int32),
        ops.cumsum(b, 0, exclusive=True),
        ops.top_kv2(b, 1)[1],
    ]
    return [*unary, *binary, nan, *logic, *ordered, *_segment_nodes(b), *_spectral_nodes(b)]


def _segment_nodes(b: kl.Tensor) -> list[kl.Tensor]:
    """One node of each segment reduction, over the rows of ``b`` (unknown ids for the
    sorted ones: a placeholder)."""
    ops = kl.ops
    ids = kl.placeholder(kl.int64, [None], name="segment_ids")
    unsorted = [
        f(b, ops.size(ids, out_type=kl.int32), np.int32(3))
        for f in (
            ops.unsorted_segment_sum,
            ops.unsorted_segment_max,
            ops.unsorted_segment_min,
            ops.unsorted_segment_prod,
        )
    ]
    ordered = [
        f(b, ids) for f in (ops.segment_sum, ops.segment_mean, ops.segment_max, ops.segment_min)
    ]
    return [*unsorted, *ordered, ops.segment_prod(b, np.zeros(1, np.int32))]


def _spectral_nodes(b: kl.Tensor) -> list[kl.Tensor]:
    """One node of each FFT op: RFFT of ``b`` with a known fft_length, IRFFT with one
    only known at run time (a placeholder), the complex ones on RFFT's output."""
    ops = kl.ops
    spectrum = ops.rfft(b, np.int32([2]))
    length = kl.placeholder(kl.int32, [1], name="fft_length")
    complex_ = [f(spectrum) for f in (ops.fft, ops.ifft, ops.fft2d, ops.ifft2d)]
    return [spectrum, *complex_, ops.irfft(spectrum, length)]


def _loop_graph() -> tuple[kl.Graph, str]:
    g = kl.Graph()
    with g.as_default():
        n = kl.placeholder(kl.int32, [], name="n")
        _, acc = kl.while_loop(
            lambda i, a: i < n, lambda i, a: (i + 1, a * 2.0), [0, kl.constant(1.0)]
        )
    return g, acc.name


@pytest.mark.parametrize("seed", range(8))
def test_a_loop_loads_and_runs_whatever_the_order_of_its_nodes(seed: int) -> None:
    """A Merge may name its NextIteration before the file defines it (a forward reference
    to a node that does exist): the loader closes the loop after adding both."""
    g, acc = _loop_graph()
    doc = json.loads(g.to_json())
    nodes = doc["nodes"]
    np.random.default_rng(seed).shuffle(nodes)
    if seed == 0:  # the NextIteration nodes first of all
        nodes.sort(key=lambda n: n["op"] != "NextIteration")
    loaded = kl.Graph.from_json(json.dumps(doc), source="shuffled.json")
    with kl.Session(loaded) as sess:
        assert sess.run(acc, {"n": 5}) == 2.0**5


def test_a_control_edge_from_a_next_iteration_defined_later_loads() -> None:
    g, acc = _loop_graph()
    doc = json.loads(g.to_json())
    next_iteration = next(n["name"] for n in doc["nodes"] if n["op"] == "NextIteration")
    doc["nodes"].insert(0, {"name": "after", "op": "NoOp", "inputs": [f"^{next_iteration}"]})
    loaded = kl.Graph.from_json(json.dumps(doc), source="control.json")
    assert [n.name for n in loaded.node("after").control_inputs] == [next_iteration]
    with kl.Session(loaded) as sess:
        assert sess.run(acc, {"n": 3}) == 8.0
