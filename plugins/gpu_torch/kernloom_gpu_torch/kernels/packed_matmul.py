"""MatMul and ``_FusedMatMul`` on the numpy CPU device for float32: a GEMM library's
fastest path on a weight packed once into its own layout when the right operand is a
constant -- MKL's packed sgemm (``torch.ops.mkl._mkl_linear``, what inductor's CPU freezing
emits for a linear layer) on Intel's CPUs, oneDNN's inner product
(``torch.ops.mkldnn._linear_pointwise`` on a reordered weight) on every other CPU.

Packing pays once what an ordinary GEMM pays on every call (copying the weight into the
kernel's panels): on the MLP of ``benchmarks/OPTIMIZER.md`` it is the difference between
MKL's plain ``addmm`` and ONNX Runtime's MLAS. Which library: MKL's packed GEMM ran at
MLAS's speed on the Intel machine it was measured on; on an AMD EPYC (AVX-512) MKL ran at
half of it and oneDNN at MLAS's (256x1024 by 1024x1024, one thread: MKL 5.2-5.3 ms packed
or not, OpenBLAS 4.4, oneDNN 2.4, ONNX Runtime's Gemm 2.2). The cache follows
``onednn``'s rule: only a read-only host array (the CPU device's constants; a feed is a new
view each run), only while the same array object comes back, held by the entry. A
variable's or fed weight, or one computed in the graph, runs the library's ordinary GEMM
(MKL's ``addmm``, oneDNN on the unpacked weight) into the output buffer. The bias is
added by the GEMM; the activation runs in place on its result (NaN stays NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import torch

from kernloom.plugin import (
    KernelLibrary,
    OpKernel,
    OpKernelConstruction,
    OpKernelContext,
    check_bias,
    matmul_shape,
    parse_fused_ops,
)
from kernloom.plugin import types as t
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
from kernloom_gpu_torch.kernels.conv import CPU_PRIORITY
from kernloom_gpu_torch.kernels.fused import activate

__all__ = [
    "PackedFusedMatMul",
    "PackedMatMul",
    "PackedWeight",
    "Product",
    "for_numpy",
    "onednn_linear",
    "register",
]

CPU_LABEL: Final = "torch"

MKL: Final = "mkl"
ONEDNN: Final = "onednn"
PLAIN: Final = "plain"
"""Neither packed path: torch's ``addmm`` on whatever BLAS torch was built with (a build
without MKL and oneDNN, e.g. some ARM wheels)."""


def _cpu_vendor() -> str:
    """The CPU's vendor id as Linux reports it (``GenuineIntel``, ``AuthenticAMD``), or ""
    where there is no ``/proc/cpuinfo`` to read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def _torch_op(namespace: str, name: str) -> Any:
    """``torch.ops.<namespace>.<name>``, or None where this torch build lacks it."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


_linear_pointwise: Final[Any] = _torch_op("mkldnn", "_linear_pointwise")
_reorder_linear_weight: Final[Any] = _torch_op("mkldnn", "_reorder_linear_weight")
_mkl_linear: Final[Any] = _torch_op("mkl", "_mkl_linear")
_mkl_reorder_linear_weight: Final[Any] = _torch_op("mkl", "_mkl_reorder_linear_weight")


HAS_ONEDNN: Final = (
    _linear_pointwise is not None
    and _reorder_linear_weight is not None
    and bool(torch.backends.mkldnn.is_available())  # type: ignore[no-untyped-call]
)


def onednn_linear(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's inner product ``a @ weight.T + bias`` (``weight`` [N, K], packed by
    ``_reorder_linear_weight`` or plain; ``a`` [M, K] contiguous)."""
    out: torch.Tensor = _linear_pointwise(a, weight, bias, "none", [], "")
    return out


def _gemm_library() -> str:
    """MKL on Intel's CPUs where torch was built with it, oneDNN everywhere else (MKL's
    kernels for other vendors' CPUs ran at half speed; module docstring); ``PLAIN`` where
    this torch has neither packed path."""
    has_mkl = _mkl_linear is not None and _mkl_reorder_linear_weight is not None
    if has_mkl and _cpu_vendor() == "GenuineIntel":
        return MKL
    if HAS_ONEDNN:
        return ONEDNN
    return MKL if has_mkl else PLAIN


GEMM_LIBRARY: str = _gemm_library()
"""The library products above ``SMALL_PRODUCT`` run in; read when a kernel is built (a
test sets it to run each path)."""
PRIORITY: Final = CPU_PRIORITY + 1
"""Above numpy's 0 and the general torch CPU kernels' ``CPU_PRIORITY`` (``fused``'s
``_FusedMatMul``, which keeps float64)."""


MIN_PACKED_ROWS: Final = 8
"""On the MKL path, fewer rows than this run oneDNN (MKL's plain GEMM where torch lacks
oneDNN): a matrix-vector product in MKL, packed or not, or in numpy's OpenBLAS sums columns
in different orders on Intel's AVX-512 CPUs (equal columns of a huge-valued product came out
unequal, which turned the uniform softmax of onnx's light ResNet-50 into a one-hot one, at 1
thread and at 16 on a Sapphire Rapids Xeon); oneDNN's column blocks sum alike there and on
AMD's CPUs."""


PACKED_FOR_ROWS: Final = 64
"""The fewest rows oneDNN packs a weight for: the format it picks for fewer rows is slow for
others, and a constant weight is packed once, for the first call's rows (1024x1024, one
thread, against the best packing for the rows: packed for 1 row, 4 and 8 rows took 2.19x
and 1.84x, 1 row 1.05x; packed for 64, 1.00-1.02x at 1 to 1000 rows;
``benchmarks/bench_pack_hint.py``, ``benchmarks/OPTIMIZER.md``)."""


SMALL_PRODUCT: Final = 1 << 22
"""Products of fewer multiply-adds (M * N * K) than this run numpy's GEMM: torch's call
overhead outweighs them (numpy was faster up to 160x160x160, level at 256, slower at
512, one thread each; benchmarks/OPTIMIZER.md)."""


TINY_PRODUCT: Final = 1 << 16
"""With more than one intra-op thread only products under this many multiply-adds take
numpy's GEMM: OpenBLAS's threads spin after a product and starve the OpenMP threads of the
next torch one (the MLP at 2 threads: 24 ms with its 256x1024x10 layer in OpenBLAS, 3.4
ms with OpenBLAS held to one thread)."""


NARROW: Final = 64
"""A product with fewer output columns than this, and more than ``TINY_PRODUCT``
multiply-adds, runs MKL's plain GEMM (``addmm``): neither packing nor OpenBLAS pays for a
narrow output. The MLP's 256x1024x10 classifier, right after a 256x1024x1024 product
(median of 41, one thread): ``addmm`` 97-101 µs, numpy's OpenBLAS 146-150, MKL packed
187-200; two threads: 118 / 2,400 (OpenBLAS's spinning, above) / 114. On the oneDNN
path a narrow output takes oneDNN like any other (that layer on the AMD machine: oneDNN
77 µs, numpy 76, ``addmm`` 130)."""


NARROW_FOR_NUMPY: Final = 1 << 20
"""On the oneDNN path and one thread, a ``NARROW`` product of fewer multiply-adds than this
runs numpy's GEMM: oneDNN's call costs 11-12 µs before any work (one thread, µs, numpy /
oneDNN packed: 1x1024x10 2.4 / 13.1, 16x1024x10 7.2 / 15.9, 64x1024x10 20.6 / 27.9, 256x1024x1
11.7 / 24.8; from about a million on, oneDNN: 64x512x32 20.7 / 19.5, 64x2048x16 43.7 /
33.0, 256x512x32 75.9 / 45.6). The MKL path keeps MKL's ``addmm`` for these (numpy's
OpenBLAS was slower there)."""


def for_numpy(a: Any, b: Any, shape: Any, threads: int | None) -> bool:
    """Whether the product is for numpy: host arrays, M * N * K (``a``'s size times N)
    under ``TINY_PRODUCT``; on one thread, under ``SMALL_PRODUCT`` unless the output is
    ``NARROW`` (on the oneDNN path, a narrow one under ``NARROW_FOR_NUMPY`` too)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    product = a.size * int(shape[1])
    if product < TINY_PRODUCT:
        return True
    if _one_row_library(GEMM_LIBRARY, int(shape[0])) != GEMM_LIBRARY:
        return False
    if threads != 1 or product >= SMALL_PRODUCT:
        return False
    return int(shape[1]) >= NARROW or (GEMM_LIBRARY == ONEDNN and product < NARROW_FOR_NUMPY)


def _one_row_library(library: str, rows: int) -> str:
    """The library a product of ``rows`` rows runs in: oneDNN for a few rows on the MKL
    path (``MIN_PACKED_ROWS``), ``library`` otherwise."""
    if library == MKL and rows < MIN_PACKED_ROWS and HAS_ONEDNN:
        return ONEDNN
    return library


Product = Callable[[torch.Tensor], torch.Tensor]
"""One product's library call with everything but the left operand bound."""


class _Packed:
    """A constant weight in the GEMM library's packed layout, with the array it came from
    (held, so that its identity stays unique) and, for MKL, the [N, K] weight it reads
    beside it (for a row count other than the packed one); oneDNN needs only its own."""

    __slots__ = ("library", "original", "packed", "source")

    def __init__(
        self, source: Any, library: str, original: torch.Tensor | None, packed: torch.Tensor
    ) -> None:
        self.source = source
        self.library = library
        self.original = original
        self.packed = packed


class PackedWeight:
    """One product's right operand in the GEMM library's fast path: packed once while it
    is the same constant (``_weights``), the library's ordinary call otherwise. A kernel
    holds one per product it runs (``PackedMatMul``; each layer of a dense chain)."""

    __slots__ = ("_packed", "library", "transpose_b")

    def __init__(self, transpose_b: bool) -> None:
        self.transpose_b = transpose_b
        self.library = GEMM_LIBRARY
        self._packed: _Packed | None = None

    def product(
        self, a: torch.Tensor, raw_b: Any, bias: torch.Tensor | None, shape: Any
    ) -> torch.Tensor | None:
        """The product (with the bias) in the library's fast path, or None for ``_plain``
        (``call``'s cases)."""
        call = self.call(raw_b, bias, shape)
        return None if call is None else call(a)

    def call(self, raw_b: Any, bias: torch.Tensor | None, shape: Any) -> Product | None:
        """The library's fast path for this weight, bias and shape as a function of the
        left operand (packing the weight first if it is a new constant), for ``product``
        and for a caller that keeps it to call again; None for ``_plain``: empty products
        (oneDNN refuses them), and on the MKL path what is not packed."""
        rows = int(shape[0])
        if 0 in shape or 0 in raw_b.shape:
            return None
        library = _one_row_library(self.library, rows)
        if library == ONEDNN:
            packed = self._weights(raw_b, rows, library)
            if packed is not None:
                weight = packed.packed
            else:
                b = tensor(raw_b)
                weight = b if self.transpose_b else b.T
            return lambda a: _linear_pointwise(a, weight, bias, "none", [], "")
        if library == MKL and rows >= MIN_PACKED_ROWS and int(shape[1]) >= NARROW:
            packed = self._weights(raw_b, rows, library)
            if packed is not None:
                weights = packed.packed, packed.original
                return lambda a: _mkl_linear(a, *weights, bias, rows)
        return None

    def _weights(self, raw_b: Any, rows: int, library: str) -> _Packed | None:
        """The constant weight packed for ``library`` (from the cache, or packed now), or
        None when ``b`` may change between runs."""
        packed = self._packed
        if packed is not None and packed.source is raw_b and packed.library == library:
            return packed
        if not is_constant(raw_b) or raw_b.ndim != 2 or 0 in raw_b.shape:
            return None
        b = tensor(raw_b)
        original = (b if self.transpose_b else b.T).contiguous()  # [N, K]
        if library == ONEDNN:
            packed = _Packed(
                raw_b, library, None, _reorder_linear_weight(original, max(rows, PACKED_FOR_ROWS))
            )
        else:
            packed = _Packed(raw_b, library, original, _mkl_reorder_linear_weight(original, rows))
        self._packed = packed
        return packed


class PackedMatMul(OpKernel):
    """MatMul: ``a @ b`` with ``b`` packed when constant."""

    fused = False
    intra_op_parallel = True

    def __init__(self, ctx: OpKernelConstruction) -> None:
        super().__init__(ctx)
        self._transpose_a = bool(ctx.attr("transpose_a"))
        self._transpose_b = bool(ctx.attr("transpose_b"))
        fused_ops = ctx.attr("fused_ops") if self.fused else ["BiasAdd"]
        self._activation = parse_fused_ops(fused_ops, residual_allowed=False).activation
        self._gemm = PackedWeight(self._transpose_b)
        self._bias_input = ConstantInput()
        self._device: object = None
        self._threads: int | None = None

    def compute(self, ctx: OpKernelContext) -> None:
        raw_a, raw_b = ctx.input(0), ctx.input(1)
        shape = matmul_shape(ctx, raw_a.shape, raw_b.shape, self._transpose_a, self._transpose_b)
        if ctx.device is not self._device:  # (a kernel stays on its device: read once)
            self._threads = intra_op_threads(ctx)
            self._device = ctx.device
        if for_numpy(raw_a, raw_b, shape, self._threads):
            self._small_product(ctx, raw_a, raw_b, shape)
            return
        use_threads(self._threads, ctx.device)
        a = tensor(raw_a)
        bias = self._bias(ctx, shape[1])
        a = a.T if self._transpose_a else a
        y = self._gemm.product(a, raw_b, bias, shape)
        if y is None:
            self._plain(ctx, a, tensor(raw_b), bias, shape)
            return
        activate(self._activation, y, ctx)
        result(ctx, 0, y)

    def _plain(
        self, ctx: OpKernelContext, a: Any, b: Any, bias: torch.Tensor | None, shape: Any
    ) -> None:
        """torch's ordinary GEMM (``addmm``, MKL's where torch has it) into the output
        buffer: empty products, on the MKL path what is not packed, and every product on
        the ``PLAIN`` path."""
        out = output(ctx, 0, shape)
        weight = b.T if self._transpose_b else b
        if bias is None:
            torch.matmul(a, weight, out=out)
        else:
            torch.addmm(bias, a, weight, out=out)
        activate(self._activation, out, ctx)

    def _small_product(self, ctx: OpKernelContext, a: Any, b: Any, shape: Any) -> None:
        """numpy's GEMM straight into the output: below ``SMALL_PRODUCT`` a torch call
        costs more than the product (8 µs a node on 4x4 to 32x32 MatMuls)."""
        out = ctx.allocate_output(0, tuple(int(d) for d in shape))
        np.matmul(a.T if self._transpose_a else a, b.T if self._transpose_b else b, out=out)
        if self.fused:
            bias = ctx.input(2)
            check_bias(ctx, bias.shape, out.shape[1])
            out += bias
        if self._activation == "Relu":
            np.maximum(out, 0, out=out)  # NaN stays NaN
        elif self._activation:
            activate(self._activation, tensor(out), ctx)

    def _bias(self, ctx: OpKernelContext, columns: int) -> torch.Tensor | None:
        return None


class PackedFusedMatMul(PackedMatMul):
    """``_FusedMatMul`` (MatMul + BiasAdd [+ activation])."""

    fused = True

    def _bias(self, ctx: OpKernelContext, columns: int) -> torch.Tensor | None:
        bias = self._bias_input.get(ctx.input(2))
        check_bias(ctx, bias.shape, columns)
        return bias


def register(lib: KernelLibrary) -> None:
    """MatMul and ``_FusedMatMul`` on the CPU for float32: labelled ``torch`` and, as the
    CPU default, above numpy's kernels."""
    f32: dict[str, Any] = {"T": tuple(dt for dt in t.FLOATS if dt.name == "float32")}
    for op, kernel in (("MatMul", PackedMatMul), ("_FusedMatMul", PackedFusedMatMul)):
        for keywords in ({"label": CPU_LABEL, "priority": 1}, {"priority": PRIORITY}):
            cpu_kernel(lib, op, kernel, type_constraints=f32, **keywords)
