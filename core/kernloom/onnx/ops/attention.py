"""ONNX's Attention (opset 23 on): scaled dot-product attention with masks, causal and
sliding windows, grouped KV heads, a KV cache and softcap, as BatchMatMulV2, Softmax and
elementwise kernloom ops. Q, K and V need shapes known at import time; the causal and
window masks are then constants built from those shapes, except with an external KV
cache (nonpad_kv_seqlen, opset 24 on), whose per-batch lengths arrive at run time and so
build the padding, causal and window masks in the graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import static_dims

Result = Sequence[Tensor | None]

_ATTRS = (
    "is_causal",
    "kv_num_heads",
    "q_num_heads",
    "qk_matmul_output_mode",
    "scale",
    "softcap",
    "softmax_precision",
    "left_window_size",
    "right_window_size",
)


def _heads(ctx: ConversionContext, node: OnnxNode, x: Tensor, heads: int | None) -> Tensor:
    """[batch, seq, heads * size] as [batch, heads, seq, size]."""
    dims = static_dims(x)
    if dims is None:
        raise node.fail("Q, K and V need shapes known at import time")
    if heads is None:
        raise node.fail("3-D inputs need q_num_heads and kv_num_heads")
    split = ops.reshape(x, ctx.int64s([dims[0], dims[1], heads, dims[2] // heads]))
    return ops.transpose(split, ctx.int32s([0, 2, 1, 3]))


def _dims(node: OnnxNode, x: Tensor) -> list[int]:
    dims = static_dims(x)
    if dims is None:
        raise node.fail("Q, K and V need shapes known at import time")
    return dims


def _external_cache_limits(
    ctx: ConversionContext,
    nonpad: Tensor,
    q_len: int,
    kv_len: int,
    causal: bool,
    left: int,
    right: int,
    like: Tensor,
) -> Tensor:
    """The additive bias [batch, 1, q, kv] of an external KV cache: batch b holds
    ``nonpad[b]`` valid keys, and its queries are the last ``q_len`` of them, so the causal
    and window limits count from ``offset[b] = nonpad[b] - q_len`` (run-time values)."""
    lengths = ops.reshape(ops.cast(nonpad, DstT=d.int64), ctx.int64s([-1, 1, 1]))
    rows = ops.add_v2(ctx.const(np.arange(q_len, dtype=np.int64).reshape(-1, 1)), lengths)
    rows = ops.sub(rows, ctx.const(np.int64(q_len)))  # each query's position, [B, q, 1]
    cols = ctx.const(np.arange(kv_len, dtype=np.int64).reshape(1, -1))
    allowed = ops.less(cols, lengths)  # the padding: [B, 1, kv]
    ahead = ops.sub(rows, cols)  # how far each key is behind each query, [B, q, kv]
    if causal:
        allowed = ops.logical_and(allowed, ops.greater_equal(ahead, ctx.const(np.int64(0))))
    if left >= 0:
        allowed = ops.logical_and(allowed, ops.less_equal(ahead, ctx.const(np.int64(left))))
    if right >= 0:
        allowed = ops.logical_and(allowed, ops.greater_equal(ahead, ctx.const(np.int64(-right))))
    allowed = ops.expand_dims(allowed, ctx.const(np.int32(1)))
    neg_inf = ctx.const(-np.inf, like.dtype)
    return ops.select_v2(allowed, ctx.const(0, like.dtype), neg_inf)


@converter("Attention", 23, attrs=_ATTRS)
def _attention(node: OnnxNode, ctx: ConversionContext) -> Result:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    mask, past_key, past_value = ctx.optional(3), ctx.optional(4), ctx.optional(5)
    nonpad = ctx.optional(6)
    if nonpad is not None and (past_key is not None or past_value is not None):
        raise node.fail(
            "nonpad_kv_seqlen (an external KV cache) cannot be combined with past_key and "
            "past_value (the internal one): give one or the other"
        )
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    three_d = q.shape.rank == 3
    if three_d:
        q = _heads(ctx, node, q, q_heads)
        k = _heads(ctx, node, k, kv_heads)
        v = _heads(ctx, node, v, kv_heads)
    dtype = q.dtype
    q_dims = _dims(node, q)
    scale = node.attr("scale")
    scale = 1 / np.sqrt(q_dims[3]) if scale is None else float(scale)
    root = ctx.const(np.sqrt(scale), dtype)
    two = ctx.const(np.int32(2))
    if past_key is not None:
        k = ops.concat_v2([past_key, k], two)
    if past_value is not None:
        v = ops.concat_v2([past_value, v], two)
    present_key, present_value = k, v
    q_len, kv_len = q_dims[2], _dims(node, k)[2]
    past_len = _dims(node, past_key)[2] if past_key is not None else 0

    # The additive bias: the mask (bool: True attends), then causal and window limits.
    neg_inf = np.asarray(-np.inf, dtype=dtype.numpy_dtype)
    bias: Tensor | None = None
    if mask is not None:
        mask_dims = _dims(node, mask)
        if mask.dtype == d.bool_:
            mask = ops.select_v2(mask, ctx.const_like(0, q), ctx.const(neg_inf, dtype))
        short = kv_len - mask_dims[-1]
        if short > 0:
            paddings = [[0, 0]] * (len(mask_dims) - 1) + [[0, short]]
            mask = ops.pad_v2(mask, ctx.int64s(paddings), ctx.const(neg_inf, dtype))  # type: ignore[arg-type]
        bias = mask
    causal = bool(int(node.attr("is_causal", 0)))
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    if nonpad is None:
        rows = np.arange(q_len).reshape(-1, 1) + past_len
        cols = np.arange(kv_len).reshape(1, -1)
        allowed = np.ones((q_len, kv_len), dtype=bool)
        if causal:
            allowed &= cols <= rows
        if left >= 0:
            allowed &= rows - cols <= left
        if right >= 0:
            allowed &= cols - rows <= right
        if not allowed.all():
            limits = ctx.const(np.where(allowed, 0, -np.inf), dtype)
            bias = limits if bias is None else ops.add_v2(bias, limits)
    else:
        limits = _external_cache_limits(ctx, nonpad, q_len, kv_len, causal, left, right, q)
        bias = limits if bias is None else ops.add_v2(bias, limits)

    # Grouped-query attention: each KV head serves q_heads / kv_heads query heads.
    k_dims = _dims(node, k)
    if q_dims[1] != k_dims[1] and q_dims[1] % k_dims[1] == 0:
        reps = q_dims[1] // k_dims[1]

        def repeat(x: Tensor) -> Tensor:
            x_dims = _dims(node, x)
            tiled = ops.tile(ops.expand_dims(x, two), ctx.int64s([1, 1, reps, 1, 1]))
            return ops.reshape(tiled, ctx.int64s([x_dims[0], x_dims[1] * reps, *x_dims[2:]]))

        k, v = repeat(k), repeat(v)

    scores = ops.batch_mat_mul_v2(ops.mul(q, root), ops.mul(k, root), adj_y=True)
    softcap = float(node.attr("softcap", 0.0))
    if softcap > 0:
        cap = ctx.const_like(softcap, scores)
        scores = ops.mul(ops.tanh(ops.real_div(scores, cap)), cap)
    mode = int(node.attr("qk_matmul_output_mode", 0))
    qk_output = scores
    biased = scores if bias is None else ops.add_v2(scores, bias)
    if mode == 2:
        qk_output = biased
    precision = node.attr("softmax_precision")
    work = biased
    if precision is not None:
        target = kernloom_dtype(int(precision), f"node {node.name!r} softmax_precision")
        work = ops.cast(work, DstT=target) if target != work.dtype else work
    probs = ops.softmax(work)
    if bias is not None:
        # A row whose bias is -inf everywhere attends nothing: its probabilities are 0.
        top = ops.max(bias, ctx.int32s([-1]), keep_dims=True)
        masked = ops.equal(top, ctx.const(neg_inf, dtype))
        probs = ops.select_v2(masked, ops.zeros_like(probs), probs)
    if probs.dtype != dtype:
        probs = ops.cast(probs, DstT=dtype)
    if mode == 3:
        qk_output = probs
    y = ops.batch_mat_mul_v2(probs, v)
    if three_d:
        y_dims = [q_dims[0], q_dims[2], -1]
        y = ops.reshape(ops.transpose(y, ctx.int32s([0, 2, 1, 3])), ctx.int64s(y_dims))
    return [y, present_key, present_value, qk_output]


__all__: list[str] = []
