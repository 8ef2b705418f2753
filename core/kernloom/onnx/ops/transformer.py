"""ONNX's newer transformer ops, composed of kernloom ops: RotaryEmbedding (opset 23),
CausalConvWithState and LinearAttention (opset 27), SwiGLU (opset 28) and
ai.onnx.preview's FlexAttention (its score_mod and prob_mod graphs built inline).

Deliberate limits and deviations, each reported at import where it applies:

* LinearAttention is a recurrence over the sequence, run token by token as onnx's
  reference (chunk_size, a tuning hint, is ignored): unrolled into one small block of
  ops per token when the sequence length is known at import time, else a while loop
  that appends each token's output. The packed widths (dimension 2 of query, key, value,
  decay and beta) must be known at import time. As the reference, the recurrence runs
  in float32 whatever the input dtype.
* CausalConvWithState needs the kernel size (weight's dimension 2) at import time; the
  convolution is the sum of k shifted, weighted copies of the padded input, so the order
  of its additions may differ from a Conv kernel's in the last bit. As the reference, a
  float16 convolution sums in float32, rounds to float16, adds the bias in float16, and
  runs the activation in float32.
* RotaryEmbedding with a 3-D input needs num_heads and the hidden size at import time.
* FlexAttention needs the head counts (dimension 1 of Q and K) at import time, and
  without a scale attribute Q's head size (dimension 3) too. Its
  scores leave the Q.K matmul in Q's dtype and go through score_mod, the softmax and
  prob_mod in float32 for float16 inputs (the reference's promotion), or in
  softmax_precision when that is set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.control_flow import while_loop
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._dtypes import kernloom_dtype
from kernloom.onnx._registry import converter
from kernloom.onnx.ops._helpers import rank_of, shape_of, static_dims
from kernloom.onnx.ops.control_flow import convert_subgraph
from kernloom.op_library.control_flow_ops import relaxed_shape
from kernloom.shapes import TensorShape

Result = Sequence[Tensor | None]

_PREVIEW = "ai.onnx.preview"


def _last_axis(
    ctx: ConversionContext, x: Tensor, begin: int | None, end: int | None, stride: int = 1
) -> Tensor:
    """x[..., begin:end:stride] (None: that end open), whatever x's rank."""
    return ops.strided_slice(
        x,
        ctx.int64s([0, begin or 0]),
        ctx.int64s([0, end or 0]),
        ctx.int64s([1, stride]),
        begin_mask=2 if begin is None else 0,
        end_mask=2 if end is None else 0,
        ellipsis_mask=1,
    )


def _known(node: OnnxNode, x: Tensor, axis: int, what: str) -> int:
    """Dimension ``axis`` of x, which the converter needs at import time."""
    rank_of(node, x, what)
    dim = x.shape.as_list()[axis]
    if dim is None:
        raise node.fail(f"dimension {axis} of {what} must be known at import time")
    return int(dim)


def _shape_with(ctx: ConversionContext, x: Tensor, keep: int, tail: Sequence[int]) -> Tensor:
    """The shape of x's first ``keep`` dimensions followed by ``tail``: a constant when
    those are known, else built from x's run-time shape."""
    dims = static_dims(x)
    if dims is not None:
        return ctx.int64s([*dims[:keep], *tail])
    lead = ops.strided_slice(
        ops.shape(x, out_type=d.int64), ctx.int64s([0]), ctx.int64s([keep]), ctx.int64s([1])
    )
    return ops.concat_v2([lead, ctx.int64s(list(tail))], ctx.const(np.int32(0)))


def _as(x: Tensor, dtype: d.DType) -> Tensor:
    return x if x.dtype == dtype else ops.cast(x, DstT=dtype)


# -- RotaryEmbedding -------------------------------------------------------------------------


@converter("RotaryEmbedding", 23, attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def _rotary_embedding(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, cos, sin = ctx.input(0), ctx.input(1), ctx.input(2)
    positions = ctx.optional(3)
    rank = rank_of(node, x, "input X")
    rotary = int(node.attr("rotary_embedding_dim", 0))
    interleaved = bool(node.attr("interleaved", 0))
    if rank not in (3, 4):
        raise node.fail(f"input X must be 3-D or 4-D, got rank {rank}")
    if rotary < 0 or rotary % 2:
        raise node.fail(f"rotary_embedding_dim must be 0 or a positive even number, got {rotary}")
    if positions is not None:
        zero = ctx.const(np.int32(0))
        cos, sin = ops.gather_v2(cos, positions, zero), ops.gather_v2(sin, positions, zero)
    # cos and sin are [batch, seq, rotary / 2]: they broadcast over the heads axis.
    if rank == 4:
        work, heads_axis = x, 1  # [batch, heads, seq, head_size]
    else:
        heads = int(node.attr("num_heads", 0))
        hidden = _known(node, x, 2, "input X")
        if heads <= 0:
            raise node.fail("a 3-D input X needs the num_heads attribute (a positive int)")
        if hidden % heads:
            raise node.fail(f"X's hidden size {hidden} is not a multiple of num_heads {heads}")
        work = ops.reshape(x, _shape_with(ctx, x, 2, [heads, hidden // heads]))
        heads_axis = 2  # [batch, seq, heads, head_size]
    cos = ops.expand_dims(cos, ctx.const(np.int32(heads_axis)))
    sin = ops.expand_dims(sin, ctx.const(np.int32(heads_axis)))
    last = ctx.const(np.int32(-1))
    turned = work if rotary == 0 else _last_axis(ctx, work, None, rotary)
    if interleaved:
        x1, x2 = _last_axis(ctx, turned, 0, None, 2), _last_axis(ctx, turned, 1, None, 2)
    else:
        x1, x2 = ops.split(last, turned, num_split=2)
    real = ops.sub(ops.mul(cos, x1), ops.mul(sin, x2))
    imag = ops.add_v2(ops.mul(sin, x1), ops.mul(cos, x2))
    if interleaved:
        done = ops.reshape(ops.pack([real, imag], axis=-1), shape_of(ctx, turned))
    else:
        done = ops.concat_v2([real, imag], last)
    if rotary != 0:
        done = ops.concat_v2([done, _last_axis(ctx, work, rotary, None)], last)
    if rank == 3:
        done = ops.reshape(done, shape_of(ctx, x))
    return [done]


# -- SwiGLU ----------------------------------------------------------------------------------


@converter("SwiGLU", 28, attrs=("alpha",))
def _swiglu(node: OnnxNode, ctx: ConversionContext) -> Result:
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype != b.dtype:
        raise node.fail(f"A is {a.dtype.name} and B is {b.dtype.name}: they must match")
    if a.shape.is_fully_defined() and b.shape.is_fully_defined() and a.shape != b.shape:
        raise node.fail(
            f"A has shape {a.shape} and B {b.shape}: SwiGLU needs equal shapes (no broadcast)"
        )
    alpha = float(node.attr("alpha", 1.0))
    gate = a if alpha == 1.0 else ops.mul(a, ctx.const_like(alpha, a))
    return [ops.mul(ops.mul(a, ops.sigmoid(gate)), b)]


# -- CausalConvWithState ---------------------------------------------------------------------


@converter("CausalConvWithState", 27, attrs=("activation",))
def _causal_conv_with_state(node: OnnxNode, ctx: ConversionContext) -> Result:
    x, weight = ctx.input(0), ctx.input(1)
    bias, past = ctx.optional(2), ctx.optional(3)
    activation = str(node.attr("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise node.fail(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    for tensor, what in ((x, "input"), (weight, "weight")):
        if rank_of(node, tensor, what) != 3:
            raise node.fail(f"{what} must be 3-D, got rank {tensor.shape.rank}")
    k = _known(node, weight, 2, "weight")
    if k < 1:
        raise node.fail(f"the kernel size (weight's dimension 2) must be positive, got {k}")
    if past is None:
        padded = ops.pad(x, ctx.const(np.asarray([[0, 0], [0, 0], [k - 1, 0]], np.int64)))
    else:
        padded = ops.concat_v2([past, x], ctx.const(np.int32(2)))
    # [channels, 1, k] as [channels, k]: each tap's column broadcasts over batch and length.
    # A float16 convolution sums in float32 and rounds once, as numpy's float16 matmul.
    wide = d.float32 if x.dtype.itemsize < 4 else x.dtype
    taps = ops.reshape(_as(weight, wide), ctx.int64s([-1, k]))
    signal = _as(padded, wide)
    total: Tensor | None = None
    for j in range(k):
        shifted = _last_axis(ctx, signal, j, None if j == k - 1 else j - (k - 1))
        term = ops.mul(shifted, _last_axis(ctx, taps, j, j + 1))
        total = term if total is None else ops.add_v2(total, term)
    assert total is not None
    total = _as(total, x.dtype)
    if bias is not None:
        total = ops.add_v2(total, ops.reshape(bias, ctx.int64s([-1, 1])))
    if activation != "none":
        gate = _as(total, d.float32)
        total = _as(ops.mul(gate, ops.sigmoid(gate)), x.dtype)
    state = _last_axis(ctx, padded, 0, 0) if k == 1 else _last_axis(ctx, padded, 1 - k, None)
    return [total, state]


# -- LinearAttention -------------------------------------------------------------------------

_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads_first(ctx: ConversionContext, x: Tensor, heads: int) -> Tensor:
    """[batch, steps, heads * size] as float32 [batch, heads, steps, size]."""
    width = int(x.shape.as_list()[2])  # type: ignore[arg-type]
    split = ops.reshape(_as(x, d.float32), _shape_with(ctx, x, 2, [heads, width // heads]))
    return ops.transpose(split, ctx.int32s([0, 2, 1, 3]))


class _Recurrence:
    """One token's step of LinearAttention on [batch, heads, steps, size] float32 inputs:
    the state update of the rule, then the read of the new state by the query."""

    __slots__ = (
        "b",
        "ctx",
        "g",
        "k",
        "q",
        "read_shape",
        "scale",
        "state_dims",
        "to_kv_heads",
        "v",
    )

    def __init__(
        self,
        ctx: ConversionContext,
        qkv: tuple[Tensor, Tensor, Tensor],
        g: Tensor | None,
        b: Tensor | None,
        heads: tuple[int, int],
        sizes: tuple[int, int],
        scale: float,
    ) -> None:
        self.ctx = ctx
        self.q, self.k, self.v = qkv
        self.g, self.b = g, b
        (q_heads, kv_heads), (size_k, size_v) = heads, sizes
        # Each KV head's state serves q_heads / kv_heads consecutive query heads.
        self.to_kv_heads = ctx.int64s([-1, kv_heads, q_heads // kv_heads, size_k])
        self.read_shape = ctx.int64s([-1, q_heads, 1, size_v])
        self.state_dims = (kv_heads, size_k, size_v)  # the state's, after its batch
        self.scale = ctx.const(np.float32(scale))

    def step(self, state: Tensor | None, begin: Tensor, end: Tensor) -> tuple[Tensor, Tensor]:
        """(the new state [B, H_kv, d_k, d_v], the output [B, H_q, 1, d_v]) of the token
        that ``begin``:``end`` (int64 [0, 0, t] and [0, 0, t + 1]) picks on axis 2."""
        ctx = self.ctx

        def at(x: Tensor) -> Tensor:
            return ops.strided_slice(x, begin, end, ctx.int64s([1, 1, 1]), begin_mask=3, end_mask=3)

        k_t, v_t = at(self.k), at(self.v)  # [B, H_kv, 1, d_k], [B, H_kv, 1, d_v]
        if self.g is not None and state is not None:
            # The decay [B, H_kv, 1, 1 or d_k] scales the state along d_k.
            state = ops.mul(state, ops.transpose(at(self.g), ctx.int32s([0, 1, 3, 2])))
        if self.b is not None:
            if state is not None:
                v_t = ops.sub(v_t, ops.batch_mat_mul_v2(k_t, state))
            v_t = ops.mul(at(self.b), v_t)
        written = ops.batch_mat_mul_v2(k_t, v_t, adj_x=True)  # k_t ⊗ v_t
        state = written if state is None else ops.add_v2(state, written)
        q_t = ops.reshape(at(self.q), self.to_kv_heads)
        read = ops.reshape(ops.batch_mat_mul_v2(q_t, state), self.read_shape)
        return state, ops.mul(read, self.scale)

    def unrolled(self, state: Tensor | None, steps: int) -> tuple[Tensor | None, Tensor | None]:
        """(final state, outputs [B, H_q, steps, d_v]) of a sequence known at import."""
        ctx = self.ctx
        outputs = []
        for t in range(steps):
            state, out = self.step(state, ctx.int64s([0, 0, t]), ctx.int64s([0, 0, t + 1]))
            outputs.append(out)
        if not outputs:
            return state, None
        joined = outputs[0] if steps == 1 else ops.concat_v2(outputs, ctx.const(np.int32(2)))
        return state, joined

    def _kept(self, state: Tensor, invariant: TensorShape) -> Tensor:
        """The state a step returns, with the static shape the loop's invariant (the
        state's entry shape) gives it: the state is [B, H_kv, d_k, d_v] by construction,
        but inputs whose shapes are known only at run time leave dimensions of the
        update's inferred shape open ((2, ?, 3, 5) for (2, 1, 3, 5) where a broadcast
        meets an unknown dimension), and ``kl.while_loop`` needs each iteration's shape at
        least as specific as the invariant."""
        if relaxed_shape(invariant, state.shape) == invariant:
            return state
        batch = invariant.as_list()[0] if invariant.rank == 4 else None
        dims = [-1 if batch is None else batch, *self.state_dims]
        return ops.reshape(state, self.ctx.int64s(dims))

    def looped(self, state: Tensor, outputs: Tensor, steps: Tensor) -> tuple[Tensor, Tensor]:
        """(final state, outputs) of a sequence whose length ``steps`` (an int64 scalar)
        is known at run time only: a while loop that appends each token's output."""
        ctx = self.ctx
        lead = ctx.int64s([0, 0])
        one = ctx.const(np.int64(1))

        def keep_going(t: Tensor, *_: Tensor) -> Tensor:
            return ops.less(t, steps)

        def iterate(t: Tensor, state: Tensor, outputs: Tensor) -> list[Tensor]:
            begin = ops.concat_v2([lead, ops.reshape(t, ctx.int64s([1]))], ctx.const(np.int32(0)))
            end = ops.add_v2(begin, ctx.int64s([0, 0, 1]))
            state, out = self.step(state, begin, end)
            return [
                ops.add_v2(t, one),
                self._kept(state, invariants[1]),
                # The axis built in the body, so that the concat's inference sees it.
                ops.concat_v2([outputs, out], ctx.const(np.int32(2))),
            ]

        # The outputs grow along axis 2. Their other dimensions are their own as far as
        # known (the state's batch may be known where theirs, a fill of a shape computed
        # at run time, is not: it is no invariant of theirs then).
        grown = outputs.shape
        if grown.rank == 4:
            known = grown.as_list()
            grown = TensorShape([*known[:2], None, known[3]])
        invariants = [TensorShape([]), state.shape, grown]
        _, state, outputs = while_loop(
            keep_going,
            iterate,
            [ctx.const(np.int64(0)), state, outputs],
            shape_invariants=invariants,
            name="tokens",
        )
        return state, outputs


@converter(
    "LinearAttention",
    27,
    attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale", "update_rule"),
)
def _linear_attention(node: OnnxNode, ctx: ConversionContext) -> Result:
    query, key, value = ctx.input(0), ctx.input(1), ctx.input(2)
    past, decay, beta = ctx.optional(3), ctx.optional(4), ctx.optional(5)
    rule = str(node.attr("update_rule", "gated_delta"))
    if rule not in _RULES:
        raise node.fail(f"update_rule must be one of {', '.join(_RULES)}; got {rule!r}")
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    if q_heads is None or kv_heads is None:
        raise node.fail("the q_num_heads and kv_num_heads attributes are required")
    q_heads, kv_heads = int(q_heads), int(kv_heads)
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise node.fail(
            f"q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads ({kv_heads})"
        )
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    extras = ((decay, gated, "decay (input 4)"), (beta, delta, "beta (input 5)"))
    for present, needed, what in extras:
        if needed and present is None:
            raise node.fail(f"update_rule {rule!r} needs {what}")
        if present is not None and not needed:
            raise node.fail(f"update_rule {rule!r} takes no {what}; remove it")
    for tensor, what in ((query, "query"), (key, "key"), (value, "value")):
        if rank_of(node, tensor, what) != 3:
            raise node.fail(f"{what} must be 3-D [batch, seq, heads * size]")
    q_width = _known(node, query, 2, "query")
    _known(node, key, 2, "key")
    v_width = _known(node, value, 2, "value")
    if q_width % q_heads:
        raise node.fail(f"query's width {q_width} is not a multiple of q_num_heads {q_heads}")
    if v_width % kv_heads:
        raise node.fail(f"value's width {v_width} is not a multiple of kv_num_heads {kv_heads}")
    size_k, size_v = q_width // q_heads, v_width // kv_heads
    scale = float(node.attr("scale", 0.0)) or 1 / np.sqrt(size_k)

    qkv = (
        _heads_first(ctx, query, q_heads),
        _heads_first(ctx, key, kv_heads),
        _heads_first(ctx, value, kv_heads),
    )
    g = b = None
    if decay is not None:
        width = _known(node, decay, 2, "decay")
        if width not in (kv_heads, kv_heads * size_k):
            raise node.fail(
                f"decay's last dimension {width} must be kv_num_heads ({kv_heads}) or "
                f"kv_num_heads * d_k ({kv_heads * size_k})"
            )
        g = ops.exp(_heads_first(ctx, decay, kv_heads))  # [B, H_kv, T, 1 or d_k]
    if beta is not None:
        width = _known(node, beta, 2, "beta")
        if width not in (kv_heads, 1):
            raise node.fail(f"beta's last dimension {width} must be kv_num_heads ({kv_heads}) or 1")
        b = _heads_first(ctx, beta, width)  # [B, H_kv or 1, T, 1]
    recurrence = _Recurrence(ctx, qkv, g, b, (q_heads, kv_heads), (size_k, size_v), scale)

    state = None if past is None else _as(past, d.float32)  # [B, H_kv, d_k, d_v]
    steps = query.shape.as_list()[1]
    out: Tensor | None = None
    if steps is not None:
        state, out = recurrence.unrolled(state, steps)
    if state is None or out is None:  # no token to unroll, or a length known at run time
        zero = ctx.const(np.float32(0))
        if state is None:
            state = ops.fill(_shape_with(ctx, query, 1, [kv_heads, size_k, size_v]), zero)
        out = ops.fill(_shape_with(ctx, query, 1, [q_heads, 0, size_v]), zero)
        if steps is None:
            length = ops.strided_slice(
                ops.shape(query, out_type=d.int64),
                ctx.int64s([1]),
                ctx.int64s([2]),
                ctx.int64s([1]),
                shrink_axis_mask=1,
            )
            state, out = recurrence.looped(state, out, length)
    out = ops.transpose(out, ctx.int32s([0, 2, 1, 3]))
    out = ops.reshape(out, _shape_with(ctx, query, 2, [q_heads * size_v]))
    return [_as(out, query.dtype), _as(state, query.dtype if past is None else past.dtype)]


# -- FlexAttention (ai.onnx.preview) ---------------------------------------------------------


def _modified(ctx: ConversionContext, node: OnnxNode, attr: str, x: Tensor) -> Tensor:
    """The output of the graph attribute ``attr`` (one input, one output) applied to x,
    as x's dtype."""
    graph = node.attr(attr)
    if not isinstance(graph, onnx.GraphProto):
        raise node.fail(f"attribute {attr!r} must be a graph")
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise node.fail(
            f"{attr} must take one input and give one output; it has {len(graph.input)} "
            f"input(s) and {len(graph.output)} output(s)"
        )
    (out,) = convert_subgraph(ctx, node, attr, {graph.input[0].name: x})
    return _as(out, x.dtype)


@converter(
    "FlexAttention",
    1,
    attrs=("prob_mod", "score_mod", "scale", "softmax_precision"),
    domain=_PREVIEW,
)
def _flex_attention(node: OnnxNode, ctx: ConversionContext) -> Result:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    for tensor, what in ((q, "Q"), (k, "K"), (v, "V")):
        if rank_of(node, tensor, what) != 4:
            raise node.fail(f"{what} must be 4-D [batch, heads, seq, size]")
    q_heads, kv_heads = _known(node, q, 1, "Q"), _known(node, k, 1, "K")
    if q_heads != kv_heads:
        if kv_heads <= 0 or q_heads % kv_heads:
            raise node.fail(f"Q's {q_heads} heads must be a multiple of K's and V's {kv_heads}")
        # Each K/V head serves q_heads / kv_heads consecutive query heads.
        owner = ctx.int64s([h * kv_heads // q_heads for h in range(q_heads)])
        one = ctx.const(np.int32(1))
        k, v = ops.gather_v2(k, owner, one), ops.gather_v2(v, owner, one)
    dtype = q.dtype
    scale = node.attr("scale")
    if scale is None:
        scale = 1 / np.sqrt(_known(node, q, 3, "Q"))
    root = ctx.const(np.sqrt(np.float32(scale)), dtype)
    scores = ops.batch_mat_mul_v2(ops.mul(q, root), ops.mul(k, root), adj_y=True)
    precision = node.attr("softmax_precision")
    if precision is not None:
        work = kernloom_dtype(int(precision), f"node {node.name!r} softmax_precision")
    elif dtype.itemsize < 4:
        work = d.float32
    else:
        work = dtype
    scores = _as(scores, work)
    if node.attr("score_mod") is not None:
        scores = _modified(ctx, node, "score_mod", scores)
    probs = ops.softmax(scores)
    if node.attr("prob_mod") is not None:
        probs = _modified(ctx, node, "prob_mod", probs)
    return [_as(ops.batch_mat_mul_v2(probs, _as(v, work)), v.dtype)]


__all__: list[str] = []
