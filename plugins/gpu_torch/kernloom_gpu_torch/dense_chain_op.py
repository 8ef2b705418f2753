"""``_TorchDenseChain``: a chain of dense layers (``_FusedMatMul``: MatMul + BiasAdd [+
activation]), optionally ending in Softmax or LogSoftmax, as one node.

The torch plugin's own fused op, built only by its pass (``dense_chain_pass``) on the CPU.
Why a node of its own: on an MLP each of these nodes is one GEMM call and some Python,
and the Python between two GEMMs runs with the caches the GEMM just flushed -- the
executor's step, the kernel's checks and the move from one node to the next cost 3-4x
what they cost warm (``benchmarks/OPTIMIZER.md``). One node runs the layers back to back.

Inputs: ``x``, then the ``N`` weights, then the ``N`` biases; layer ``i`` computes
``activation_i(h @ w_i + b_i)`` (``w_i`` transposed where ``transpose_b[i]``), and ``head``
("", ``Softmax`` or ``LogSoftmax``) is applied to the last layer's output along its last
axis. ``layers`` names the ``_FusedMatMul`` node each layer was, for errors.
"""

from __future__ import annotations

from typing import Final

from kernloom.plugin import FUSED_ACTIVATIONS, InferenceContext, Registrar, TensorShape

__all__ = ["HEADS", "OP", "define"]

OP: Final = "_TorchDenseChain"
HEADS: Final = ("", "Softmax", "LogSoftmax")


def define(registry: Registrar) -> None:
    (
        registry.register_op(OP)
        .input("x: T")
        .input("weights: N * T")
        .input("biases: N * T")
        .output("y: T")
        .attr("T: {float32}")
        .attr("N: int >= 1")
        .attr("transpose_b: list(bool)")
        .attr("activations: list(string)")
        .attr("leakyrelu_alphas: list(float)")
        .attr("head: string = ''")
        .attr("layers: list(string)")
        .shape_fn(_shape)
        .doc(
            "Dense layers (MatMul + BiasAdd [+ activation]) back to back, then an optional "
            "Softmax/LogSoftmax; built by the torch plugin's torch_dense_chain pass."
        )
    )


def _shape(ctx: InferenceContext) -> None:
    n = int(ctx.attr("N"))
    lists = {
        name: list(ctx.attr(name))
        for name in ("transpose_b", "activations", "leakyrelu_alphas", "layers")
    }
    for name, values in lists.items():
        if len(values) != n:
            raise ctx.fail(f"{name} has {len(values)} entries for {n} layers")
    for activation in lists["activations"]:
        if activation and activation not in FUSED_ACTIVATIONS:
            raise ctx.fail(
                f"activation {activation!r} is not one of {', '.join(FUSED_ACTIVATIONS)}"
            )
    head = str(ctx.attr("head"))
    if head not in HEADS:
        raise ctx.fail(f"head {head!r} is not one of '', 'Softmax', 'LogSoftmax'")
    h = ctx.input_shape(0)
    if h.rank not in (2, None):
        raise ctx.fail(f"x must be a matrix, got shape {h}")
    rows = None if h.rank is None else h[0]
    inner = None if h.rank is None else h[1]
    for i in range(n):
        w, bias = ctx.input_shape(1 + i), ctx.input_shape(1 + n + i)
        where = f"layer {i + 1} ({lists['layers'][i]})"
        if w.rank not in (2, None) or bias.rank not in (1, None):
            raise ctx.fail(f"{where}: needs a matrix weight and a vector bias, got {w}, {bias}")
        k = None if w.rank is None else w[1 if lists["transpose_b"][i] else 0]
        cols = None if w.rank is None else w[0 if lists["transpose_b"][i] else 1]
        if inner is not None and k is not None and inner != k:
            raise ctx.fail(f"{where}: inner dimensions differ: {inner} vs {k}")
        channels = None if bias.rank is None else bias[0]
        if cols is not None and channels is not None and cols != channels:
            raise ctx.fail(f"{where}: bias has {channels} values for {cols} columns")
        inner = cols if cols is not None else channels
    ctx.set_output(0, TensorShape([rows, inner]))
