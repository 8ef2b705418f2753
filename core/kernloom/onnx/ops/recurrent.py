"""ONNX's recurrent layers RNN, GRU and LSTM (opsets 7, 14 and 22) as MatMul, Add, Mul
and activation ops, one step per time step.

Where the sequence length (axis 0 of X, axis 1 with ``layout`` 1) is known at import
time the steps are unrolled: each is built once, no ``kl.while_loop`` is needed and every
intermediate keeps a static shape. Where it is known at run time only, the step runs in a
``kl.while_loop`` with Loop's scan-output machinery (control_flow.py) growing Y.
``sequence_lens`` (a run-time value) masks the steps a batch entry does not have: its
state is held and its Y rows are zero there, so Y_h is its last valid step (a reverse
direction starts at its own last valid step, as ONNX defines it). ``clip`` bounds the
gates' inputs, not the cell state LSTM's h reads, as onnxruntime does. Y, Y_h and Y_c
get the static shape the import knows however they were built (a looped Y's inference
keeps none): their rank, num_directions and hidden_size always, the sequence length and
batch where known, so that what follows (torch's Squeeze of Y) converts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter
from kernloom.onnx.ops.control_flow import _all_stacked, _grown, _run_while
from kernloom.shapes import TensorShape

Result = Sequence[Tensor | None]

Activation = Callable[[Tensor], Tensor]
State = tuple[Tensor, ...]
"""A direction's recurrent state: (H,) for RNN and GRU, (H, C) for LSTM."""

_COMMON = (
    "activation_alpha",
    "activation_beta",
    "activations",
    "clip",
    "direction",
    "hidden_size",
    "layout",
)

# -- activations -----------------------------------------------------------------------------

_ActivationFn = Callable[[ConversionContext, Tensor, float, float], Tensor]


def _hard_sigmoid(ctx: ConversionContext, x: Tensor, alpha: float, beta: float) -> Tensor:
    linear = ops.add_v2(ops.mul(ctx.const_like(alpha, x), x), ctx.const_like(beta, x))
    return ops.clip_by_value(linear, ctx.const_like(0, x), ctx.const_like(1, x))


def _elu(ctx: ConversionContext, x: Tensor, alpha: float, beta: float) -> Tensor:
    negative = ops.mul(ctx.const_like(alpha, x), ops.expm1(x))
    return ops.select_v2(ops.greater(x, ctx.const_like(0, x)), x, negative)


def _thresholded_relu(ctx: ConversionContext, x: Tensor, alpha: float, beta: float) -> Tensor:
    return ops.select_v2(ops.greater(x, ctx.const_like(alpha, x)), x, ops.zeros_like(x))


_ACTIVATIONS: dict[str, tuple[_ActivationFn, tuple[float, ...]]] = {
    "tanh": (lambda ctx, x, a, b: ops.tanh(x), ()),
    "sigmoid": (lambda ctx, x, a, b: ops.sigmoid(x), ()),
    "relu": (lambda ctx, x, a, b: ops.relu(x), ()),
    "softsign": (lambda ctx, x, a, b: ops.softsign(x), ()),
    "softplus": (lambda ctx, x, a, b: ops.softplus(x), ()),
    "leakyrelu": (lambda ctx, x, a, b: ops.leaky_relu(x, alpha=a), (0.01,)),
    "thresholdedrelu": (_thresholded_relu, (1.0,)),
    "elu": (_elu, (1.0,)),
    "hardsigmoid": (_hard_sigmoid, (0.2, 0.5)),
}
"""Activation name (lower case, as onnxruntime matches them) -> (the function, the
defaults of the alpha and beta it takes). Affine and ScaledTanh, which ONNX lists as
optional, are not supported."""


def _activations(
    ctx: ConversionContext, node: OnnxNode, defaults: Sequence[str], directions: int
) -> list[list[Activation]]:
    """The activation functions of each direction, from ``activations`` (one list per
    direction, in order) or the op's defaults; ``activation_alpha`` and
    ``activation_beta`` are consumed in order by the functions that take them."""
    given = node.attr("activations")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in given] if given else []
    if not names:
        names = list(defaults) * directions
    elif len(names) == len(defaults) and directions == 2:
        names = names * 2
    if len(names) != len(defaults) * directions:
        raise node.fail(
            f"activations has {len(names)} name(s); {node.op_type} needs {len(defaults)} per "
            f"direction ({len(defaults) * directions} for {directions} direction(s))"
        )
    alphas = [float(v) for v in node.attr("activation_alpha", []) or []]
    betas = [float(v) for v in node.attr("activation_beta", []) or []]
    chosen: list[Activation] = []
    for name in names:
        found = _ACTIVATIONS.get(name.lower())
        if found is None:
            raise node.fail(
                f"activation {name!r} is not supported; supported: "
                + ", ".join(sorted(_ACTIVATIONS))
            )
        fn, params = found
        alpha = _parameter(alphas, params, 0)
        beta = _parameter(betas, params, 1)
        chosen.append(_bound(ctx, fn, alpha, beta))
    per = len(defaults)
    return [chosen[i * per : (i + 1) * per] for i in range(directions)]


def _parameter(given: list[float], defaults: tuple[float, ...], index: int) -> float:
    """The next of ``given`` (consumed) when the function takes parameter ``index``,
    else its default; 0 for a parameter it does not take."""
    if index >= len(defaults):
        return 0.0
    return given.pop(0) if given else defaults[index]


def _bound(ctx: ConversionContext, fn: _ActivationFn, alpha: float, beta: float) -> Activation:
    return lambda x: fn(ctx, x, alpha, beta)


# -- one direction's parameters --------------------------------------------------------------


@dataclass
class _Direction:
    """One direction's weights, split per gate (in ONNX's gate order), its activations
    and the clip bound: what a cell step reads."""

    ctx: ConversionContext
    w: list[Tensor]
    """Per gate, [hidden, input]."""
    r: list[Tensor]
    """Per gate, [hidden, hidden]."""
    wb: list[Tensor] | None
    rb: list[Tensor] | None
    p: list[Tensor] | None
    """LSTM's peepholes (i, o, f), each [hidden]."""
    acts: list[Activation]
    clip: float | None

    def x_part(self, g: int, x: Tensor) -> Tensor:
        """Xt*(W_g^T) + Wb_g."""
        part = ops.mat_mul(x, self.w[g], transpose_b=True)
        return part if self.wb is None else ops.add_v2(part, self.wb[g])

    def h_part(self, g: int, h: Tensor) -> Tensor:
        """Ht-1*(R_g^T) + Rb_g."""
        part = ops.mat_mul(h, self.r[g], transpose_b=True)
        return part if self.rb is None else ops.add_v2(part, self.rb[g])

    def gate(self, g: int, x: Tensor, h: Tensor) -> Tensor:
        return ops.add_v2(self.x_part(g, x), self.h_part(g, h))

    def act(self, k: int, pre: Tensor) -> Tensor:
        """Activation ``k`` of a pre-activation, clipped first where ``clip`` is set."""
        if self.clip is not None:
            bound = self.clip
            pre = ops.clip_by_value(
                pre, self.ctx.const_like(-bound, pre), self.ctx.const_like(bound, pre)
            )
        return self.acts[k](pre)


def _pieces(ctx: ConversionContext, x: Tensor, index: int, count: int) -> list[Tensor]:
    """Entry ``index`` of ``x`` along axis 0, split into ``count`` equal parts (axis 0)."""
    picked = ops.gather_v2(x, ctx.const(np.int64(index)), ctx.const(np.int32(0)))
    if count == 1:
        return [picked]
    return list(ops.split(ctx.const(np.int32(0)), picked, num_split=count))


def _direction(
    ctx: ConversionContext,
    node: OnnxNode,
    index: int,
    gates: int,
    acts: list[Activation],
    peepholes: Tensor | None,
) -> _Direction:
    bias = ctx.optional(3)
    biases = None if bias is None else _pieces(ctx, bias, index, 2 * gates)
    clip = node.attr("clip")
    return _Direction(
        ctx=ctx,
        w=_pieces(ctx, ctx.input(1), index, gates),
        r=_pieces(ctx, ctx.input(2), index, gates),
        wb=None if biases is None else biases[:gates],
        rb=None if biases is None else biases[gates:],
        p=None if peepholes is None else _pieces(ctx, peepholes, index, 3),
        acts=acts,
        clip=None if clip is None else float(clip),
    )


# -- cells -----------------------------------------------------------------------------------


def _rnn_step(node: OnnxNode, p: _Direction, x: Tensor, state: State) -> State:
    """Ht = f(Xt*(Wi^T) + Ht-1*(Ri^T) + Wbi + Rbi)."""
    return (p.act(0, p.gate(0, x, state[0])),)


def _gru_step(node: OnnxNode, p: _Direction, x: Tensor, state: State) -> State:
    """ONNX's GRU (gates z, r, h); ``linear_before_reset`` applies r after Rh."""
    (h,) = state
    z = p.act(0, p.gate(0, x, h))
    r = p.act(0, p.gate(1, x, h))
    if int(node.attr("linear_before_reset", 0)):
        pre = ops.add_v2(p.x_part(2, x), ops.mul(r, p.h_part(2, h)))
    else:
        pre = ops.add_v2(p.x_part(2, x), p.h_part(2, ops.mul(r, h)))
    candidate = p.act(1, pre)
    one = p.ctx.const_like(1, z)
    return (ops.add_v2(ops.mul(ops.sub(one, z), candidate), ops.mul(z, h)),)


def _lstm_step(node: OnnxNode, p: _Direction, x: Tensor, state: State) -> State:
    """ONNX's LSTM (gates i, o, f, c; peepholes i, o, f)."""
    h, c = state

    def peep(g: int, pre: Tensor, cell: Tensor) -> Tensor:
        return pre if p.p is None else ops.add_v2(pre, ops.mul(p.p[g], cell))

    i = p.act(0, peep(0, p.gate(0, x, h), c))
    f = p.act(0, peep(2, p.gate(2, x, h), c))
    candidate = p.act(1, p.gate(3, x, h))
    c_new = ops.add_v2(ops.mul(f, c), ops.mul(i, candidate))
    o = p.act(0, peep(1, p.gate(1, x, h), c_new))
    # h's input, the cell state, is not clipped: onnxruntime clips the gates' inputs only.
    return ops.mul(o, p.acts[2](c_new)), c_new


Step = Callable[[OnnxNode, _Direction, Tensor, State], State]


@dataclass(frozen=True)
class _Cell:
    """What distinguishes RNN, GRU and LSTM to the unrolling: gate count, default
    activations, whether a cell state C is carried, and the step."""

    gates: int
    defaults: tuple[str, ...]
    carries_c: bool
    step: Step


_RNN = _Cell(1, ("Tanh",), False, _rnn_step)
_GRU = _Cell(3, ("Sigmoid", "Tanh"), False, _gru_step)
_LSTM = _Cell(4, ("Sigmoid", "Tanh", "Tanh"), True, _lstm_step)


# -- the unrolling ---------------------------------------------------------------------------


def _batch_major(ctx: ConversionContext, x: Tensor | None, layout: int) -> Tensor | None:
    """A [batch, num_directions, hidden] state (layout 1) as [num_directions, batch,
    hidden], the layout the unrolling works in."""
    if x is None or not layout:
        return x
    return ops.transpose(x, ctx.int32s([1, 0, 2]))


def _zeros(ctx: ConversionContext, node: OnnxNode, x: Tensor) -> Tensor:
    """A [batch, hidden] zero state (no initial_h or initial_c given), built from shapes
    rather than from a step's value, so a sequence of length 0 has one too."""
    hidden = node.attr("hidden_size")
    r_dims = ctx.input(2).shape.as_list() if ctx.input(2).shape.rank == 3 else [None] * 3
    hidden = r_dims[2] if r_dims[2] is not None else hidden
    if hidden is None:
        raise node.fail("give hidden_size, or R with a shape known at import time")
    batch = x.shape.as_list()[1]
    zero = ctx.const(np.zeros((), x.dtype.numpy_dtype))
    if batch is not None:
        return ops.fill(ctx.int64s([batch, int(hidden)]), zero)
    dims = ops.gather_v2(ops.shape(x, out_type=d.int64), ctx.int64s([1]), ctx.const(np.int32(0)))
    return ops.fill(ops.concat_v2([dims, ctx.int64s([int(hidden)])], ctx.const(np.int32(0))), zero)


def _initial(ctx: ConversionContext, given: Tensor | None, index: int, zeros: Tensor) -> Tensor:
    """Direction ``index``'s initial state: the given one, or ``zeros``."""
    if given is None:
        return zeros
    return ops.gather_v2(given, ctx.const(np.int64(index)), ctx.const(np.int32(0)))


def _masked(mask: Tensor | None, new: State, state: State) -> tuple[Tensor, State]:
    """A step's Y rows and next state where ``mask`` ([batch, 1]) says which batch
    entries have this step: the others give zero rows and keep their state."""
    if mask is None:
        return new[0], new
    y = ops.select_v2(mask, new[0], ops.zeros_like(new[0]))
    return y, tuple(ops.select_v2(mask, n, s) for n, s in zip(new, state, strict=True))


@dataclass(frozen=True)
class _Run:
    """What every direction of one node shares: the node, its cell, X as [seq, batch,
    input] and sequence_lens as a [batch, 1] column (None: every step is valid)."""

    ctx: ConversionContext
    node: OnnxNode
    cell: _Cell
    x: Tensor
    lengths: Tensor | None
    steps: int | None
    """The sequence length where known at import time."""


def _unrolled(run: _Run, p: _Direction, state: State, reverse: bool) -> tuple[Tensor, State]:
    """One direction over a sequence length known at import time, each step built
    once: Y as [seq, batch, hidden] and the final state."""
    ctx, length = run.ctx, run.steps
    assert length is not None
    axis = ctx.const(np.int32(0))
    ys: list[Tensor | None] = [None] * length
    for t in reversed(range(length)) if reverse else range(length):
        x_t = ops.gather_v2(run.x, ctx.const(np.int64(t)), axis)
        mask = None
        if run.lengths is not None:
            mask = ops.less(ctx.const(np.asarray(t, run.lengths.dtype.numpy_dtype)), run.lengths)
        ys[t], state = _masked(mask, run.cell.step(run.node, p, x_t, state), state)
    return ops.pack([y for y in ys if y is not None], axis=0), state


def _invariant(state: Tensor) -> TensorShape:
    """A state's shape over the loop: the batch left open (X's may be unknown)."""
    dims = state.shape.as_list() if state.shape.rank == 2 else None
    return TensorShape(None if dims is None else [None, dims[1]])


def _looped(run: _Run, p: _Direction, state: State, reverse: bool) -> tuple[Tensor, State]:
    """One direction over a sequence length known at run time only: a ``kl.while_loop``
    over the steps (Loop's machinery: Y rows grow a flat accumulator, restacked after)."""
    ctx, node, x = run.ctx, run.node, run.x
    axis = ctx.const(np.int32(0))
    length = ops.gather_v2(ops.shape(x, out_type=d.int64), ctx.const(np.int64(0)), axis)
    last = ops.sub(length, ctx.const(np.int64(1)))
    count = len(state)
    recorded: list[TensorShape] = []

    def keep_going(step: Tensor, *_: Tensor) -> Tensor:
        return ops.less(step, length)

    def iterate(step: Tensor, *variables: Tensor) -> list[Tensor]:
        held, acc = tuple(variables[:count]), variables[count]
        t = ops.sub(last, step) if reverse else step
        mask = None
        if run.lengths is not None:
            mask = ops.less(ops.cast(t, DstT=run.lengths.dtype), run.lengths)
        y, new = _masked(mask, run.cell.step(node, p, ops.gather_v2(x, t, axis), held), held)
        grown = _grown(ctx, node, [acc], [y], recorded)
        return [ops.add(step, ctx.const(np.int64(1))), *new, *grown]

    dtype = x.dtype
    initial = [
        ctx.const(np.int64(0)),
        *state,
        ctx.const(np.zeros(0, dtype.numpy_dtype), dtype),
        ops.shape(state[0], out_type=d.int64),
    ]
    invariants = [
        TensorShape([]),
        *(_invariant(s) for s in state),
        TensorShape([None]),
        TensorShape([None]),
    ]
    final = _run_while(node, keep_going, iterate, initial, invariants, "0 is the step")
    (y,) = _all_stacked(ctx, final[0], [final[1 + count]], [final[2 + count]], recorded)
    if reverse:
        y = ops.reverse_v2(y, ctx.int32s([0]))
    return y, tuple(final[1 : 1 + count])


def _direction_name(node: OnnxNode) -> str:
    direction = node.attr("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node.fail(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    return direction


def _recurrent(node: OnnxNode, ctx: ConversionContext, cell: _Cell) -> Result:
    layout = int(node.attr("layout", 0))
    if layout not in (0, 1):
        raise node.fail(f"layout must be 0 or 1, got {layout}")
    x = ctx.input(0)
    if x.shape.rank != 3:
        raise node.fail(f"X must have rank 3 known at import time, got shape {x.shape}")
    if layout:
        x = ops.transpose(x, ctx.int32s([1, 0, 2]))
    direction = _direction_name(node)
    count = 2 if direction == "bidirectional" else 1
    acts = _activations(ctx, node, cell.defaults, count)
    lengths = ctx.optional(4)
    column = None if lengths is None else ops.expand_dims(lengths, ctx.const(np.int32(-1)))
    steps = x.shape.as_list()[0]
    run = _Run(ctx, node, cell, x, column, steps)
    h0 = _batch_major(ctx, ctx.optional(5), layout)
    c0 = _batch_major(ctx, ctx.optional(6), layout) if cell.carries_c else None
    peepholes = ctx.optional(7) if cell.carries_c else None
    zeros = _zeros(ctx, node, x) if h0 is None or (cell.carries_c and c0 is None) else x
    # A known length of 0 loops too: zero iterations give Y its empty shape.
    over = _unrolled if steps else _looped
    ys, finals = [], []
    for index in range(count):
        p = _direction(ctx, node, index, cell.gates, acts[index], peepholes)
        state: State = (_initial(ctx, h0, index, zeros),)
        if cell.carries_c:
            state = (*state, _initial(ctx, c0, index, zeros))
        y, final = over(run, p, state, direction == "reverse" or index == 1)
        ys.append(y)
        finals.append(final)
    y_all = ops.pack(ys, axis=1)
    states = [ops.pack([f[k] for f in finals], axis=0) for k in range(len(finals[0]))]
    # What the import knows of the outputs' shapes, whatever the steps' inference kept: a
    # looped Y has none, and a state's hidden size can be lost in the loop.
    batch = _batch_size(x, h0, c0, lengths)
    hidden = _hidden_size(node, ctx, cell)
    _state_shape(y_all, [steps, count, batch, hidden])
    for s in states:
        _state_shape(s, [count, batch, hidden])
    if layout:
        y_all = ops.transpose(y_all, ctx.int32s([2, 0, 1, 3]))
        states = [ops.transpose(s, ctx.int32s([1, 0, 2])) for s in states]
    return [y_all, *states]


def _state_shape(y: Tensor, dims: list[int | None]) -> None:
    """Give ``y`` (a node this converter built) the static dimensions ``dims`` (None:
    unknown) on top of what inference gave it (which they cannot contradict: both come
    from the same inputs); values are unchanged, and later converters (Squeeze needs Y's
    rank) see what the import knows."""
    known = y.shape.merge_with(TensorShape(dims))
    if known != y.shape:
        y.graph.set_output_shape(y, known)


def _dim(t: Tensor | None, axis: int) -> int | None:
    if t is None or t.shape.rank is None or axis >= t.shape.rank:
        return None
    return t.shape.as_list()[axis]


def _batch_size(
    x: Tensor, h0: Tensor | None, c0: Tensor | None, lengths: Tensor | None
) -> int | None:
    """The batch size where any input (X as [seq, batch, input], the initial states as
    [num_directions, batch, hidden], sequence_lens) gives it at import time."""
    for t, axis in ((x, 1), (h0, 1), (c0, 1), (lengths, 0)):
        size = _dim(t, axis)
        if size is not None:
            return size
    return None


def _hidden_size(node: OnnxNode, ctx: ConversionContext, cell: _Cell) -> int | None:
    """hidden_size, from the attribute or the shapes of W ([num_directions, gates *
    hidden_size, input_size]) and R ([num_directions, gates * hidden_size, hidden_size]);
    where they contradict each other the node fails."""
    w, r = ctx.input(1), ctx.input(2)
    w_rows, r_rows = _dim(w, 1), _dim(r, 1)
    given = node.attr("hidden_size")
    sizes = {
        float(v)
        for v in (
            given,
            _dim(r, 2),
            None if w_rows is None else w_rows / cell.gates,
            None if r_rows is None else r_rows / cell.gates,
        )
        if v is not None
    }
    if len(sizes) > 1 or not all(v.is_integer() for v in sizes):
        raise node.fail(
            f"hidden_size={given}, W's shape {w.shape} and R's shape {r.shape} do not agree "
            f"({node.op_type} has {cell.gates} gate(s): W is [num_directions, "
            f"{cell.gates} * hidden_size, input_size], R [num_directions, {cell.gates} * "
            "hidden_size, hidden_size])"
        )
    return int(sizes.pop()) if sizes else None


@converter("RNN", 7, attrs=_COMMON)
def _rnn(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _recurrent(node, ctx, _RNN)


@converter("GRU", 7, attrs=(*_COMMON, "linear_before_reset"))
def _gru(node: OnnxNode, ctx: ConversionContext) -> Result:
    return _recurrent(node, ctx, _GRU)


@converter("LSTM", 7, attrs=(*_COMMON, "input_forget"))
def _lstm(node: OnnxNode, ctx: ConversionContext) -> Result:
    if int(node.attr("input_forget", 0)):
        raise node.fail("input_forget = 1 (coupled input and forget gates) is not supported")
    return _recurrent(node, ctx, _LSTM)


__all__: list[str] = []
