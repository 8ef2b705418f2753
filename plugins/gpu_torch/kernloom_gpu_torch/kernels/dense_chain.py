"""The ``_TorchDenseChain`` kernel on the numpy CPU device: each layer as
``PackedMatMul`` runs it (the GEMM library's packed weight where the weight is constant,
numpy's GEMM for small products, the activation in place), the layers back to back with
no node boundary between them, then the softmax head (``math.along_last_axis``); a
classifier's narrow last layer and its head on the transpose (``TRANSPOSED_HEAD_ROWS``).

Each layer's value is what its ``_FusedMatMul`` node computes, call for call (but for a
last layer on the transpose: the same sums, in the order oneDNN takes for that shape):
the chain changes where the Python runs, not what the libraries are asked. An error
names the layer (its ``_FusedMatMul`` node) as well as the chain node.
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
from kernloom_gpu_torch.kernels.math import SHORT_ROW, along_last_axis
from kernloom_gpu_torch.kernels.packed_matmul import (
    ONEDNN,
    PRIORITY,
    PackedWeight,
    Product,
    for_numpy,
    onednn_linear,
)

__all__ = ["REPLAY", "TRANSPOSED_HEAD_ROWS", "DenseChain", "register_fusion"]

_HEADS: Final = {"Softmax": torch.softmax, "LogSoftmax": torch.log_softmax}

TRANSPOSED_HEAD_ROWS: Final = 256
"""From this many rows, a last layer of fewer than ``SHORT_ROW`` columns followed by the
head (a classifier's logits and softmax) runs on the transpose: oneDNN's product
``W^T h^T`` ([N, M], the M rows now the wide side its kernels vectorise along, where a
packed narrow weight pads N to 64), the bias down its columns, the head along dim 0 (one
vector across many rows, where torch's row kernel goes row by row), then one transposing
copy into the output. The same products and the same normalisation per row. The last
product, bias and softmax of 10 columns after a 1024-wide layer, median µs direct /
transposed (``benchmarks/bench_classifier_head.py``): 2 threads, 256 rows 67 / 51, 1024
rows 259 / 214; 1 thread 116 / 86, 468 / 341. Below 256 rows it does not pay at two
threads (64 rows 30 / 33). In the whole MLP of issue 20 that is 0.3-0.5 %
(``benchmarks/OPTIMIZER.md``, "The classifier on the transpose")."""


class _LayerErrors:
    """What ``matmul_shape`` needs of a context (``fail``), naming the layer."""

    __slots__ = ("_ctx", "_where")

    def __init__(self, ctx: OpKernelContext, where: str) -> None:
        self._ctx = ctx
        self._where = where

    def fail(self, message: str) -> KernelArgumentError:
        return self._ctx.fail(f"{self._where}: {message}")


class _Transposed:
    """A layer's constant weight as [N, K] and its bias as a column [N, 1], for its
    product on the transpose (``TRANSPOSED_HEAD_ROWS``); each kept while the same constant
    comes back (one tuple, read and replaced in one step: a kernel is shared by
    concurrent runs)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: tuple[Any, Any, torch.Tensor, torch.Tensor] | None = None

    def call(self, raw_b: Any, raw_bias: Any, transpose_b: bool) -> Product:
        """``h -> (h @ b + bias)^T`` for a contiguous [M, K] ``h``."""
        kept = self._kept
        if kept is None or kept[0] is not raw_b or kept[1] is not raw_bias:
            b = tensor(raw_b)
            weight = (b if transpose_b else b.T).contiguous()
            column = tensor(raw_bias).reshape(-1, 1).contiguous()
            kept = self._kept = (raw_b, raw_bias, weight, column)
        weight, column = kept[2], kept[3]

        def product(a: torch.Tensor) -> torch.Tensor:
            out = onednn_linear(weight, a.contiguous(), None)
            out += column
            return out

        return product


class _Layer:
    """One dense layer: its packed weight, its bias as a tensor, its activation."""

    __slots__ = ("activation", "alpha", "bias", "gemm", "transposed", "where")

    def __init__(self, where: str, transpose_b: bool, activation: str, alpha: float) -> None:
        self.where = where
        self.gemm = PackedWeight(transpose_b)
        self.bias = ConstantInput()
        self.transposed = _Transposed()
        self.activation = activation
        self.alpha = alpha

    def apply(
        self,
        ctx: OpKernelContext,
        h: Any,
        raw_b: Any,
        raw_bias: Any,
        threads: Any,
        may_transpose: bool = False,
    ) -> tuple[torch.Tensor, Product | None, bool]:
        """This layer's output (a torch tensor) from ``h`` (a numpy array or a tensor),
        the product it made as a function of the input, to be made again while the
        weight and bias are the same constants (None when they are not constants), and
        whether the output is the transpose (``may_transpose``: the last layer before a
        head, which can take it so; ``TRANSPOSED_HEAD_ROWS``)."""
        if isinstance(h, torch.Tensor):
            h = h.numpy()  # zero-copy: the same memory, so numpy's small path can take it
        errors = _LayerErrors(ctx, self.where)
        shape = matmul_shape(errors, h.shape, raw_b.shape, False, self.gemm.transpose_b)  # type: ignore[arg-type]
        check_bias(errors, raw_bias.shape, shape[1])
        constants = is_constant(raw_b) and is_constant(raw_bias)
        transposed = may_transpose and constants and self._on_transpose(h, raw_b, shape, threads)
        if transposed:
            use_threads(threads, ctx.device)
            product = self.transposed.call(raw_b, raw_bias, self.gemm.transpose_b)
        else:
            product = self._product(h, raw_b, raw_bias, shape, threads, ctx.device)
        out = product(tensor(h))
        if self.activation:
            apply_activation(self.activation, out, self.alpha)
        return out, product if constants else None, transposed

    def _on_transpose(self, h: Any, raw_b: Any, shape: Any, threads: Any) -> bool:
        """Whether the product goes on the transpose: oneDNN's path (not numpy's small
        one), many rows, few columns, nothing empty."""
        rows, columns = int(shape[0]), int(shape[1])
        return (
            self.gemm.library == ONEDNN
            and rows >= TRANSPOSED_HEAD_ROWS
            and 0 < columns < SHORT_ROW
            and h.shape[1] > 0
            and not for_numpy(h, raw_b, shape, threads)
        )

    def _product(
        self, h: Any, raw_b: Any, raw_bias: Any, shape: Any, threads: Any, device: Any
    ) -> Product:
        """The product with the bias: numpy's GEMM for small products, else the GEMM
        library's packed path, else torch's ordinary GEMM (``PackedMatMul``'s choice)."""
        weight = raw_b.T if self.gemm.transpose_b else raw_b
        if for_numpy(h, raw_b, shape, threads):

            def small(a: torch.Tensor) -> torch.Tensor:
                y = np.matmul(a.numpy(), weight)
                y += raw_bias
                return tensor(y)

            return small
        use_threads(threads, device)
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

    __slots__ = ("constants", "dtype", "kind", "products", "shape", "transposed")

    def __init__(
        self, x: Any, constants: list[Any], products: list[Product], transposed: bool
    ) -> None:
        self.kind = type(x)
        self.shape = x.shape
        self.dtype = x.dtype
        self.constants = constants
        self.products = products
        self.transposed = transposed

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
        head = self._head
        replay = self._replay
        if replay is not None and REPLAY and replay.matches(ctx, x):
            use_threads(threads, ctx.device)
            h = tensor(x)
            for product, layer in zip(replay.products, layers, strict=True):
                h = product(h)
                if layer.activation:
                    apply_activation(layer.activation, h, layer.alpha)
            transposed = replay.transposed
        else:
            if h.ndim != 2:
                raise ctx.fail(f"x must be a matrix, got shape {list(h.shape)}")
            products: list[Product] = []
            transposed = False
            for i, layer in enumerate(layers):
                h, made, transposed = layer.apply(
                    ctx,
                    h,
                    ctx.input(1 + i),
                    ctx.input(1 + count + i),
                    threads,
                    may_transpose=head is not None and i == count - 1,
                )
                if made is not None:
                    products.append(made)
            if len(products) == count:  # all on constants: the next step may replay them
                constants = [ctx.input(i) for i in range(1, 1 + 2 * count)]
                self._replay = _Replay(x, constants, products, transposed)
        if transposed:  # [N, M]: the head down its columns, copied back to [M, N]
            assert head is not None  # (only a layer before a head goes on the transpose)
            output(ctx, 0, (h.shape[1], h.shape[0])).copy_(head(h, 0).t())
        elif head is not None:  # into the device's buffer: the fetch needs no copy
            along_last_axis(head, h, output(ctx, 0, h.shape))
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
