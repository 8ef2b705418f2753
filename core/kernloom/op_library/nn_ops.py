"""Neural-network ops. dtypes: Relu, Relu6 and TopKV2 take ordered types; Sigmoid floating
and complex types; Softmax, LogSoftmax, Elu, Selu, LeakyRelu, Softplus and Softsign take
floating types (TensorFlow's lists without bfloat16)."""

from __future__ import annotations

import numpy as np

from kernloom import dtypes as d
from kernloom.framework.op_def import OpLibrary
from kernloom.framework.shape_inference import InferenceContext, unchanged_shape
from kernloom.op_library.types import FLOATS, INDEX, INEXACT, REALS, spec
from kernloom.shapes import TensorShape

__all__ = ["define"]


def _softmax_shape(ctx: InferenceContext) -> None:
    if ctx.input_shape(0).rank == 0:
        raise ctx.fail("logits must have rank >= 1 (softmax runs over the last dimension)")
    unchanged_shape(ctx)


def _top_k_shape(ctx: InferenceContext) -> None:
    shape, k_shape = ctx.input_shape(0), ctx.input_shape(1)
    if k_shape.rank not in (None, 0):
        raise ctx.fail(f"k must be a scalar, got shape {k_shape}")
    if shape.rank == 0:
        raise ctx.fail("input must have rank >= 1 (top k runs over the last dimension)")
    value = ctx.input_value(1)
    k = None if value is None else int(np.asarray(value))
    if k is not None and k < 0:
        raise ctx.fail(f"k must be >= 0, got {k}")
    if shape.rank is None:
        ctx.set_output(0, None)
        ctx.set_output(1, None)
        return
    last = shape[shape.rank - 1]
    if k is not None and last is not None and last < k:
        raise ctx.fail(f"input must have at least k columns: had {last}, needed {k}")
    out = TensorShape([*(shape.dims or ())[:-1], k])
    ctx.set_output(0, out)
    ctx.set_output(1, out)


def define(lib: OpLibrary) -> None:
    floats = spec(FLOATS)
    (
        lib.register_op("Relu")
        .input("features: T")
        .output("activations: T")
        .attr(f"T: {spec(REALS)}")
        .shape_fn(unchanged_shape)
        .doc(
            "max(features, 0).",
            "A subnormal reads as 0 on the CPU (flushed); TensorFlow's scalar tail (the "
            "elements after its last SIMD packet) returns it unchanged.",
        )
    )
    (
        lib.register_op("Sigmoid")
        .input("x: T")
        .output("y: T")
        .attr(f"T: {spec(INEXACT)}")
        .shape_fn(unchanged_shape)
        .doc(
            "1 / (1 + exp(-x)); complex too, as TensorFlow's CPU kernels (0 where exp(-x) "
            "has an infinite part, as C99 complex division gives)."
        )
    )
    (
        lib.register_op("Softmax")
        .input("logits: T")
        .output("softmax: T")
        .attr(f"T: {floats}")
        .shape_fn(_softmax_shape)
        .doc(
            "exp(logits) / sum(exp(logits)) over the last dimension.",
            "A row holding +inf or NaN is all NaN (TensorFlow's oneDNN kernel gives 0 beside "
            "the NaN of inf - inf, or of the NaN).",
        )
    )
    (
        lib.register_op("LogSoftmax")
        .input("logits: T")
        .output("logsoftmax: T")
        .attr(f"T: {floats}")
        .shape_fn(_softmax_shape)
        .doc("logits - log(sum(exp(logits))) over the last dimension.")
    )
    _define_activations(lib)


def _define_activations(lib: OpLibrary) -> None:
    """The activations real models need (issue 18), and TopKV2 (TF's nn_ops has it)."""

    def activation(name: str, types: str, doc: str) -> None:
        (
            lib.register_op(name)
            .input("features: T")
            .output("activations: T")
            .attr(f"T: {types}")
            .shape_fn(unchanged_shape)
            .doc(doc)
        )

    floats = spec(FLOATS)
    activation(
        "Relu6",
        spec(REALS),
        "min(max(features, 0), 6); NaN stays NaN. A subnormal reads as 0 on the CPU (as Relu); "
        "-0.0 stays -0.0 on the numpy kernel (TensorFlow's SIMD packets give +0.0).",
    )
    activation(
        "Elu",
        floats,
        "features where > 0, else exp(features) - 1, as expm1 (exact for tiny negatives, "
        "where TensorFlow's exp(x) - 1 gives 0).",
    )
    activation(
        "Selu",
        floats,
        "scale * features where > 0, else scale * alpha * (exp(features) - 1), with "
        "alpha = 1.6732632423543772 and scale = 1.0507009873554805 (TF's constants); "
        "exp(features) - 1 as expm1, as for Elu.",
    )
    activation(
        "Softplus",
        floats,
        "log(exp(features) + 1), computed without overflow (features itself for large "
        "features, exp(features) for very negative ones, as TF's thresholds do).",
    )
    activation("Softsign", floats, "features / (abs(features) + 1).")
    (
        lib.register_op("LeakyRelu")
        .input("features: T")
        .output("activations: T")
        .attr("alpha: float = 0.2")
        .attr(f"T: {floats} = float32")
        .shape_fn(unchanged_shape)
        .doc("features where features > 0, else alpha * features (for any alpha, as TF's kernel).")
    )
    (
        lib.register_op("TopKV2")
        .input("input: T")
        .input("k: Tk")
        .output("values: T")
        .output("indices: index_type")
        .attr("sorted: bool = true")
        .attr(f"T: {spec(REALS)}")
        .attr(f"Tk: {spec((d.int16, *INDEX))} = int32")
        .attr(f"index_type: {spec((d.int16, *INDEX))} = int32")
        .shape_fn(_top_k_shape)
        .doc(
            "The k largest values along the last dimension and their indices, largest "
            "first; equal values keep their order (the lower index first), as TF. NaN sorts "
            "above +inf (TF leaves NaN's place unspecified). With sorted=false TF may return "
            "any order; kernloom returns the sorted one."
        )
    )
