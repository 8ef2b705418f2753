"""ai.onnx.ml Binarizer, ArrayFeatureExtractor and TreeEnsemble, BatchNormalization in
training mode and deterministic Dropout in training mode, checked against onnx's
reference evaluator (for TreeEnsemble's post transforms, which it ignores, its
untransformed scores through onnx's reference transforms), and the import errors, which
must name the node."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops.aionnxml import _common_classifier as _common
from onnx_helpers import FLOAT, check_against_oracle, model

import kernloom.onnx as ko

DOUBLE = TensorProto.DOUBLE
ML = "ai.onnx.ml"


def ml_model(
    node: onnx.NodeProto,
    inputs: dict[str, tuple[int, Any]],
    outputs: dict[str, tuple[int, Any]],
    initializers: dict[str, np.ndarray[Any, Any]] | None = None,
    ml_opset: int = 5,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "test",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        initializer=[numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()],
    )
    made = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)],
    )
    made.ir_version = 10
    return made


# -- Binarizer -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "threshold"),
    [
        (np.float32, 0.0),
        (np.float32, 0.1),  # compared in float32, as the reference
        (np.float64, -1.5),
        (np.int64, 0.5),
        (np.int64, -0.5),  # x > -0.5 holds for 0
        (np.int32, 2.0),
        (np.int32, -3.7),
    ],
)
def test_binarizer(dtype: Any, threshold: float) -> None:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=threshold)
    m = ml_model(node, {"x": (elem, [None, 5])}, {"y": (elem, None)}, ml_opset=1)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 5)) * 4).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[0, :3] = [np.float32(0.1), 0.0, -1.5]
    check_against_oracle(m, {"x": x})


def test_binarizer_default_threshold_on_a_scalar() -> None:
    node = helper.make_node("Binarizer", ["x"], ["y"], domain=ML)
    m = ml_model(node, {"x": (FLOAT, [])}, {"y": (FLOAT, None)}, ml_opset=1)
    for value in (-1.0, 0.0, 2.0):
        check_against_oracle(m, {"x": np.asarray(value, np.float32)})


# -- ArrayFeatureExtractor -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "indices"),
    [
        ((3, 4), [[2, 0, 3]]),  # a [1, n] row of indices
        ((2, 3, 5), [4, 4, 1]),
        ((2, 3, 5), [[0, 1], [2, 3]]),  # flattened
        ((6,), [5, 0]),  # a vector gives a [1, n] matrix
        ((3, 4), []),
    ],
)
@pytest.mark.parametrize("known", [True, False], ids=["import", "runtime"])
def test_array_feature_extractor(shape: tuple[int, ...], indices: Any, known: bool) -> None:
    idx = np.asarray(indices, np.int64)
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    dims = list(shape) if known else [None] * len(shape)
    m = ml_model(
        node,
        {"x": (FLOAT, dims), "i": (TensorProto.INT64, list(idx.shape))},
        {"y": (FLOAT, None)},
        ml_opset=1,
    )
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    check_against_oracle(m, {"x": x, "i": idx})


def test_array_feature_extractor_int64_data() -> None:
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    m = ml_model(
        node,
        {"x": (TensorProto.INT64, [2, 3]), "i": (TensorProto.INT64, [2])},
        {"y": (TensorProto.INT64, None)},
        ml_opset=1,
    )
    check_against_oracle(
        m, {"x": np.arange(6, dtype=np.int64).reshape(2, 3), "i": np.asarray([2, 2], np.int64)}
    )


# -- TreeEnsemble --------------------------------------------------------------------------


def _tree_node(
    modes: list[int],
    features: list[int],
    splits: list[float],
    true_ids: list[int],
    true_leafs: list[int],
    false_ids: list[int],
    false_leafs: list[int],
    targets: list[int],
    weights: list[float],
    roots: list[int],
    *,
    dtype: Any = np.float32,
    n_targets: int = 2,
    aggregate: int = 1,
    post: int = 0,
    members: list[float] | None = None,
    missing: list[int] | None = None,
) -> onnx.NodeProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    attrs: dict[str, Any] = {
        "n_targets": n_targets,
        "aggregate_function": aggregate,
        "post_transform": post,
        "tree_roots": roots,
        "nodes_modes": numpy_helper.from_array(np.asarray(modes, np.uint8), "nodes_modes"),
        "nodes_featureids": features,
        "nodes_splits": numpy_helper.from_array(np.asarray(splits, dtype), "nodes_splits"),
        "nodes_truenodeids": true_ids,
        "nodes_trueleafs": true_leafs,
        "nodes_falsenodeids": false_ids,
        "nodes_falseleafs": false_leafs,
        "leaf_targetids": targets,
        "leaf_weights": numpy_helper.from_array(np.asarray(weights, dtype), "leaf_weights"),
    }
    if members is not None:
        attrs["membership_values"] = helper.make_tensor(
            "membership_values", elem, (len(members),), members
        )
    if missing is not None:
        attrs["nodes_missing_value_tracks_true"] = missing
    return helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, name="trees", **attrs)


def _forest(**kw: Any) -> onnx.NodeProto:
    """Three trees over 3 features, of depths 2, 3 and 1, with every comparison mode:
    tree 0 = nodes 0-1, tree 1 = nodes 2-4, tree 2 = node 5; leaves 0-9."""
    return _tree_node(
        modes=[0, 2, 1, 3, 4, 5],
        features=[0, 1, 2, 0, 1, 2],
        splits=[0.0, 0.5, 0.25, -0.5, 1.0, 0.0],
        true_ids=[1, 0, 3, 4, 2, 6],
        true_leafs=[0, 1, 0, 0, 1, 1],
        false_ids=[1, 1, 5, 3, 7, 8],
        false_leafs=[1, 1, 1, 1, 1, 1],
        targets=[0, 1, 2, 0, 1, 2, 0, 1, 2, 0],
        weights=[1.5, -2.0, 3.25, 0.5, 7.0, -1.0, 2.5, 4.0, -3.5, 9.0],
        roots=[0, 2, 5],
        n_targets=3,
        **kw,
    )


def _tree_model(node: onnx.NodeProto, dtype: Any = np.float32, known: bool = True) -> Any:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    shape = [None, 3] if known else [None, None]
    return ml_model(node, {"X": (elem, shape)}, {"Y": (elem, None)})


def _samples(dtype: Any = np.float32) -> np.ndarray[Any, Any]:
    x = np.random.default_rng(3).standard_normal((16, 3)).astype(dtype)
    x[0] = [0.0, 0.5, 0.25]  # on the splits
    x[1] = [-0.5, 1.0, 0.0]
    x[2, 1] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3], ids=["average", "sum", "min", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_aggregates(aggregate: int, dtype: Any) -> None:
    m = _tree_model(_forest(aggregate=aggregate, dtype=dtype), dtype)
    check_against_oracle(m, {"X": _samples(dtype)}, rtol=1e-6)


def test_tree_ensemble_features_known_only_at_run_time() -> None:
    check_against_oracle(_tree_model(_forest(), known=False), {"X": _samples()})


def test_tree_ensemble_float64_splits_on_float32_input() -> None:
    """A float64 split between two float32 values is not rounded onto either."""
    node = _tree_node(
        [0], [0], [0.1], [0], [1], [1], [1], [0, 1], [1.0, 2.0], [0], dtype=np.float64
    )
    m = _tree_model(node, np.float32)
    x = np.asarray([[np.float32(0.1)], [0.09], [0.2]], np.float32).repeat(3, axis=1)
    check_against_oracle(m, {"X": x})


def test_tree_ensemble_missing_values_track_true() -> None:
    node = _forest(missing=[1, 0, 1, 1, 0, 1])
    check_against_oracle(_tree_model(node), {"X": _samples()})


def test_tree_ensemble_set_membership_among_other_modes() -> None:
    node = _tree_node(
        modes=[6, 0, 6],
        features=[1, 0, 2],
        splits=[0.0, 2.0, 0.0],
        true_ids=[0, 0, 2],
        true_leafs=[1, 1, 1],
        false_ids=[1, 2, 1],
        false_leafs=[0, 0, 1],
        targets=[0, 1, 0],
        weights=[10.0, 20.0, 30.0],
        roots=[0],
        members=[1.0, 2.0, 5.5, np.nan, -1.0, np.nan],
    )
    m = _tree_model(node)
    x = np.asarray(
        [[0, 1, 0], [0, 5.5, 0], [3, 0, -1], [1, 0, -1], [1, 0, 0], [1, np.nan, 7]], np.float32
    )
    check_against_oracle(m, {"X": x})


def test_tree_ensemble_float16() -> None:
    m = _tree_model(_forest(dtype=np.float16), np.float16)
    check_against_oracle(m, {"X": _samples(np.float16)}, rtol=1e-3)


_POST_TRANSFORMS = {
    1: lambda v: _common.softmax(v.copy()),
    2: lambda v: _common.logistic(v).astype(v.dtype),
    3: lambda v: _common.softmax_zero(v.copy()),
    4: lambda v: _common.probit(v).astype(v.dtype),
}


@pytest.mark.parametrize(
    "post", [1, 2, 3, 4], ids=["softmax", "logistic", "softmax_zero", "probit"]
)
def test_tree_ensemble_post_transforms(post: int) -> None:
    """onnx's reference TreeEnsemble ignores post_transform (and onnxruntime 1.32 swaps
    SOFTMAX and LOGISTIC): the expected scores are the reference's untransformed ones put
    through the transforms of onnx's reference tree ops (``_common_classifier``)."""
    if post == 4:
        # One target whose scores are probabilities in (0, 1).
        node = _tree_node(
            [0, 0], [0, 1], [0.0, 0.3], [1, 0], [0, 1], [1, 1], [1, 1],
            [0, 0, 0], [0.2, 0.7, 0.05], [0, 1], n_targets=1, post=post, aggregate=0,
        )  # fmt: skip
    else:
        node = _forest(post=post)
    x = _samples()
    x[3] = [5.0, 5.0, 5.0]
    x[4] = [-1.0, 0.0, 5.0]  # target 0 and 2 scores zero for SOFTMAX_ZERO
    (got,) = ko.InferenceSession(_tree_model(node).SerializeToString()).run(None, {"X": x})
    for attr in node.attribute:
        if attr.name == "post_transform":
            attr.i = 0
    (scores,) = ReferenceEvaluator(_tree_model(node)).run(None, {"X": x})
    want = _POST_TRANSFORMS[post](np.asarray(scores))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes_featureids": [0, 1, 2, 0, 1, 7]}, "reach feature 7 but X has 3 features"),
        ({"nodes_truenodeids": [1, 0, 3, 4, 2, 60]}, "nodes_truenodeids point past"),
        ({"nodes_falsenodeids": [1, 1, 5]}, "has 3 values but nodes_modes has 6"),
        ({"leaf_targetids": [0, 1, 2, 0, 1, 2, 0, 1, 2, 3]}, r"leaf_targetids must be in"),
        ({"tree_roots": [0, 9]}, "tree_roots must index"),
        ({"aggregate_function": 7}, "aggregate_function 7 is unknown"),
        ({"post_transform": 9}, "post_transform 9 is unknown"),
        ({"nodes_truenodeids": [1, 0, 3, 2, 2, 6]}, "its own descendant"),
    ],
)
def test_tree_ensemble_errors_name_the_node(change: dict[str, Any], message: str) -> None:
    node = _forest()
    for attr in node.attribute:
        if attr.name in change:
            attr.CopyFrom(helper.make_attribute(attr.name, change[attr.name]))
    with pytest.raises(
        ko.OnnxImportError, match=rf"'trees' \(ai.onnx.ml::TreeEnsemble, opset 5\).*{message}"
    ):
        ko.import_model(_tree_model(node))


def test_tree_ensemble_membership_sets_must_match_member_nodes() -> None:
    node = _tree_node(
        [6], [0], [0.0], [0], [1], [1], [1], [0, 1], [1.0, 2.0], [0], members=[1.0, 2.0]
    )
    with pytest.raises(ko.OnnxImportError, match=r"'trees' .*0 NaN-terminated sets"):
        ko.import_model(_tree_model(node))


# -- BatchNormalization and Dropout in training mode ----------------------------------------


def _batch_norm(rank: int, momentum: float | None, outputs: int, dtype: Any) -> Any:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    attrs: dict[str, Any] = {"training_mode": 1, "epsilon": 1e-3}
    if momentum is not None:
        attrs["momentum"] = momentum
    names = ["y", "running_mean", "running_var"][:outputs]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], names, **attrs)
    shape: list[int | None] = [None, 3] + [None] * (rank - 2)
    inputs = {"x": (elem, shape), **{n: (elem, [3]) for n in "sbmv"}}
    return model([node], inputs, dict.fromkeys(names, (elem, None)), opset=15)


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
@pytest.mark.parametrize("momentum", [None, 0.5])
@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_training_mode(
    rank: int, momentum: float | None, outputs: int, dtype: Any
) -> None:
    rng = np.random.default_rng(rank)
    shape = (4, 3, 5, 2, 3)[:rank]
    feeds = {
        "x": rng.standard_normal(shape).astype(dtype) * 2 + 1,
        "s": rng.standard_normal(3).astype(dtype),
        "b": rng.standard_normal(3).astype(dtype),
        "m": rng.standard_normal(3).astype(dtype),
        "v": rng.random(3).astype(dtype) + 0.5,
    }
    check_against_oracle(_batch_norm(rank, momentum, outputs, dtype), feeds, rtol=2e-5, atol=1e-6)


def _dropout(ratio: float | None, training: bool | None, mask: bool) -> Any:
    """Dropout with ratio and training_mode as initializers (None: a graph input)."""
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "z"] if mask else ["y"], name="drop")
    inputs: dict[str, Any] = {"x": (FLOAT, [3, 4])}
    inits: dict[str, Any] = {}
    if ratio is None:
        inputs["r"] = (FLOAT, [])
    else:
        inits["r"] = np.asarray(ratio, np.float32)
    if training is None:
        inputs["t"] = (TensorProto.BOOL, [])
    else:
        inits["t"] = np.asarray(training)
    outputs = {"y": (FLOAT, None)}
    if mask:
        outputs["z"] = (TensorProto.BOOL, None)
    return model([node], inputs, outputs, initializers=inits, opset=13)


@pytest.mark.parametrize(
    ("ratio", "training"), [(0.0, True), (0.5, False), (None, None), (0.3, None), (None, True)]
)
@pytest.mark.parametrize("mask", [False, True])
def test_dropout_deterministic_in_training_mode(
    ratio: float | None, training: bool | None, mask: bool
) -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    feeds: dict[str, Any] = {"x": x}
    for run_ratio, run_training in ((0.0, True), (0.7, False)):
        if ratio is None:
            feeds["r"] = np.asarray(run_ratio, np.float32)
        if training is None:
            feeds["t"] = np.asarray(run_training)
        used_ratio = run_ratio if ratio is None else ratio
        used_training = run_training if training is None else training
        if used_ratio == 0 or not used_training:  # deterministic: the identity
            check_against_oracle(_dropout(ratio, training, mask), feeds)


def test_dropout_random_fails_at_import_naming_the_node() -> None:
    with pytest.raises(ko.OnnxImportError, match=r"'drop' \(Dropout, opset 13\).*random dropout"):
        ko.import_model(_dropout(0.5, True, False))


def test_dropout_random_fails_at_run_time_naming_the_node() -> None:
    session = ko.InferenceSession(_dropout(None, None, True).SerializeToString())
    feeds = {
        "x": np.ones((3, 4), np.float32),
        "r": np.asarray(0.5, np.float32),
        "t": np.asarray(True),
    }
    with pytest.raises(Exception, match=r"'drop' \(Dropout, opset 13\).*random dropout"):
        session.run(None, feeds)


def test_batch_norm_running_outputs_need_training_mode() -> None:
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], name="bn"
    )
    inputs = {"x": (FLOAT, [2, 3]), **{n: (FLOAT, [3]) for n in "sbmv"}}
    m = model([node], inputs, dict.fromkeys(("y", "rm", "rv"), (FLOAT, None)), opset=15)
    with pytest.raises(
        ko.OnnxImportError, match=r"'bn' \(BatchNormalization, opset 15\).*training_mode=1"
    ):
        ko.import_model(m)
