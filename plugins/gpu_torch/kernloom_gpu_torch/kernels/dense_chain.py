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
    ConstantInput,
    cpu_kernel,
    intra_op_threads,
    is_constant,
    output,
    result,
    tensor,
    use_threads,
)
from kernloom_gpu_torch.kernels.fused import apply_activation
from kernloom_gpu_torch.kernels.math import along_last_axis
from kernloom_gpu_torch.kernels.packed_matmul import PRIORITY, PackedWeight, Product, for_numpy

__all__ = ["REPLAY", "DenseChain", "register_fusion"]

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

    def apply(
        self, ctx: OpKernelContext, h: Any, raw_b: Any, raw_bias: Any, threads: Any
    ) -> tuple[torch.Tensor, Product | None]:
        """This layer's output (a torch tensor) from ``h`` (a numpy array or a tensor),
        and the product it made as a function of the input, to be made again while the
        weight and bias are the same constants (None when they are not constants)."""
        if isinstance(h, torch.Tensor):
            h = h.numpy()  # zero-copy: the same memory, so numpy's small path can take it
        errors = _LayerErrors(ctx, self.where)
        shape = matmul_shape(errors, h.shape, raw_b.shape, False, self.gemm.transpose_b)  # type: ignore[arg-type]
        check_bias(errors, raw_bias.shape, shape[1])
        product = self._product(h, raw_b, raw_bias, shape, threads)
        out = product(tensor(h))
        if self.activation:
            apply_activation(self.activation, out, self.alpha)
        return out, product if is_constant(raw_b) and is_constant(raw_bias) else None

    def _product(self, h: Any, raw_b: Any, raw_bias: Any, shape: Any, threads: Any) -> Product:
        """The product with the bias: numpy's GEMM for small products, else the GEMM
        library's packed path, else torch's ordinary GEMM (``PackedMatMul``'s choice)."""
        weight = raw_b.T if self.gemm.transpose_b else raw_b
        if for_numpy(h, raw_b, shape, threads):

            def small(a: torch.Tensor) -> torch.Tensor:
                y = np.matmul(a.numpy(), weight)
                y += raw_bias
                return tensor(y)

            return small
        use_threads(threads)
        bias = self.bias.get(raw_bias)
        call = self.gemm.call(raw_b, bias, shape)
        if call is None:  # empty, or not packed on MKL's path: torch's ordinary GEMM
            b = tensor(weight)
            return lambda a: torch.addmm(bias, a, b)
        return call


REPLAY: bool = True
"""Whether a step may replay the last run's calls (``_Replay``); read on every run, so a
benchmark can set it False to measure what replaying saves."""


class _Replay:
    """A run of the chain to make again: every layer's library call, for inputs of one
    type, shape and dtype and the same constant weights and biases. A step that matches
    it skips what only decides and checks (shapes, bias sizes, which library, the packed
    weight's and bias's caches): on issue 20's MLP replaying is 1.2-1.3 % faster
    (``benchmarks/OPTIMIZER.md``, "MLP: replaying the chain")."""

    __slots__ = ("constants", "dtype", "kind", "products", "shape")

    def __init__(self, x: Any, constants: list[Any], products: list[Product]) -> None:
        self.kind = type(x)
        self.shape = x.shape
        self.dtype = x.dtype
        self.constants = constants
        self.products = products

    def matches(self, ctx: OpKernelContext, x: Any) -> bool:
        if type(x) is not self.kind or x.shape != self.shape or x.dtype != self.dtype:
            return False
        return all(ctx.input(i) is constant for i, constant in enumerate(self.constants, 1))


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
        self._replay: _Replay | None = None

    def compute(self, ctx: OpKernelContext) -> None:
        if ctx.device is not self._device:  # (a kernel stays on its device: read once)
            self._threads = intra_op_threads(ctx)
            self._device = ctx.device
        threads = self._threads
        layers = self._layers
        count = len(layers)
        h = x = ctx.input(0)
        replay = self._replay
        if replay is not None and REPLAY and replay.matches(ctx, x):
            use_threads(threads)
            h = tensor(x)
            for product, layer in zip(replay.products, layers, strict=True):
                h = product(h)
                if layer.activation:
                    apply_activation(layer.activation, h, layer.alpha)
        else:
            if h.ndim != 2:
                raise ctx.fail(f"x must be a matrix, got shape {list(h.shape)}")
            products: list[Product] = []
            for i, layer in enumerate(layers):
                h, made = layer.apply(ctx, h, ctx.input(1 + i), ctx.input(1 + count + i), threads)
                if made is not None:
                    products.append(made)
            if len(products) == count:  # all on constants: the next step may replay them
                constants = [ctx.input(i) for i in range(1, 1 + 2 * count)]
                self._replay = _Replay(x, constants, products)
        if self._head is not None:  # into the device's buffer: the fetch needs no copy
            along_last_axis(self._head, h, output(ctx, 0, h.shape))
        else:
            result(ctx, 0, h)


def register_fusion(registry: Registrar) -> None:
    """The whole fusion: the op, this kernel (on the numpy CPU device, float32: the only
    place the pass builds the op) and the pass, which runs on graphs with CPU nodes."""
    dense_chain_op.define(registry)
    lib = KernelLibrary()
    cpu_kernel(lib, dense_chain_op.OP, DenseChain, priority=PRIORITY)
    registry.register_kernels(lib)
    registry.register_graph_pass(DenseChainPass(), device_type="CPU")
