"""Differential fuzzing of the graph optimizer over a wide op and dtype space: random DAGs
of integer, float and bool values (constants with NaN, infinities, -0.0 and integer
limits, fed placeholders, placeholders left at their default, variables updated inside the
graph), elementwise and bitwise arithmetic, comparisons and selects, shape ops, reductions,
scans, gathers, matrix products with biases and activations, shape materialization,
``kl.cond`` and small ``kl.while_loop``s. Random nodes are fetched (intermediate ones
too) or run as targets; each graph runs with the optimizer off, on, and on with one pass
disabled, and the three must agree: integers and bools exactly, floats up to
reassociation, same dtypes and shapes, and an error of the same class where one fails.

The regression tests after the fuzzer are the discrepancies it found, minimized."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernloom as kl
from kernloom.optimizer.meta_optimizer import BUILTIN_PASS_NAMES

Array = np.ndarray[Any, Any]

FLOATS = (np.float32, np.float64)
SIGNED = (np.int32, np.int64, np.int8)
INTS = (*SIGNED, np.uint8)
NUMERIC = (*FLOATS, *INTS)
DTYPES = (*NUMERIC, np.bool_)
SHAPES: tuple[tuple[int, ...], ...] = (
    (),
    (1,),
    (3,),
    (2, 3),
    (2, 1),
    (1, 3),
    (0,),
    (2, 0),
    (3, 1, 2),
)
FLOAT_SPECIALS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.nan, np.inf, -np.inf, 3.0)


class Skip(Exception):
    """This step cannot be built from what the pool holds: draw another."""


# -- values ----------------------------------------------------------------------------------


def leaf_value(dtype: Any, shape: tuple[int, ...], seed: int, kind: str) -> Array:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if kind == "zeros":
        return np.zeros(shape, dt)
    if kind == "ones":
        return np.ones(shape, dt)
    if dt.kind == "f":
        if kind == "special":
            return rng.choice(np.array(FLOAT_SPECIALS, dt), size=shape)
        return (np.round(rng.uniform(-3, 3, shape) * 4) / 4).astype(dt)
    info = np.iinfo(dt)
    if kind == "special":
        specials = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 7], dtype=object)
        return rng.choice(specials, size=shape).astype(dt)
    low = 0 if info.min == 0 else -5
    return rng.integers(low, 6, shape).astype(dt)


# -- the random program ----------------------------------------------------------------------


class Program:
    """A graph built step by step from hypothesis draws, with its feeds, the tensors that
    may be fetched and the nodes that may be targets."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.graph = kl.Graph()
        self.pool: list[kl.Tensor] = []
        self.feeds: dict[kl.Tensor, Array] = {}
        self.targets: list[kl.Node] = []
        self.variables: list[list[Any]] = []  # [variable, its last operation]
        self.log: list[str] = []

    # drawing helpers
    def draw(self, strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        return self.data.draw(strategy, label=label or None)

    def pick(self, items: Sequence[Any], label: str = "") -> Any:
        if not items:
            raise Skip
        return items[self.draw(st.integers(0, len(items) - 1), label)]

    def operand(self, pred: Callable[[kl.Tensor], bool] = lambda t: True) -> kl.Tensor:
        return self.pick([t for t in self.pool if pred(t)], "operand")

    def const(self, dtype: Any, shape: tuple[int, ...]) -> kl.Tensor:
        kind = self.draw(st.sampled_from(["random", "random", "special", "zeros", "ones"]))
        value = leaf_value(dtype, shape, self.draw(st.integers(0, 2**16)), kind)
        return kl.constant(value)

    def like(self, x: kl.Tensor) -> kl.Tensor:
        """A tensor of x's dtype that broadcasts with x: from the pool or a constant."""
        dtype = x.dtype.numpy_dtype
        same = [t for t in self.pool if t.dtype is x.dtype and t is not x]
        if same and self.draw(st.booleans()):
            return self.pick(same)
        shape = static(x)
        if shape is None:
            choices: list[tuple[int, ...]] = [(), (1,)]
        else:
            choices = [shape, (), (1,) * len(shape), shape[1:], tuple(1 if d else d for d in shape)]
            choices += [(2, *shape)] if len(shape) < 3 else []
        return self.const(dtype, self.pick(choices))

    def leaf(self) -> None:
        kind = self.draw(st.sampled_from(["const", "const", "feed", "default", "variable"]))
        dtype = self.draw(st.sampled_from(DTYPES))
        shape = self.draw(st.sampled_from(SHAPES))
        if kind == "const":
            self.pool.append(self.const(dtype, shape))
            return
        value = leaf_value(dtype, shape, self.draw(st.integers(0, 2**16)), "random")
        if kind == "feed":
            dims = [None if self.draw(st.booleans()) else d for d in shape]
            x = kl.placeholder(kl.as_dtype(dtype), dims if self.draw(st.booleans()) else None)
            self.feeds[x] = value
            self.pool.append(x)
        elif kind == "default":
            default = self.const(dtype, shape)
            x = kl.ops.placeholder_with_default(default, shape=list(shape))
            if self.draw(st.booleans()):
                self.feeds[x] = value
            self.pool.append(x)
        else:
            if np.dtype(dtype) == np.bool_ or np.dtype(dtype) in (np.int8, np.uint8):
                dtype = np.int32
            variable = kl.Variable(value.astype(dtype))
            self.variables.append([variable, variable.initializer])
            self.pool.append(self.variable_op(len(self.variables) - 1, None))

    def variable_op(self, index: int, delta: kl.Tensor | None) -> kl.Tensor:
        """A read (or an update, returning the value after it) of variable ``index``,
        ordered after every earlier operation on it."""
        variable, last = self.variables[index]
        with kl.control_dependencies([last]):
            out = variable.value() if delta is None else variable.assign_add(delta)
        self.variables[index][1] = out.node
        if delta is not None:
            self.targets.append(out.node.control_inputs[0])
        return out


def static(t: kl.Tensor) -> tuple[int, ...] | None:
    shape = t.shape
    return shape.as_tuple() if shape.is_fully_defined() else None  # type: ignore[no-any-return]


def rank_of(t: kl.Tensor) -> int | None:
    return t.shape.rank  # type: ignore[no-any-return]


def is_dtype(t: kl.Tensor, kinds: Sequence[Any]) -> bool:
    return any(t.dtype.numpy_dtype == np.dtype(k) for k in kinds)


def i32(value: Any) -> kl.Tensor:
    return kl.constant(np.asarray(value, np.int32))


BINARY = {
    "add": (kl.ops.add, NUMERIC),
    "add_v2": (kl.ops.add_v2, NUMERIC),
    "sub": (kl.ops.sub, NUMERIC),
    "mul": (kl.ops.mul, NUMERIC),
    "real_div": (kl.ops.real_div, FLOATS),
    "div": (kl.ops.div, NUMERIC),
    "floor_div": (kl.ops.floor_div, NUMERIC),
    "floor_mod": (kl.ops.floor_mod, NUMERIC),
    "maximum": (kl.ops.maximum, NUMERIC),
    "minimum": (kl.ops.minimum, NUMERIC),
    "pow": (kl.ops.pow, (*FLOATS, np.int32, np.int64)),
    "bitwise_and": (kl.ops.bitwise_and, INTS),
    "bitwise_or": (kl.ops.bitwise_or, INTS),
    "bitwise_xor": (kl.ops.bitwise_xor, INTS),
    "left_shift": (kl.ops.left_shift, INTS),
    "right_shift": (kl.ops.right_shift, INTS),
    "less": (kl.ops.less, NUMERIC),
    "greater_equal": (kl.ops.greater_equal, NUMERIC),
    "equal": (kl.ops.equal, DTYPES),
    "not_equal": (kl.ops.not_equal, DTYPES),
    "logical_and": (kl.ops.logical_and, (np.bool_,)),
    "logical_or": (kl.ops.logical_or, (np.bool_,)),
}
UNARY = {
    "neg": (kl.ops.neg, (*FLOATS, *SIGNED)),
    "abs": (kl.ops.abs, (*FLOATS, *SIGNED)),
    "square": (kl.ops.square, (*FLOATS, *SIGNED)),
    "sqrt": (kl.ops.sqrt, FLOATS),
    "exp": (kl.ops.exp, FLOATS),
    "log": (kl.ops.log, FLOATS),
    "relu": (kl.ops.relu, NUMERIC),
    "relu6": (kl.ops.relu6, NUMERIC),
    "tanh": (kl.ops.tanh, FLOATS),
    "sigmoid": (kl.ops.sigmoid, FLOATS),
    "logical_not": (kl.ops.logical_not, (np.bool_,)),
    "invert": (kl.ops.invert, INTS),
    "identity": (kl.ops.identity, DTYPES),
    "stop_gradient": (kl.ops.stop_gradient, DTYPES),
}
ACTIVATIONS = ("", "relu", "relu6", "elu", "leaky_relu", "tanh")


def step(p: Program) -> None:
    kind = p.draw(
        st.sampled_from(
            [
                "binary",
                "binary",
                "binary",
                "unary",
                "unary",
                "select",
                "cast",
                "add_n",
                "chain",
                "chain",
                "shape_op",
                "reduce",
                "scan",
                "gather",
                "matmul",
                "batch_norm",
                "materialize",
                "identity_n",
                "cond",
                "while",
                "variable",
                "leaf",
            ]
        ),
        "kind",
    )
    p.log.append(kind)
    if kind == "leaf":
        p.leaf()
    elif kind == "binary":
        name = p.draw(st.sampled_from(sorted(BINARY)), "op")
        fn, kinds = BINARY[name]
        x = p.operand(lambda t: is_dtype(t, kinds))
        y = p.like(x)
        if p.draw(st.booleans()):
            x, y = y, x
        p.pool.append(fn(x, y))
    elif kind == "unary":
        name = p.draw(st.sampled_from(sorted(UNARY)), "op")
        fn, kinds = UNARY[name]
        p.pool.append(fn(p.operand(lambda t: is_dtype(t, kinds))))
    elif kind == "select":
        x = p.operand()
        y = p.like(x)
        bools = [t for t in p.pool if is_dtype(t, (np.bool_,))]
        c = p.pick(bools) if bools and p.draw(st.booleans()) else kl.ops.greater_equal(x, y)
        if p.draw(st.booleans()):
            p.pool.append(kl.ops.select_v2(c, x, y))
        else:
            p.pool.append(kl.ops.select(c, x, y))
    elif kind == "cast":
        x = p.operand()
        p.pool.append(kl.ops.cast(x, DstT=kl.as_dtype(p.draw(st.sampled_from(DTYPES)))))
    elif kind == "add_n":
        x = p.operand(lambda t: is_dtype(t, NUMERIC) and static(t) is not None)
        same = [t for t in p.pool if t.dtype is x.dtype and static(t) == static(x)]
        others = [p.pick(same) for _ in range(p.draw(st.integers(0, 3)))]
        p.pool.append(kl.ops.add_n([x, *others]))
    elif kind == "chain":
        chain(p)
    elif kind == "shape_op":
        shape_op(p)
    elif kind == "reduce":
        x = p.operand(lambda t: rank_of(t) is not None)
        rank = rank_of(x)
        boolean = is_dtype(x, (np.bool_,))
        name = p.draw(
            st.sampled_from(
                ["all", "any"] if boolean else ["sum", "mean", "max", "min", "prod", "arg_max"]
            )
        )
        axes = p.draw(
            st.lists(st.integers(-max(rank, 1), max(rank, 1) - 1), max_size=2, unique=True)
        )
        if name == "arg_max":
            p.pool.append(kl.ops.arg_max(x, i32(axes[0] if axes else 0)))
            return
        axis = i32(axes) if p.draw(st.booleans()) or len(axes) != 1 else i32(axes[0])
        fn = getattr(kl.ops, name)
        p.pool.append(fn(x, axis, keep_dims=p.draw(st.booleans())))
    elif kind == "scan":
        x = p.operand(lambda t: is_dtype(t, NUMERIC) and (rank_of(t) or 0) >= 1)
        fn = kl.ops.cumsum if p.draw(st.booleans()) else kl.ops.cumprod
        axis = p.draw(st.integers(-rank_of(x), rank_of(x) - 1))
        p.pool.append(
            fn(x, i32(axis), exclusive=p.draw(st.booleans()), reverse=p.draw(st.booleans()))
        )
    elif kind == "gather":
        x = p.operand(lambda t: static(t) is not None and len(static(t)) >= 1)  # type: ignore[arg-type]
        shape = static(x)
        assert shape is not None
        axis = p.draw(st.integers(0, len(shape) - 1))
        indices = p.draw(st.lists(st.integers(-1, shape[axis]), max_size=3))
        p.pool.append(kl.ops.gather_v2(x, i32(indices), i32(axis)))
    elif kind == "matmul":
        matmul(p)
    elif kind == "batch_norm":
        batch_norm(p)
    elif kind == "materialize":
        x = p.operand()
        name = p.draw(st.sampled_from(["shape", "size", "rank"]))
        if name == "rank":
            out = kl.ops.rank(x)
        else:
            out = getattr(kl.ops, name)(x, out_type=p.draw(st.sampled_from([kl.int32, kl.int64])))
        p.pool.append(out)
    elif kind == "identity_n":
        xs = [p.operand() for _ in range(p.draw(st.integers(1, 3)))]
        out = kl.ops.identity_n(xs)
        p.pool.extend(out if isinstance(out, list | tuple) else [out])
    elif kind == "cond":
        cond(p)
    elif kind == "while":
        while_loop(p)
    elif kind == "variable":
        if not p.variables:
            raise Skip
        index = p.draw(st.integers(0, len(p.variables) - 1))
        variable = p.variables[index][0]
        if p.draw(st.booleans()):
            p.pool.append(p.variable_op(index, None))
            return
        same = [
            t
            for t in p.pool
            if t.dtype is variable.dtype and static(t) == variable.shape.as_tuple()
        ]
        delta = (
            p.pick(same)
            if same and p.draw(st.booleans())
            else p.const(variable.dtype.numpy_dtype, variable.shape.as_tuple())
        )
        with kl.control_dependencies([p.operand().node] if p.draw(st.booleans()) else []):
            p.pool.append(p.variable_op(index, delta))


CHAIN = (
    "add",
    "add_v2",
    "sub",
    "mul",
    "real_div",
    "div",
    "maximum",
    "minimum",
    "neg",
    "square",
    "exp",
    "sigmoid",
    "tanh",
    "relu",
)


def chain(p: Program) -> None:
    """A chain of elementwise ops with constants at each link, often identity
    constants (push-down, identities, elementwise fusion)."""
    x = p.operand(lambda t: is_dtype(t, NUMERIC))
    dtype = x.dtype.numpy_dtype
    for _ in range(p.draw(st.integers(2, 5))):
        name = p.draw(st.sampled_from(CHAIN))
        if dtype.kind != "f" and name in ("real_div", "exp", "sigmoid", "tanh"):
            continue
        if name in ("neg", "square", "exp", "sigmoid", "tanh", "relu"):
            if dtype.kind == "u" and name in ("neg", "square"):
                continue
            x = getattr(kl.ops, name)(x)
            continue
        shape = p.draw(st.sampled_from([(), (1,), static(x) or (), (2, 1)]))
        kind = p.draw(st.sampled_from(["zeros", "ones", "random", "special"]))
        c = kl.constant(leaf_value(dtype, shape, p.draw(st.integers(0, 2**16)), kind))
        x = getattr(kl.ops, name)(*((c, x) if p.draw(st.booleans()) else (x, c)))
        if p.draw(st.integers(0, 3)) == 0:
            p.pool.append(x)
    p.pool.append(x)


def shape_op(p: Program) -> None:
    name = p.draw(
        st.sampled_from(
            [
                "reshape",
                "transpose",
                "expand_dims",
                "squeeze",
                "concat",
                "pack",
                "tile",
                "slice",
                "strided_slice",
                "pad",
            ]
        ),
        "shape op",
    )
    x = p.operand(lambda t: static(t) is not None)
    shape = static(x)
    assert shape is not None
    rank = len(shape)
    size = int(np.prod(shape))
    if name == "reshape":
        options = [[-1], [size], [1, size], [size, 1], [-1, 1]]
        if size % 2 == 0 and size:
            options.append([2, -1])
        target = p.pick(options)
        dynamic = p.draw(st.booleans())
        new_shape = kl.ops.shape(p.like(x)) if dynamic and rank else i32(target)
        p.pool.append(kl.ops.reshape(x, new_shape))
    elif name == "transpose":
        perm = p.draw(st.permutations(list(range(rank))))
        p.pool.append(kl.ops.transpose(x, i32(perm)))
    elif name == "expand_dims":
        p.pool.append(kl.ops.expand_dims(x, i32(p.draw(st.integers(-rank - 1, rank)))))
    elif name == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        dims = p.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
        p.pool.append(kl.ops.squeeze(x, squeeze_dims=dims))
    elif name in ("concat", "pack"):
        same = [t for t in p.pool if t.dtype is x.dtype and static(t) == shape]
        xs = [x, *(p.pick(same) for _ in range(p.draw(st.integers(0, 2))))]
        if name == "pack":
            p.pool.append(kl.ops.pack(xs, axis=p.draw(st.integers(-rank - 1, rank))))
        else:
            if rank == 0:
                raise Skip
            p.pool.append(kl.ops.concat_v2(xs, i32(p.draw(st.integers(-rank, rank - 1)))))
    elif name == "tile":
        p.pool.append(
            kl.ops.tile(x, i32(p.draw(st.lists(st.integers(0, 2), min_size=rank, max_size=rank))))
        )
    elif name == "slice":
        begin = [p.draw(st.integers(0, d)) for d in shape]
        sizes = [
            p.draw(st.sampled_from([-1, d - b])) if d > b else 0
            for d, b in zip(shape, begin, strict=True)
        ]
        p.pool.append(kl.ops.slice(x, i32(begin), i32(sizes)))
    elif name == "strided_slice":
        if rank == 0:
            raise Skip
        begin = [p.draw(st.integers(-d - 1, d)) for d in shape]
        end = [p.draw(st.integers(-d - 1, d + 1)) for d in shape]
        strides = [p.draw(st.sampled_from([1, 1, 2, -1])) for _ in shape]
        masks = {
            k: p.draw(st.integers(0, 2**rank - 1))
            for k in ("begin_mask", "end_mask", "shrink_axis_mask")
        }
        masks["shrink_axis_mask"] &= p.draw(st.integers(0, 2**rank - 1))
        p.pool.append(kl.ops.strided_slice(x, i32(begin), i32(end), i32(strides), **masks))
    else:
        pads = [[p.draw(st.integers(0, 2)), p.draw(st.integers(0, 1))] for _ in shape]
        p.pool.append(kl.ops.pad(x, i32(np.reshape(pads, (rank, 2)))))


def matmul(p: Program) -> None:
    dtype = p.draw(st.sampled_from(FLOATS))
    found = [
        t for t in p.pool if is_dtype(t, (dtype,)) and rank_of(t) == 2 and static(t) is not None
    ]
    if found and p.draw(st.booleans()):
        x = p.pick(found)
    else:
        x = p.const(dtype, p.draw(st.sampled_from([(2, 3), (1, 2), (3, 1)])))
        if p.draw(st.booleans()):
            feed = kl.placeholder(x.dtype, [None, static(x)[1]])  # type: ignore[index]
            p.feeds[feed] = x.node.attrs["value"]
            x = feed
    shape = x.shape.dims
    n = p.draw(st.integers(1, 3))
    batched = p.draw(st.booleans())
    transpose_b = p.draw(st.booleans())
    w = p.const(dtype, (n, shape[1]) if transpose_b else (shape[1], n))
    if batched:
        if transpose_b:
            raise Skip
        out = kl.ops.batch_mat_mul_v2(x, w)
    else:
        out = kl.ops.mat_mul(x, w, transpose_b=transpose_b)
    if p.draw(st.booleans()):
        out = kl.ops.bias_add(out, p.const(dtype, (n,)))
    activation = p.draw(st.sampled_from(ACTIVATIONS))
    if activation:
        out = getattr(kl.ops, activation)(out)
    p.pool.append(out)


def batch_norm(p: Program) -> None:
    """An inference batch norm of constant statistics over a 4-D value (not a
    convolution's: the per-channel affine), sometimes with a scale layer after it."""
    fmt = p.draw(st.sampled_from(["NHWC", "NCHW"]))
    shape = p.draw(st.sampled_from([(1, 2, 2, 3), (2, 3, 1, 2)]))
    x = p.const(np.float32, shape)
    if p.draw(st.booleans()):
        feed = kl.placeholder(kl.float32, shape)
        p.feeds[feed] = x.node.attrs["value"]
        x = feed
    channels = shape[3] if fmt == "NHWC" else shape[1]
    stats = [p.const(np.float32, (channels,)) for _ in range(4)]
    variance = kl.constant(np.abs(stats[3].node.attrs["value"]))
    out, *_ = kl.ops.fused_batch_norm_v3(
        x, *stats[:3], variance, is_training=False, data_format=fmt
    )
    if p.draw(st.booleans()):
        per_channel = (channels,) if fmt == "NHWC" else (channels, 1, 1)
        c = p.const(np.float32, p.draw(st.sampled_from([per_channel, (), shape[1:]])))
        out = kl.ops.add_v2(kl.ops.mul(out, c), p.const(np.float32, per_channel))
    p.pool.append(out)


def branch_body(p: Program, x: kl.Tensor, depth: int) -> Callable[[], kl.Tensor]:
    """A function building one branch of a cond over ``x`` (same dtype out)."""
    choice = p.draw(st.sampled_from(["identity", "binary", "unary", "const", "size", "cond"]))
    dtype = x.dtype.numpy_dtype
    if choice == "cond" and depth > 0:
        pred = p.draw(st.booleans())
        inner_true = branch_body(p, x, depth - 1)
        inner_false = branch_body(p, x, depth - 1)
        return lambda: kl.cond(kl.constant(pred), inner_true, inner_false)
    if choice == "binary" and is_dtype(x, NUMERIC):
        name = p.draw(st.sampled_from(["add", "sub", "mul", "maximum", "floor_div"]))
        c = leaf_value(
            dtype,
            (),
            p.draw(st.integers(0, 2**16)),
            p.draw(st.sampled_from(["random", "ones", "zeros"])),
        )
        return lambda: getattr(kl.ops, name)(x, kl.constant(c) + kl.constant(np.zeros((), dtype)))
    if choice == "unary" and is_dtype(x, (*FLOATS, *SIGNED)):
        return lambda: kl.ops.neg(kl.ops.neg(kl.ops.abs(x)))
    if choice == "size" and is_dtype(x, NUMERIC):
        return lambda: x + kl.ops.cast(kl.ops.size(x), DstT=x.dtype)
    if choice == "const":
        shape = static(x) or ()
        c = leaf_value(dtype, shape, p.draw(st.integers(0, 2**16)), "random")
        return lambda: kl.ops.identity(kl.constant(c))
    return lambda: kl.ops.identity(x)


def cond(p: Program) -> None:
    x = p.operand(lambda t: static(t) is not None)
    how = p.draw(st.sampled_from(["const", "fed", "computed"]))
    if how == "const":
        pred = kl.constant(p.draw(st.booleans()))
    elif how == "fed":
        pred = kl.placeholder(kl.bool_, [])
        p.feeds[pred] = np.bool_(p.draw(st.booleans()))
    else:
        b = p.operand(lambda t: is_dtype(t, (np.bool_,)) and rank_of(t) is not None)
        pred = kl.ops.any(b, i32(list(range(rank_of(b) or 0))))
    true_fn = branch_body(p, x, 1)
    false_fn = branch_body(p, x, 1)
    p.pool.append(kl.cond(pred, true_fn, false_fn))


def while_loop(p: Program) -> None:
    x = p.operand(lambda t: is_dtype(t, NUMERIC) and static(t) is not None)
    n = p.draw(st.integers(0, 3))
    dtype = x.dtype.numpy_dtype
    c = leaf_value(dtype, (), p.draw(st.integers(0, 2**16)), "random")

    def body(i: kl.Tensor, v: kl.Tensor) -> tuple[kl.Tensor, kl.Tensor]:
        step_value = kl.ops.add(kl.constant(c), kl.constant(np.ones((), dtype)))
        return kl.ops.add(i, 1), kl.ops.add(
            kl.ops.mul(v, kl.constant(np.ones((), dtype))), step_value
        )

    _, out = kl.while_loop(lambda i, v: kl.ops.less(i, n), body, [kl.constant(0), x])
    p.pool.append(out)


# -- running and comparing -------------------------------------------------------------------


def execute(
    graph: kl.Graph,
    fetches: list[Any],
    feeds: Mapping[Any, Any],
    targets: list[Any],
    stateful: bool,
    **config: Any,
) -> list[Any]:
    """The results of two runs (a KernloomError's class where one fails), so that the
    second sees the variables the first updated."""
    results: list[Any] = []
    try:
        with kl.Session(graph, kl.SessionConfig(**config)) as session:
            if stateful:
                session.run(kl.variables_initializer(graph=graph))
            for _ in range(2 if stateful else 1):
                try:
                    results.append(session.run(fetches, feeds, targets=targets or None))
                except kl.KernloomError as error:
                    results.append(type(error))
    except kl.KernloomError as error:
        results.append(("session", type(error)))
    return results


def assert_same_values(got: Any, want: Any, where: str) -> None:
    if isinstance(want, type) or isinstance(got, type) or isinstance(want, tuple):
        assert got == want, f"{where}: {got!r} != {want!r}"
        return
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{where}: fetch {k}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"{where}: fetch {k}: shape {g.shape} != {w.shape}"
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{where}: fetch {k}")
        else:
            # float64: 1e-7, since attrs are float32 (LeakyRelu's alpha 0.2 is 0.2f unfused)
            rtol = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-5}.get(g.dtype, 1e-7)
            np.testing.assert_allclose(
                g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=f"{where}: fetch {k}"
            )


def compare(
    graph: kl.Graph,
    fetches: list[Any],
    feeds: Mapping[Any, Any],
    targets: list[Any],
    stateful: bool,
    disabled: str,
) -> None:
    want = execute(graph, fetches, feeds, targets, stateful, graph_optimizer=False)
    configs: list[tuple[str, dict[str, Any]]] = [("optimizer on", {})]
    configs.append((f"without {disabled}", {"disabled_passes": (disabled,)}))
    for where, config in configs:
        got = execute(graph, fetches, feeds, targets, stateful, **config)
        assert len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for g, w in zip(got, want, strict=True):
            assert_same_values(g, w, where)


PASSES = (*BUILTIN_PASS_NAMES, "torch_dense_chain")


def choose_fetches(p: Program) -> list[kl.Tensor]:
    """Some of the values nothing reads (so that most of the graph runs), and some
    intermediate ones (which the optimizer must leave computing their values)."""
    read = {t.name for n in p.graph.nodes for t in n.inputs}
    sinks = [t for t in p.pool if t.name not in read]
    fetches = [p.pick(sinks) for _ in range(p.draw(st.integers(1 if sinks else 0, 4)))]
    fetches += [p.pick(p.pool) for _ in range(p.draw(st.integers(0 if fetches else 1, 2)))]
    return list({t.name: t for t in fetches}.values())


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.data())
def test_random_programs_match_with_the_optimizer_on_off_and_without_each_pass(
    data: st.DataObject,
) -> None:
    p = Program(data)
    with p.graph.as_default():
        for _ in range(data.draw(st.integers(2, 5), label="leaves")):
            p.leaf()
        for _ in range(data.draw(st.integers(6, 24), label="steps")):
            try:
                step(p)
            except (Skip, kl.KernloomError, TypeError, ValueError):
                continue  # not buildable from this pool (shapes, dtypes): another step
    candidates = p.pool
    fetches = choose_fetches(p)
    targets = [t for t in p.targets if data.draw(st.booleans(), label="target")]
    if data.draw(st.booleans(), label="node target"):
        targets.append(p.pick([t.node for t in candidates]))
    disabled = data.draw(st.sampled_from(PASSES), label="disabled")
    compare(p.graph, fetches, p.feeds, targets, bool(p.variables), disabled)


# -- regressions: the discrepancies the fuzzer found, minimized --------------------------------


def outcome(
    graph: kl.Graph, fetches: Any, feeds: Mapping[Any, Any] | None = None, **config: Any
) -> Any:
    """The fetched values, or the class of the error the run raised."""
    try:
        with kl.Session(graph, kl.SessionConfig(**config)) as session:
            return session.run(fetches, feeds)
    except kl.KernloomError as error:
        return type(error)


def test_a_shape_the_reshape_cannot_take_fails_when_the_node_is_built() -> None:
    """``reshape(x, shape(big))`` of a fully known ``big``: shape inference knows the
    target (as TensorFlow's shape refiner does, which raises "Cannot reshape a tensor with
    6 elements to shape [2,2,3]" when the node is built), so the error names the node at
    build time, in a cond branch too; the graph stays usable. (Before inference knew it,
    the optimizer's shape materialization made the target a constant and failed while
    compiling a graph that runs where the node is not taken.)"""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        big = kl.ops.add(x, kl.constant(np.zeros((2, 2, 3), np.float32)), name="big")
        with pytest.raises(kl.InvalidArgumentError, match=r"node 'reshaped' \(op Reshape\)"):
            kl.ops.reshape(x, kl.ops.shape(big, name="shape"), name="reshaped")
        taken = kl.placeholder(kl.bool_, [], name="taken")
        with pytest.raises(kl.InvalidArgumentError, match=r"cannot reshape"):
            kl.cond(
                taken, lambda: kl.ops.reshape(x, kl.ops.shape(big)), lambda: kl.ops.identity(big)
            )
        scaled = kl.ops.mul(x, kl.ops.sqrt(kl.constant(16.0), name="four"), name="scaled")
    feeds = {x: np.ones((2, 3), np.float32)}
    with kl.Session(g) as session:  # the graph still compiles; the constants fold
        report = session.explain([scaled], feeds)
        np.testing.assert_array_equal(session.run(scaled, feeds), np.full((2, 3), 4.0))
    assert "folded 1 node(s) into constants: four" in report, report


def test_a_pass_whose_rewrite_fails_shape_inference_is_skipped() -> None:
    """Any pass may make a constant visible to a reader whose shape inference then fails
    (here ``c + 0`` becomes ``c`` with constant folding off, and a constant predicate's
    Merge becomes its live input): the pass is skipped instead of failing the compile."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [2, 3], name="x")
        bad = kl.constant(np.int32([4, 4]), name="bad")
        shape = kl.ops.add(bad, kl.constant(np.int32([0, 0])), name="shape")
        plus_zero = kl.ops.reshape(x, shape, name="plus_zero")
        chosen = kl.cond(
            kl.constant(True), lambda: kl.ops.identity(bad), lambda: kl.ops.identity(bad)
        )
        from_cond = kl.ops.reshape(x, chosen, name="from_cond")
    feeds = {x: np.ones((2, 3), np.float32)}
    for fetch in (plus_zero, from_cond):
        for config in ({"graph_optimizer": False}, {"disabled_passes": ("constant_folding",)}, {}):
            assert outcome(g, fetch, feeds, **config) is kl.KernelArgumentError, (fetch, config)
    with kl.Session(g, kl.SessionConfig(disabled_passes=("constant_folding",))) as session:
        assert "failed and skipped: InvalidArgumentError" in session.explain(plus_zero, feeds)


def test_removing_a_dead_branch_keeps_the_error_of_the_switched_value() -> None:
    """A Switch computes its data whichever side the predicate picks, so a division by
    zero that only the branch not taken reads still fails the graph as built; dead-branch
    removal dropped the Switch, and with it the division: the run returned a value."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.int32, [2], name="x")
        bad = kl.ops.floor_div(x, kl.constant(np.int32([0, 1])), name="bad")
        out = kl.cond(kl.constant(True), lambda: kl.constant(np.int32([7, 7])), lambda: bad)
    feeds = {x: np.int32([1, 2])}
    for config in ({"graph_optimizer": False}, {"disabled_passes": ("dead_branch",)}, {}):
        assert outcome(g, out, feeds, **config) is kl.KernelArgumentError, config
    fine = {x: np.int32([1, 2])}
    with g.as_default():
        ok = kl.cond(kl.constant(True), lambda: kl.constant(np.int32([7, 7])), lambda: x // 2)
    for config in ({"graph_optimizer": False}, {}):
        assert outcome(g, ok, fine, **config).tolist() == [7, 7]


def test_a_batch_norm_scale_layer_with_an_infinite_factor_is_not_absorbed() -> None:
    """A norm (not after a convolution) becomes ``x * s + (offset - mean * s)``, and its
    scale layer's ``* c + d`` was absorbed into ``s`` and the shift: with an infinite
    ``c`` the split terms make ``inf - inf``, NaN where the graph as built gives inf."""
    g = kl.Graph()
    with g.as_default():
        x = kl.placeholder(kl.float32, [1, 1, 1, 2], name="x")

        def f(v: list[float]) -> kl.Tensor:
            return kl.constant(np.float32(v))

        norm, *_ = kl.ops.fused_batch_norm_v3(
            x, f([1, 1]), f([-1, -1]), f([0, 0]), f([1, 1]), is_training=False, name="bn"
        )
        y = kl.ops.add_v2(kl.ops.mul(norm, f([np.inf, 0]), name="mul"), f([0, 0]), name="y")
    feeds = {x: np.float32([[[[2, np.inf]]]])}
    want = outcome(g, y, feeds, graph_optimizer=False)
    assert np.isposinf(want[0, 0, 0, 0]) and np.isnan(want[0, 0, 0, 1])
    np.testing.assert_array_equal(outcome(g, y, feeds), want)
