"""Conv2D and ``_FusedConv2D`` on the numpy CPU device through oneDNN (torch's ``mkldnn``
ops), the path inductor's CPU freezing emits.

Three things make it fast where ``torch.nn.functional.conv2d`` on TF's layouts is not
(``benchmarks/ONNX.md``, "oneDNN convolutions"):

- **A constant filter is reordered once per kernel**, into oneDNN's blocked weight format
  (``mkldnn_reorder_conv2d_weight``); otherwise every call pays a copy of the HWIO filter
  into torch's OIHW order and oneDNN reorders it again inside the call.
- **The bias is added inside the convolution**, the activation in place on its result,
  and that result (oneDNN's own buffer) is adopted as the output without a copy.
- **Activations stay in channels_last memory** (NHWC in memory, oneDNN's fast layout):
  an NCHW node's output is an NCHW array with NHWC strides (as torch's channels_last
  tensors are), so a chain of NCHW convolutions (an imported ONNX model) never transposes
  between layers. Any kernel reads such an array as the NCHW value it is.

What may be cached: only a filter that is a read-only host array, and only while the
kernel sees that same array object again. The CPU device hands out constants as one
read-only view kept by the ``Const`` kernel for the session's life, so a constant filter
hits; a fed filter arrives as a new read-only view on every run and a variable's value is
a writeable array (each assignment stores a new one), so neither is ever reused from the
cache: they are reordered on each call, as a plain convolution would. The entry holds the
array itself, so its identity cannot be taken over by another object.

Float32 only (oneDNN's f32 path); other dtypes, empty tensors and the torch GPU device keep
the general kernels of ``conv`` and ``fused``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import torch

from kernloom.plugin import (
    CONV_FORMS,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    WindowAttrs,
    check_bias,
    parse_fused_ops,
    window_attrs,
)
from kernloom.plugin import types as t
from kernloom_gpu_torch.kernels._util import (
    ConstantInput,
    cpu_kernel,
    intra_op_threads,
    is_constant,
    result,
    tensor,
    use_threads,
)
from kernloom_gpu_torch.kernels.conv import CPU_PRIORITY, conv2d, filter_weights, pad_input
from kernloom_gpu_torch.kernels.fused import activate, fused_conv2d

__all__ = ["OneDnnConv2D", "OneDnnFusedConv2D", "register"]

CPU_LABEL: Final = "torch"

_reorder_conv2d_weight: Final[Callable[..., torch.Tensor]] = (
    torch._C._nn.mkldnn_reorder_conv2d_weight
)
"""oneDNN's weight reorder; its stub lacks the last argument, the input's shape, for which
oneDNN picks the blocked format (as inductor's freezing passes it)."""

_ACTIVATIONS: Final = ("", "Relu", "Relu6", "Elu", "LeakyRelu")
"""The fused activations this kernel applies (``fused.activate``, in place on oneDNN's
output). Not oneDNN's ReLU post-op: it makes NaN 0 where TensorFlow's ReLU keeps NaN, and
checking the input for NaN first costs as much as the in-place pass (a ResNet-50 run
could not tell the three apart on the shared machine)."""


class _Geometry:
    """What oneDNN needs beside the tensors, fixed for one input shape."""

    __slots__ = ("dilation", "groups", "output_hw", "padding", "pre_pad", "stride")

    def __init__(self, ctx: OpKernelContext, attrs: WindowAttrs, x: torch.Tensor) -> None:
        f = ctx.input(1)
        h_axis, w_axis = attrs.spatial_axes
        window = attrs.window(ctx, (int(x.shape[h_axis]), int(x.shape[w_axis])), f.shape[:2])
        self.output_hw = window.output_hw
        symmetric = window.pad_before == window.pad_after
        self.pre_pad = None if symmetric else window
        self.padding = list(window.pad_before) if symmetric else [0, 0]
        self.stride = list(attrs.strides)
        self.dilation = list(attrs.dilations)
        self.groups = int(x.shape[attrs.channel_axis]) // int(f.shape[2])


class _PackedFilter:
    """One reordered constant filter: the array it came from (held, so that its identity
    stays unique), the input shape it was packed for, and oneDNN's weight tensor."""

    __slots__ = ("packed", "shape", "source")

    def __init__(self, source: Any, shape: tuple[int, ...], packed: torch.Tensor) -> None:
        self.source = source
        self.shape = shape
        self.packed = packed


KEEP_PLAN: bool = True
"""Whether a convolution makes its last call again without deciding it anew (``_Plan``);
read on every call, so ``benchmarks/bench_layout.py --change conv-plan`` can measure what
keeping it saves."""


class _Plan:
    """One call worked out: for the next input of the same type, shape, strides and dtype,
    with the same constant filter and bias objects, the call is made again without the
    checks and lookups (``OneDnnConv2D._decide``: 8-12 µs a convolution, a tenth of
    SqueezeNet's run). The arrays are held, so that their identities stay unique."""

    __slots__ = (
        "bias",
        "bias_source",
        "channels_last",
        "conv",
        "convert",
        "dtype",
        "filter",
        "output_hw",
        "pre_pad",
        "shape",
        "strides",
        "threads",
        "weights",
    )

    def __init__(
        self,
        x: np.ndarray[Any, Any],
        filter_: Any,
        bias_source: Any,
        threads: int | None,
        attrs: WindowAttrs,
        geometry: _Geometry,
    ) -> None:
        self.shape, self.strides, self.dtype = x.shape, x.strides, x.dtype
        self.filter = filter_
        self.bias_source = bias_source
        self.threads = threads
        self.channels_last = attrs.channels_last
        self.pre_pad = geometry.pre_pad
        self.output_hw = geometry.output_hw
        self.conv = (geometry.padding, geometry.stride, geometry.dilation, geometry.groups)
        self.weights: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        self.convert = True

    def matches(self, ctx: OpKernelContext, x: Any) -> bool:
        return (
            type(x) is np.ndarray
            and x.shape == self.shape
            and x.strides == self.strides
            and x.dtype == self.dtype
            and ctx.input(1) is self.filter
            and (self.bias_source is None or ctx.input(2) is self.bias_source)
        )


class OneDnnConv2D(OpKernel):
    """Conv2D (and, through ``_FusedConv2D``'s subclass, bias and activation) on the CPU
    with oneDNN. Falls back to the general torch kernel for what oneDNN does not take."""

    fused = False
    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._attrs = window_attrs(ctx)
        self._packed: _PackedFilter | None = None
        self._geometry: tuple[tuple[Any, ...], _Geometry] | None = None
        """The last input and filter shapes and their geometry (a model runs one shape)."""
        self._bias_input = ConstantInput()
        self._plan: _Plan | None = None
        form = parse_fused_ops(ctx.attr("fused_ops")) if self.fused else None
        self._activation = form.activation if form is not None else ""
        self._residual = form is not None and form.residual

    def _fallback(self, ctx: OpKernelContext) -> None:
        conv2d(ctx)

    def compute(self, ctx: OpKernelContext) -> None:
        raw_x = ctx.input(0)
        plan = self._plan
        if plan is None or not (KEEP_PLAN and plan.matches(ctx, raw_x)):
            plan = self._decide(ctx, raw_x)
            if plan is None:
                return  # the general kernel ran
        else:
            use_threads(plan.threads, ctx.device)
        x = tensor(raw_x)
        nchw = x.permute(0, 3, 1, 2) if plan.channels_last else x
        if plan.pre_pad is not None:
            nchw = pad_input(nchw.contiguous(memory_format=torch.channels_last), plan.pre_pad)
        if plan.convert:
            nchw = nchw.contiguous(memory_format=torch.channels_last)
        if self._residual:
            # oneDNN's binary add post-op: the residual summed into the convolution's own
            # output as it is written, no pass of its own (a ResNet-50 run spent 6 of 40
            # ms in separate Add+Relu passes).
            other = self._residual_input(ctx, x, plan.output_hw)
            y = torch.ops.mkldnn._convolution_pointwise.binary(
                nchw, other, plan.weights, plan.bias, *plan.conv, "add", None, None, [], None
            )
        else:
            y = torch.ops.mkldnn._convolution_pointwise(
                nchw, plan.weights, plan.bias, *plan.conv, "none", [], ""
            )
        if self._activation:
            activate(self._activation, y, ctx)
        result(ctx, 0, y.permute(0, 2, 3, 1) if plan.channels_last else y)

    def _decide(self, ctx: OpKernelContext, raw_x: Any) -> _Plan | None:
        """Check the inputs and work out the call (geometry, reordered weights, bias); None
        where the general kernel ran instead. The plan is kept for the next call while
        the filter and bias are constants (``_Plan.matches``)."""
        raw_f = ctx.input(1)
        if not self._takes(raw_x, raw_f):
            self._fallback(ctx)
            return None
        threads = intra_op_threads(ctx)
        use_threads(threads, ctx.device)
        attrs = self._attrs
        x = tensor(raw_x)
        channels = int(x.shape[attrs.channel_axis])
        f_depth, out_depth = int(raw_f.shape[2]), int(raw_f.shape[3])
        if channels % f_depth or out_depth % (channels // f_depth):
            self._fallback(ctx)  # its error names the depths
            return None
        bias = self._bias(ctx, out_depth)
        shapes = (tuple(x.shape), raw_f.shape)
        known = self._geometry
        if known is not None and known[0] == shapes:
            geometry = known[1]
        else:
            geometry = _Geometry(ctx, attrs, x)
            self._geometry = (shapes, geometry)
        nchw = x.permute(0, 3, 1, 2) if attrs.channels_last else x
        if geometry.pre_pad is not None:
            nchw = pad_input(nchw.contiguous(memory_format=torch.channels_last), geometry.pre_pad)
        convert = not nchw.is_contiguous(memory_format=torch.channels_last)
        weights = self._weights(raw_f, tuple(nchw.shape), geometry)
        plan = _Plan(raw_x, raw_f, self._bias_source(ctx), threads, attrs, geometry)
        plan.weights, plan.bias, plan.convert = weights, bias, convert
        constant = is_constant(raw_f) and (
            plan.bias_source is None or is_constant(plan.bias_source)
        )
        self._plan = plan if constant else None
        return plan

    def _residual_input(
        self, ctx: OpKernelContext, x: torch.Tensor, output_hw: tuple[int, ...]
    ) -> Any:
        """The residual as the NCHW tensor oneDNN adds, after checking it has the output's
        shape (the op adds it only where nothing broadcasts)."""
        attrs, f = self._attrs, ctx.input(1)
        batch = int(x.shape[0])
        height, width = output_hw
        depth = int(f.shape[3])
        shape = (
            (batch, height, width, depth) if attrs.channels_last else (batch, depth, height, width)
        )
        residual = tensor(ctx.input(3))
        if tuple(residual.shape) != shape:
            raise ctx.fail(
                f"the residual has shape {tuple(residual.shape)}; it needs the output's {shape}"
            )
        return residual.permute(0, 3, 1, 2) if attrs.channels_last else residual

    def _takes(self, x: Any, f: Any) -> bool:
        """Whether oneDNN's path runs: float32 4-D host arrays, a non-empty input and
        filter (the general kernel checks and explains everything else)."""
        return (
            isinstance(x, np.ndarray)
            and isinstance(f, np.ndarray)
            and x.dtype == np.float32
            and f.dtype == np.float32
            and x.ndim == 4
            and f.ndim == 4
            and x.size > 0
            and f.size > 0
        )

    def _bias(self, ctx: OpKernelContext, out_depth: int) -> torch.Tensor | None:
        return None

    def _bias_source(self, ctx: OpKernelContext) -> Any:
        """The bias input as the context hands it (None without one)."""
        return None

    def _weights(
        self, raw_f: np.ndarray[Any, Any], x_shape: tuple[int, ...], geometry: _Geometry
    ) -> torch.Tensor:
        """oneDNN's weights: from the cache for the same constant filter and input shape,
        else reordered now (and kept, for a constant filter)."""
        packed = self._packed
        if packed is not None and packed.source is raw_f and packed.shape == x_shape:
            return packed.packed
        weights = filter_weights(tensor(raw_f))
        if not is_constant(raw_f):
            return weights
        reordered = _reorder_conv2d_weight(
            weights.to_mkldnn(),
            geometry.padding,
            geometry.stride,
            geometry.dilation,
            geometry.groups,
            list(x_shape),
        )
        self._packed = _PackedFilter(raw_f, x_shape, reordered)
        return reordered


class OneDnnFusedConv2D(OneDnnConv2D):
    """``_FusedConv2D`` (Conv2D + BiasAdd [+ Add] [+ activation]): the bias and the residual
    inside oneDNN's convolution, the activation in place on its output."""

    fused = True

    def _fallback(self, ctx: OpKernelContext) -> None:
        fused_conv2d(ctx)

    def _takes(self, x: Any, f: Any) -> bool:
        return super()._takes(x, f) and (self._activation in _ACTIVATIONS)

    def _bias(self, ctx: OpKernelContext, out_depth: int) -> torch.Tensor | None:
        bias = self._bias_input.get(ctx.input(2))
        check_bias(ctx, bias.shape, out_depth)
        return bias

    def _bias_source(self, ctx: OpKernelContext) -> Any:
        return ctx.input(2)


def register(lib: KernelLibrary) -> None:
    """Conv2D and ``_FusedConv2D`` on the CPU for float32, one priority above the general
    torch kernels (which keep the other dtypes): labelled ``torch``, and unlabelled as the
    CPU default."""
    f32: dict[str, Any] = {"T": tuple(dt for dt in t.FLOATS if dt.name == "float32")}
    for op, kernel in (("Conv2D", OneDnnConv2D), ("_FusedConv2D", OneDnnFusedConv2D)):
        forms: dict[str, Any] = {"fused_ops": CONV_FORMS} if kernel.fused else {}
        for keywords in ({"label": CPU_LABEL, "priority": 1}, {"priority": CPU_PRIORITY + 1}):
            cpu_kernel(lib, op, kernel, type_constraints=f32, attr_constraints=forms, **keywords)
