"""Classic-ML ONNX ops of domain ai.onnx.ml: Binarizer, ArrayFeatureExtractor and
TreeEnsemble (opset 5), composed of kernloom ops.

* Binarizer is ``x > threshold`` in x's dtype. An integer x is compared with
  ``floor(threshold)`` (the same test, exactly), where onnx's reference compares in
  float64, which differs only for integers beyond 2**53.
* ArrayFeatureExtractor gathers the flattened indices along the last axis (a vector gives
  a [1, n] matrix, as onnx's reference and onnxruntime do). An index outside [0, size of
  the last axis) fails at run time, as in onnxruntime; numpy's negative indices are not
  wrapped.
* TreeEnsemble reads its trees at import: every node and leaf gets a slot in one table
  (feature, split, mode, next slot if true, next slot if false; a leaf leads to itself),
  and each sample walks every tree at once, a gather per level, for as many levels as the
  deepest tree has branch nodes -- a number known at import. The leaves reached pick rows
  of a [leaves, n_targets] table of weights, reduced over the trees by the aggregate
  function in float64 and cast to X's dtype (onnx's reference rounds after each tree
  instead; they differ by a few ulps). Splits and set members are compared with X in
  float64 unless all are of X's dtype, so that a split is never rounded. A root whose
  two branches lead to the same leaf is walked as any node (onnx's reference takes the
  leaf of the root's own index instead, which is the same leaf in the trees converters
  write). post_transform is applied to the aggregated scores as onnxruntime does (onnx's
  reference ignores it): PROBIT with the same erfinv approximation (Winitzki's, a =
  0.147) as onnxruntime and onnx's older tree ops. nodes_hitrates are ignored (they do
  not change the result).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import rank_of

Result = Sequence[Tensor | None]

ML = "ai.onnx.ml"

# -- Binarizer, ArrayFeatureExtractor -------------------------------------------------------


@converter("Binarizer", 1, attrs=("threshold",), domain=ML)
def _binarizer(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    threshold = float(node.attr("threshold", 0.0))
    if x.dtype.is_floating:
        bound = ctx.const_like(threshold, x)
    elif x.dtype.is_integer:
        # x > t for an integer x is x > floor(t); clipped so that the constant fits.
        info = np.iinfo(x.dtype.numpy_dtype)
        floor = math.floor(threshold) if math.isfinite(threshold) else threshold
        bound = ctx.const_like(int(np.clip(floor, info.min, info.max)), x)
        if floor < info.min or floor >= info.max:
            return [ops.fill(ops.shape(x), ctx.const_like(int(floor < info.min), x))]
    else:
        raise node.fail(f"input X of dtype {x.dtype.name} is not supported (numbers are)")
    return [ops.cast(ops.greater(x, bound), DstT=x.dtype)]


@converter("ArrayFeatureExtractor", 1, domain=ML)
def _array_feature_extractor(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, indices = ctx.input(0), ctx.input(1)
    rank = rank_of(node, x, "input X")
    if rank == 0:
        raise node.fail("input X must have at least one dimension, not be a scalar")
    flat = ops.reshape(indices, ctx.int64s([-1]))
    picked = ops.gather_v2(x, flat, ctx.const(np.int32(rank - 1)))
    if rank == 1:  # a vector is a matrix of one row, as in onnxruntime
        return [ops.expand_dims(picked, ctx.const(np.int32(0)))]
    return [picked]


# -- TreeEnsemble ----------------------------------------------------------------------------

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_AVERAGE, _SUM, _MIN, _MAX = range(4)
_NONE, _SOFTMAX, _LOGISTIC, _SOFTMAX_ZERO, _PROBIT = range(5)

_TREE_ATTRS = (
    "aggregate_function",
    "leaf_targetids",
    "leaf_weights",
    "membership_values",
    "n_targets",
    "nodes_falseleafs",
    "nodes_falsenodeids",
    "nodes_featureids",
    "nodes_hitrates",
    "nodes_missing_value_tracks_true",
    "nodes_modes",
    "nodes_splits",
    "nodes_trueleafs",
    "nodes_truenodeids",
    "post_transform",
    "tree_roots",
)


@dataclass(frozen=True)
class _Forest:
    """The trees as tables over slots: branch node i is slot i, leaf j is slot n + j."""

    feature: np.ndarray[Any, Any]
    split: np.ndarray[Any, Any]
    mode: np.ndarray[Any, Any]
    if_true: np.ndarray[Any, Any]
    if_false: np.ndarray[Any, Any]
    missing_true: np.ndarray[Any, Any]
    members: np.ndarray[Any, Any] | None
    """[slots, most members] per set-membership node, padded with NaN (equal to nothing)."""
    roots: np.ndarray[Any, Any]
    depth: int
    """Branch nodes on the longest path from a root: the levels every sample walks."""
    branches: int


def _array(node: OnnxNode, name: str, size: int | None = None) -> np.ndarray[Any, Any]:
    value = node.attr(name)
    if value is None:
        raise node.fail(f"attribute {name!r} is required")
    array = np.asarray(value).reshape(-1)
    if size is not None and array.size != size:
        raise node.fail(
            f"attribute {name!r} has {array.size} values but nodes_modes has {size}: "
            "every nodes_* attribute needs one value per node"
        )
    return array


def _forest(node: OnnxNode) -> _Forest:
    modes = _array(node, "nodes_modes").astype(np.int64)
    n = modes.size
    features = _array(node, "nodes_featureids", n).astype(np.int64)
    splits = _array(node, "nodes_splits", n)
    true_ids = _array(node, "nodes_truenodeids", n).astype(np.int64)
    false_ids = _array(node, "nodes_falsenodeids", n).astype(np.int64)
    true_leaf = _array(node, "nodes_trueleafs", n).astype(bool)
    false_leaf = _array(node, "nodes_falseleafs", n).astype(bool)
    weights = _array(node, "leaf_weights")
    leaves = weights.size
    if _array(node, "leaf_targetids").size != leaves:
        raise node.fail("leaf_targetids and leaf_weights need one value per leaf")
    tracks = node.attr("nodes_missing_value_tracks_true")
    missing_true = (
        np.zeros(n, bool) if tracks is None else _array(node, "nodes_missing_value_tracks_true", n)
    ).astype(bool)
    if bad := sorted(set(modes.tolist()) - set(range(7))):
        raise node.fail(f"nodes_modes {bad} are unknown (0 to 6: BRANCH_LEQ to BRANCH_MEMBER)")
    if (features < 0).any():
        raise node.fail("nodes_featureids must not be negative")
    for ids, is_leaf, what in (
        (true_ids, true_leaf, "nodes_truenodeids"),
        (false_ids, false_leaf, "nodes_falsenodeids"),
    ):
        limit = np.where(is_leaf, leaves, n)
        if ((ids < 0) | (ids >= limit)).any():
            raise node.fail(f"{what} point past the nodes (or leaves) they index")
    roots = _array(node, "tree_roots").astype(np.int64)
    if ((roots < 0) | (roots >= n)).any():
        raise node.fail(f"tree_roots must index nodes_* (0 to {n - 1})")
    slots = n + leaves
    if_true = np.concatenate([np.where(true_leaf, n + true_ids, true_ids), np.arange(n, slots)])
    if_false = np.concatenate([np.where(false_leaf, n + false_ids, false_ids), np.arange(n, slots)])
    pad = np.zeros(leaves, np.int64)
    return _Forest(
        feature=np.concatenate([features, pad]),
        split=np.concatenate([splits, np.zeros(leaves, splits.dtype)]),
        mode=np.concatenate([modes, pad]),
        if_true=if_true,
        if_false=if_false,
        missing_true=np.concatenate([missing_true, np.zeros(leaves, bool)]),
        members=_members(node, modes, slots),
        roots=roots,
        depth=_depth(node, roots, if_true, if_false, n),
        branches=n,
    )


def _members(
    node: OnnxNode, modes: np.ndarray[Any, Any], slots: int
) -> np.ndarray[Any, Any] | None:
    """Each set-membership node's members, in node order, from membership_values (one
    NaN-terminated list per BRANCH_MEMBER node)."""
    wanted = int((modes == _MEMBER).sum())
    value = node.attr("membership_values")
    if value is None:
        if wanted:
            raise node.fail("BRANCH_MEMBER nodes need the attribute 'membership_values'")
        return None
    values = np.asarray(value).reshape(-1)
    nan = np.isnan(values)
    if int(nan.sum()) != wanted:
        raise node.fail(
            f"membership_values holds {int(nan.sum())} NaN-terminated sets but there are "
            f"{wanted} BRANCH_MEMBER nodes: give one set per such node"
        )
    sets = np.split(values, np.flatnonzero(nan) + 1)[:wanted]
    sets = [s[~np.isnan(s)] for s in sets]
    table = np.full((slots, max([len(s) for s in sets], default=0) or 1), np.nan, values.dtype)
    for slot, members in zip(np.flatnonzero(modes == _MEMBER), sets, strict=True):
        table[slot, : len(members)] = members
    return table


def _depth(
    node: OnnxNode,
    roots: np.ndarray[Any, Any],
    if_true: np.ndarray[Any, Any],
    if_false: np.ndarray[Any, Any],
    branches: int,
) -> int:
    """The most branch nodes on a path from a root to a leaf; a cycle is an error."""
    known: dict[int, int] = {}
    deepest = 0
    for root in roots.tolist():
        stack: list[tuple[int, bool]] = [(int(root), False)]
        on_path: set[int] = set()
        while stack:
            slot, done = stack.pop()
            if slot >= branches or slot in known:
                continue
            if done:
                on_path.discard(slot)
                known[slot] = 1 + max(known.get(int(c), 0) for c in (if_true[slot], if_false[slot]))
                continue
            if slot in on_path:
                raise node.fail(f"node {slot} is its own descendant: the trees must not loop")
            on_path.add(slot)
            stack.append((slot, True))
            stack.extend((int(c), False) for c in (if_true[slot], if_false[slot]))
        deepest = max(deepest, known.get(int(root), 0))
    return deepest


def _leaf_table(node: OnnxNode, x: Tensor, trees: int) -> tuple[np.ndarray[Any, Any], int]:
    """[leaves, n_targets] float64: what each leaf adds to each target, filled so that the
    aggregate over the trees is the result (MIN and MAX start at X's dtype's extremes, as
    onnx's reference does); and the aggregate function."""
    aggregate = int(node.attr("aggregate_function", _SUM))
    if aggregate not in (_AVERAGE, _SUM, _MIN, _MAX):
        raise node.fail(f"aggregate_function {aggregate} is unknown (0 to 3: AVERAGE to MAX)")
    n_targets = int(node.attr("n_targets", 0))
    if n_targets < 1:
        raise node.fail("attribute 'n_targets' must be given and positive")
    targets = _array(node, "leaf_targetids").astype(np.int64)
    if ((targets < 0) | (targets >= n_targets)).any():
        raise node.fail(f"leaf_targetids must be in [0, n_targets = {n_targets})")
    weights = _array(node, "leaf_weights").astype(np.float64)
    info = np.finfo(x.dtype.numpy_dtype)
    fill = {_MIN: float(info.max), _MAX: float(info.min)}.get(aggregate, 0.0)
    table = np.full((weights.size, n_targets), fill, np.float64)
    table[np.arange(weights.size), targets] = weights / trees if aggregate == _AVERAGE else weights
    return table, aggregate


def _const(ctx: ConversionContext, array: np.ndarray[Any, Any]) -> Tensor:
    """An import-time table as a constant of its own dtype (ctx.const would take float64
    for float32)."""
    return ctx.const(array, d.as_dtype(array.dtype))


def _walk(ctx: ConversionContext, forest: _Forest, x: Tensor) -> Tensor:
    """The leaf slot each sample reaches in each tree: [samples, trees] int64."""
    zero = ctx.const(np.int32(0))
    split_dtype = forest.split.dtype
    members_dtype = None if forest.members is None else forest.members.dtype
    same = split_dtype == x.dtype.numpy_dtype and members_dtype in (None, split_dtype)
    work = x if same else ops.cast(x, DstT=d.float64)
    cmp = work.dtype.numpy_dtype
    table = {
        "feature": _const(ctx, forest.feature),
        "split": _const(ctx, forest.split.astype(cmp)),
        "mode": _const(ctx, forest.mode),
        "true": _const(ctx, forest.if_true),
        "false": _const(ctx, forest.if_false),
        "missing": _const(ctx, forest.missing_true),
    }
    members = None if forest.members is None else _const(ctx, forest.members.astype(cmp))
    modes = sorted(set(forest.mode[: forest.branches].tolist()))
    rows = ops.slice(ops.shape(x, out_type=d.int64), ctx.int64s([0]), ctx.int64s([1]))
    roots = _const(ctx, forest.roots.reshape(1, -1))
    slot = ops.tile(roots, ops.concat_v2([rows, ctx.int64s([1])], zero))
    tracks_missing = bool(forest.missing_true.any())
    for _ in range(forest.depth):
        feature = ops.gather_v2(table["feature"], slot, zero)
        value = ops.gather_v2(work, feature, ctx.const(np.int32(1)), batch_dims=1)
        split = ops.gather_v2(table["split"], slot, zero)
        go = _compare(
            ctx, modes, ops.gather_v2(table["mode"], slot, zero), value, split, members, slot
        )
        if tracks_missing:
            missing = ops.logical_and(
                ops.is_nan(value), ops.gather_v2(table["missing"], slot, zero)
            )
            go = ops.logical_or(go, missing)
        slot = ops.select_v2(
            go, ops.gather_v2(table["true"], slot, zero), ops.gather_v2(table["false"], slot, zero)
        )
    return ops.sub(slot, ctx.const(np.int64(forest.branches)))


def _compare(
    ctx: ConversionContext,
    modes: list[int],
    mode: Tensor,
    value: Tensor,
    split: Tensor,
    members: Tensor | None,
    slot: Tensor,
) -> Tensor:
    """Whether each node's test holds: the tests of the modes the model uses, each where
    the node has that mode."""
    held: Tensor | None = None
    for m in modes:
        if m == _MEMBER:
            assert members is not None
            candidates = ops.gather_v2(members, slot, ctx.const(np.int32(0)))
            test = ops.any(
                ops.equal(ops.expand_dims(value, ctx.const(np.int32(-1))), candidates),
                ctx.int32s([-1]),
            )
        else:
            test = _TESTS[m](value, split)
        if len(modes) > 1:
            test = ops.logical_and(test, ops.equal(mode, ctx.const(np.int64(m))))
        held = test if held is None else ops.logical_or(held, test)
    assert held is not None
    return held


_TESTS = {
    _LEQ: ops.less_equal,
    _LT: ops.less,
    _GTE: ops.greater_equal,
    _GT: ops.greater,
    _EQ: ops.equal,
    _NEQ: ops.not_equal,
}


def _post_transform(ctx: ConversionContext, node: OnnxNode, scores: Tensor) -> Tensor:
    kind = int(node.attr("post_transform", _NONE))
    if kind == _NONE:
        return scores
    if kind == _SOFTMAX:
        return ops.softmax(scores)
    if kind == _LOGISTIC:
        return ops.sigmoid(scores)
    if kind == _SOFTMAX_ZERO:
        return _softmax_zero(ctx, scores)
    if kind == _PROBIT:
        return _probit(ctx, scores)
    raise node.fail(f"post_transform {kind} is unknown (0 to 4: NONE to PROBIT)")


def _softmax_zero(ctx: ConversionContext, v: Tensor) -> Tensor:
    """Softmax over each row in which a zero score stays (nearly) zero: exp(v - max) for
    the scores beyond 1e-7 of zero, v * exp(-max) for the others; 0.5 each where all are
    zero (onnxruntime's and onnx's ComputeSoftmaxZero)."""
    last = ctx.int32s([-1])
    top = ops.max(v, last, keep_dims=True)
    nonzero = ops.greater(ops.abs(v), ctx.const_like(1e-7, v))
    e = ops.select_v2(nonzero, ops.exp(ops.sub(v, top)), ops.mul(v, ops.exp(ops.neg(top))))
    total = ops.sum(e, last, keep_dims=True)
    empty = ops.equal(total, ctx.const_like(0, v))
    safe = ops.select_v2(empty, ops.ones_like(total), total)
    half = ops.fill(ops.shape(e), ctx.const_like(0.5, v))
    return ops.select_v2(empty, half, ops.real_div(e, safe))


def _probit(ctx: ConversionContext, p: Tensor) -> Tensor:
    """sqrt(2) * erfinv(2p - 1), erfinv by Winitzki's approximation (a = 0.147) as in
    onnxruntime and onnx's reference ``compute_probit``."""
    x = ops.sub(ops.mul(ctx.const_like(2, p), p), ctx.const_like(1, p))
    one = ctx.const_like(1, p)
    rest = ops.mul(ops.sub(one, x), ops.add_v2(one, x))
    log = ops.log(rest)
    v = ops.add_v2(ctx.const_like(2 / (math.pi * 0.147), p), ops.mul(ctx.const_like(0.5, p), log))
    v2 = ops.mul(ctx.const_like(1 / 0.147, p), log)
    v3 = ops.sub(ops.sqrt(ops.sub(ops.square(v), v2)), v)
    erfinv = ops.mul(ops.sign(x), ops.sqrt(v3))
    return ops.mul(ctx.const_like(1.41421356, p), erfinv)


@converter("TreeEnsemble", 5, attrs=_TREE_ATTRS, domain=ML)
def _tree_ensemble(node: OnnxNode, ctx: ConversionContext) -> Result:
    x = ctx.input(0)
    if x.dtype not in (d.float32, d.float64, d.float16):
        raise node.fail(f"input X of dtype {x.dtype.name} is not supported (float16/32/64 are)")
    if rank_of(node, x, "input X") != 2:
        raise node.fail(f"input X must be a matrix [samples, features], not rank {x.shape.rank}")
    forest = _forest(node)
    features = x.shape.as_list()[1]
    if features is not None and forest.branches and int(forest.feature.max()) >= features:
        raise node.fail(
            f"nodes_featureids reach feature {int(forest.feature.max())} but X has "
            f"{features} features"
        )
    table, aggregate = _leaf_table(node, x, len(forest.roots))
    leaf = _walk(ctx, forest, x)
    picked = ops.gather_v2(_const(ctx, table), leaf, ctx.const(np.int32(0)))  # [B, T, targets]
    over_trees = ctx.int32s([1])
    reduce = {_MIN: ops.min, _MAX: ops.max}.get(aggregate, ops.sum)
    scores = ops.cast(reduce(picked, over_trees), DstT=x.dtype)
    return [_post_transform(ctx, node, scores)]
