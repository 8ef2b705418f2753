"""The ``_TorchDenseChain`` kernel on the numpy CPU device: each layer as
``PackedMatMul`` runs it (the GEMM library's packed weight where the weight is constant,
numpy's GEMM for small products, the activation in place), the layers back to back with
no node boundary between them, then the softmax head (``math.along_last_axis``).

Each layer's value is what its ``_FusedMatMul`` node computes, call for call: the chain
changes where the Python runs, not what the libraries are asked. An error names the
layer (its ``_FusedMatMul`` node) as well as the chain node.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import torch

from kernloom.plugin import (
    KernelArgumentError,
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    Registrar,
    check_bias,
    matmul_shape,
)
from kernloom_gpu_torch import dense_chain_op
from kernloom_gpu_torch.dense_chain_pass import DenseChainPass
from kernloom_gpu_torch.kernels._util import (
    cpu_kernel,
    intra_op_threads,
    output,
    result,
    tensor,
    use_threads,
)
from kernloom_gpu_torch.kernels.fused import apply_activation
from kernloom_gpu_torch.kernels.math import along_last_axis
from kernloom_gpu_torch.kernels.onednn import ConstantInput
from kernloom_gpu_torch.kernels.packed_matmul import PRIORITY, PackedWeight, for_numpy

__all__ = ["DenseChain", "register_fusion"]

_HEADS: Final = {"Softmax": torch.softmax, "LogSoftmax": torch.log_softmax}


class _LayerErrors:
    """What ``matmul_shape`` needs of a context (``fail``), naming the layer."""

    __slots__ = ("_ctx", "_where")

    def __init__(self, ctx: OpKernelContext, where: str) -> None:
        self._ctx = ctx
        self._where = where

    def fail(self, message: str) -> KernelArgumentError:
        return self._ctx.fail(f"{self._where}: {message}")


class _Layer:
    """One dense layer: its packed weight, its bias as a tensor, its activation."""

    __slots__ = ("activation", "alpha", "bias", "gemm", "where")

    def __init__(self, where: str, transpose_b: bool, activation: str, alpha: float) -> None:
        self.where = where
        self.gemm = PackedWeight(transpose_b)
        self.bias = ConstantInput()
        self.activation = activation
        self.alpha = alpha

    def apply(self, ctx: OpKernelContext, h: Any, raw_b: Any, raw_bias: Any, threads: Any) -> Any:
        """This layer's output (a numpy array or a torch tensor) from ``h`` (either)."""
        transpose_b = self.gemm.transpose_b
        if isinstance(h, torch.Tensor):
            h = h.numpy()  # zero-copy: the same memory, so numpy's small path can take it
        errors = _LayerErrors(ctx, self.where)
        shape = matmul_shape(errors, h.shape, raw_b.shape, False, transpose_b)  # type: ignore[arg-type]
        check_bias(errors, raw_bias.shape, shape[1])
        if for_numpy(h, raw_b, shape, threads):
            y = np.matmul(h, raw_b.T if transpose_b else raw_b)
            y += raw_bias
            if self.activation:
                apply_activation(self.activation, tensor(y), self.alpha)
            return y
        use_threads(threads)
        a = tensor(h)
        bias = self.bias.get(raw_bias)
        out = self.gemm.product(a, raw_b, bias, shape)
        if out is None:  # empty, or not packed on MKL's path: torch's ordinary GEMM
            b = tensor(raw_b)
            out = torch.addmm(bias, a, b.T if transpose_b else b)
        if self.activation:
            apply_activation(self.activation, out, self.alpha)
        return out


class DenseChain(OpKernel):
    """``_TorchDenseChain``: the layers, then the head."""

    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        names = [str(n) for n in ctx.attr("layers")]
        count = len(names)
        self._layers = [
            _Layer(f"layer {i + 1} of {count} ({name})", bool(tb), str(act), float(alpha))
            for i, (name, tb, act, alpha) in enumerate(
                zip(
                    names,
                    ctx.attr("transpose_b"),
                    ctx.attr("activations"),
                    ctx.attr("leakyrelu_alphas"),
                    strict=True,
                )
            )
        ]
        self._head = _HEADS.get(str(ctx.attr("head")))
        self._device: object = None
        self._threads: int | None = None

    def compute(self, ctx: OpKernelContext) -> None:
        if ctx.device is not self._device:  # (a kernel stays on its device: read once)
            self._threads = intra_op_threads(ctx)
            self._device = ctx.device
        threads = self._threads
        layers = self._layers
        count = len(layers)
        h = ctx.input(0)
        if h.ndim != 2:
            raise ctx.fail(f"x must be a matrix, got shape {list(h.shape)}")
        for i, layer in enumerate(layers):
            h = layer.apply(ctx, h, ctx.input(1 + i), ctx.input(1 + count + i), threads)
        if self._head is not None:  # into the device's buffer: the fetch needs no copy
            along_last_axis(self._head, tensor(h), output(ctx, 0, h.shape))
        elif isinstance(h, torch.Tensor):
            result(ctx, 0, h)
        else:
            ctx.set_output(0, h)


def register_fusion(registry: Registrar) -> None:
    """The whole fusion: the op, this kernel (on the numpy CPU device, float32: the only
    place the pass builds the op) and the pass, which runs on graphs with CPU nodes."""
    dense_chain_op.define(registry)
    lib = KernelLibrary()
    cpu_kernel(lib, dense_chain_op.OP, DenseChain, priority=PRIORITY)
    registry.register_kernels(lib)
    registry.register_graph_pass(DenseChainPass(), device_type="CPU")
