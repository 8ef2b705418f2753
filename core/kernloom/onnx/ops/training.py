"""The optimizer update rules of domain ai.onnx.preview.training: Adagrad, Adam and
Momentum (opset 1), composed of kernloom ops.

They are pure functions -- ``R`` (learning rate) and ``T`` (update count) then, for each of
N tensors, its value, its gradient and its running state -- so a model that applies an
update step imports like any other. Inputs after ``R`` and ``T`` come in groups of N (all
values, then all gradients, then each state), and the outputs likewise (all new values,
then each new state), as the spec orders them.

The scalars ``R``, ``T`` and the update count's powers are computed in float64 and then
cast to the tensors' dtype, as onnx's reference computes them in numpy's float64 (a
Python float attribute times an int64 scalar); the tensors themselves are computed in their
own dtype. Where the rules branch on the update count (``T > 0``: Adam's bias correction,
Momentum's first-step ``beta``), both branches are computed and one is selected at run
time, so ``T`` may be fed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kernloom.dtypes as d
from kernloom import ops
from kernloom.graph.tensor import Tensor
from kernloom.onnx._context import ConversionContext, OnnxNode
from kernloom.onnx._registry import converter

Result = Sequence[Tensor | None]

TRAINING = "ai.onnx.preview.training"


def _float32(value: float) -> float:
    """A default as the schema holds it: ONNX's FLOAT attributes are float32."""
    return float(np.float32(value))


_DEFAULT_EPSILON = _float32(1e-6)


def _groups(
    node: OnnxNode, ctx: ConversionContext, per_tensor: int
) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
    """``R``, ``T`` and the ``per_tensor`` groups of N inputs each (values, gradients,
    states), checked: one dtype (float32 or float64) and one shape per tensor."""
    count = len(node.inputs) - 2
    if count <= 0 or count % per_tensor:
        raise node.fail(
            f"expects R, T and then {per_tensor} inputs per optimized tensor (values, "
            f"gradients{', states' if per_tensor > 2 else ''}), got {len(node.inputs)} inputs"
        )
    n = count // per_tensor
    r, t = ctx.input(0), ctx.input(1)
    if r.dtype not in (d.float32, d.float64):
        raise node.fail(f"input R must be float or double, got {r.dtype.name}")
    if t.dtype != d.int64:
        raise node.fail(f"input T must be int64, got {t.dtype.name}")
    groups = [[ctx.input(2 + k * n + i) for i in range(n)] for k in range(per_tensor)]
    for i, x in enumerate(groups[0]):
        if x.dtype not in (d.float32, d.float64):
            raise node.fail(f"optimized tensor {i} must be float or double, got {x.dtype.name}")
        for k, group in enumerate(groups[1:], 1):
            if group[i].dtype != x.dtype:
                raise node.fail(
                    f"input {2 + k * n + i} has dtype {group[i].dtype.name}; the tensor it "
                    f"belongs to (input {2 + i}) is {x.dtype.name}"
                )
    return r, t, groups


def _f64(ctx: ConversionContext, value: float) -> Tensor:
    return ctx.const(np.float64(value))


def _regularized(ctx: ConversionContext, node: OnnxNode, x: Tensor, g: Tensor) -> Tensor:
    """``norm_coefficient * x + g``: the gradient of the L2 regularization term added."""
    norm = float(node.attr("norm_coefficient", 0.0))
    return ops.add(ops.mul(ctx.const_like(norm, x), x), g)


@converter("Adagrad", 1, attrs=("decay_factor", "epsilon", "norm_coefficient"), domain=TRAINING)
def _adagrad(node: OnnxNode, ctx: ConversionContext) -> Result:
    r, t, (xs, gs, hs) = _groups(node, ctx, 3)
    decay = float(node.attr("decay_factor", 0.0))
    epsilon = float(node.attr("epsilon", _DEFAULT_EPSILON))
    # r / (1 + t * decay_factor), in float64.
    t64 = ops.cast(t, DstT=d.float64)
    scaled = ops.real_div(
        ops.cast(r, DstT=d.float64), ops.add(_f64(ctx, 1.0), ops.mul(t64, _f64(ctx, decay)))
    )
    new_xs, new_hs = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        rate = ops.cast(scaled, DstT=x.dtype)
        g_reg = _regularized(ctx, node, x, g)
        h_new = ops.add(h, ops.mul(g_reg, g_reg))
        h_sqrt = ops.add(ops.sqrt(h_new), ctx.const_like(epsilon, x))
        new_xs.append(ops.sub(x, ops.real_div(ops.mul(rate, g_reg), h_sqrt)))
        new_hs.append(h_new)
    return [*new_xs, *new_hs]


@converter(
    "Adam",
    1,
    attrs=("alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"),
    domain=TRAINING,
)
def _adam(node: OnnxNode, ctx: ConversionContext) -> Result:
    r, t, (xs, gs, vs, hs) = _groups(node, ctx, 4)
    alpha = float(node.attr("alpha", _float32(0.9)))
    beta = float(node.attr("beta", _float32(0.999)))
    epsilon = float(node.attr("epsilon", _DEFAULT_EPSILON))
    post = float(node.attr("norm_coefficient_post", 0.0))
    # T > 0: r * sqrt(1 - beta^T) / (1 - alpha^T) (bias correction); else r. In float64.
    t64 = ops.cast(t, DstT=d.float64)
    r64 = ops.cast(r, DstT=d.float64)
    one = _f64(ctx, 1.0)
    corrected = ops.real_div(
        ops.mul(r64, ops.sqrt(ops.sub(one, ops.pow(_f64(ctx, beta), t64)))),
        ops.sub(one, ops.pow(_f64(ctx, alpha), t64)),
    )
    adjusted = ops.select_v2(ops.greater(t, ctx.const(np.int64(0))), corrected, r64)
    new_xs, new_vs, new_hs = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        g_reg = _regularized(ctx, node, x, g)
        v_new = ops.add(
            ops.mul(ctx.const_like(alpha, x), v), ops.mul(ctx.const_like(1 - alpha, x), g_reg)
        )
        h_new = ops.add(
            ops.mul(ctx.const_like(beta, x), h),
            ops.mul(ctx.const_like(1 - beta, x), ops.mul(g_reg, g_reg)),
        )
        h_sqrt = ops.add(ops.sqrt(h_new), ctx.const_like(epsilon, x))
        step = ops.mul(ops.cast(adjusted, DstT=x.dtype), ops.real_div(v_new, h_sqrt))
        new_xs.append(ops.mul(ctx.const_like(1 - post, x), ops.sub(x, step)))
        new_vs.append(v_new)
        new_hs.append(h_new)
    return [*new_xs, *new_vs, *new_hs]


@converter("Momentum", 1, attrs=("alpha", "beta", "mode", "norm_coefficient"), domain=TRAINING)
def _momentum(node: OnnxNode, ctx: ConversionContext) -> Result:
    # (All four attributes are required: the model's schema check has refused it before.)
    mode = str(node.attr("mode"))
    if mode not in ("standard", "nesterov"):
        raise node.fail(f"mode must be 'standard' or 'nesterov', got {mode!r}")
    r, t, (xs, gs, vs) = _groups(node, ctx, 3)
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    first = ops.greater(t, ctx.const(np.int64(0)))
    new_xs, new_vs = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        rate = ops.cast(r, DstT=x.dtype)
        g_reg = _regularized(ctx, node, x, g)
        # The gradient's coefficient is 1 on the first update (T = 0), beta after.
        beta_t = ops.select_v2(first, ctx.const_like(beta, x), ctx.const_like(1.0, x))
        v_new = ops.add(ops.mul(ctx.const_like(alpha, x), v), ops.mul(beta_t, g_reg))
        if mode == "standard":
            direction = v_new
        else:
            direction = ops.add(g_reg, ops.mul(ctx.const_like(alpha, x), v_new))
        new_xs.append(ops.sub(x, ops.mul(rate, direction)))
        new_vs.append(v_new)
    return [*new_xs, *new_vs]
