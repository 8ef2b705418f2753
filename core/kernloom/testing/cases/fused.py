"""Reference cases: the graph optimizer's fused ops (``_FusedElementwise``,
``_FusedMatMul``, ``_FusedConv2D``), so that every plugin's fused kernels are checked
against the same table as its other kernels.

References evaluate the unfused formula in float64 with numpy (the convolution by
``nn.conv2d_reference``'s direct loops), never a fused kernel's blocking or in-place code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.testing.cases.case import Array, Case, sample
from kernloom.testing.cases.nn import conv2d_reference

__all__ = ["cases"]

_NUMPY: dict[str, Callable[..., Array]] = {
    "Add": np.add,
    "AddV2": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "RealDiv": np.true_divide,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Neg": np.negative,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Square": np.square,
    "Tanh": np.tanh,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Relu": lambda x: np.maximum(x, 0),
}
_ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "": lambda z: z,
    "Relu": lambda z: np.maximum(z, 0),
    "Relu6": lambda z: np.clip(z, 0, 6),
    "Elu": lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0))),
    "LeakyRelu": lambda z: np.where(z > 0, z, 0.2 * z),
}


def _expression_reference(steps: list[tuple[str, list[str]]], dtype: Any) -> Any:
    def reference(inputs: list[Array]) -> Array:
        values: list[Array] = []
        for op, operands in steps:
            args = [
                inputs[int(a[1:])].astype(np.float64) if a[0] == "i" else values[int(a[1:])]
                for a in operands
            ]
            values.append(_NUMPY[op](*args))
        shape = np.broadcast_shapes(*(x.shape for x in inputs))
        return np.broadcast_to(values[-1], shape).astype(dtype)

    return reference


_EXPRESSIONS: list[tuple[str, list[tuple[str, list[str]]], list[tuple[int, ...]]]] = [
    ("add-relu", [("Add", ["i0", "i1"]), ("Relu", ["t0"])], [(3, 4), (3, 4)]),
    (
        "chain-broadcast-reuse",
        [
            ("Mul", ["i0", "i1"]),
            ("Sigmoid", ["t0"]),
            ("Sub", ["t1", "i2"]),
            ("Square", ["t2"]),
            ("Maximum", ["t3", "t0"]),
            ("Tanh", ["t4"]),
            ("Neg", ["t5"]),
        ],
        [(4, 5), (5,), ()],
    ),
    (
        "blocked-rows",  # more elements than one block: evaluated a block of rows at a time
        [("RealDiv", ["i0", "i1"]), ("AddV2", ["t0", "i2"]), ("Minimum", ["t1", "i0"])],
        [(70, 300), (70, 1), (1, 300)],
    ),
    (
        "leading-one",
        [("Exp", ["i0"]), ("Mul", ["t0", "i1"]), ("Sqrt", ["i1"]), ("Add", ["t1", "t2"])],
        [(1, 40000), (1, 40000)],
    ),
    ("log-empty", [("Log", ["i0"]), ("Sub", ["t0", "i1"])], [(0, 3), (3,)]),
    ("scalar", [("Square", ["i0"]), ("Add", ["t0", "i0"])], [()]),
]


def _elementwise_cases() -> Iterator[Case]:
    for dtype in (kl.float16, kl.float32, kl.float64):
        for name, steps, shapes in _EXPRESSIONS:
            positive = any(op in ("Log", "Sqrt", "RealDiv") for op, _ in steps)
            inputs = [sample(s, dtype, positive=positive, small=True) for s in shapes]
            expression = "; ".join(f"{op}({', '.join(args)})" for op, args in steps)
            yield Case(
                "_FusedElementwise",
                [inputs],
                {"expression": expression},
                reference=_expression_reference(steps, dtype.numpy_dtype),
                id=f"_FusedElementwise-{name}-{dtype}",
            )


def _matmul_cases() -> Iterator[Case]:
    for dtype in (kl.float32, kl.float64):
        for activation in _ACTIVATIONS:
            for ta, tb in ((False, False), (True, False), (False, True)):
                a = sample((4, 3) if ta else (3, 4), dtype, small=True)
                b = sample((5, 4) if tb else (4, 5), dtype, small=True)
                bias = sample((5,), dtype, small=True)

                def reference(
                    a: Array,
                    b: Array,
                    args: list[Array],
                    ta: bool = ta,
                    tb: bool = tb,
                    act: str = activation,
                ) -> Array:
                    x, y = a.astype(np.float64), b.astype(np.float64)
                    z = (x.T if ta else x) @ (y.T if tb else y) + args[0]
                    return _ACTIVATIONS[act](z).astype(a.dtype)

                yield Case(
                    "_FusedMatMul",
                    [a, b, [bias]],
                    {
                        "transpose_a": ta,
                        "transpose_b": tb,
                        "fused_ops": ["BiasAdd"] + ([activation] if activation else []),
                    },
                    reference=reference,
                    id=f"_FusedMatMul-{activation or 'bias'}-{int(ta)}{int(tb)}-{dtype}",
                )


def _conv_cases() -> Iterator[Case]:
    for data_format in ("NHWC", "NCHW"):
        for activation in _ACTIVATIONS:
            attrs: dict[str, Any] = {
                "strides": [1, 1, 1, 1],
                "padding": "SAME",
                "data_format": data_format,
            }
            x = sample((1, 4, 5, 3) if data_format == "NHWC" else (1, 3, 4, 5), kl.float32)
            f = sample((2, 3, 3, 2), kl.float32, small=True)
            bias = sample((2,), kl.float32)
            conv = conv2d_reference(attrs)
            channel = 3 if data_format == "NHWC" else 1

            def reference(
                x: Array,
                f: Array,
                args: list[Array],
                conv: Any = conv,
                channel: int = channel,
                act: str = activation,
            ) -> Array:
                z = conv(x.astype(np.float64), f.astype(np.float64))
                shape = [-1 if i == channel else 1 for i in range(4)]
                return _ACTIVATIONS[act](z + args[0].reshape(shape)).astype(x.dtype)

            yield Case(
                "_FusedConv2D",
                [x, f, [bias]],
                {**attrs, "fused_ops": ["BiasAdd"] + ([activation] if activation else [])},
                reference=reference,
                id=f"_FusedConv2D-{activation or 'bias'}-{data_format}",
            )


def _residual_conv_cases() -> Iterator[Case]:
    """``BiasAdd, Add [, activation]``: the residual summed after the bias, before the
    activation; stride 2 and VALID padding too, where the output is smaller than the
    input."""
    for data_format in ("NHWC", "NCHW"):
        for activation in ("", "Relu", "LeakyRelu"):
            for stride, padding in ((1, "SAME"), (2, "VALID")):
                strides = (
                    [1, stride, stride, 1] if data_format == "NHWC" else [1, 1, stride, stride]
                )
                attrs: dict[str, Any] = {
                    "strides": strides,
                    "padding": padding,
                    "data_format": data_format,
                }
                x = sample((2, 5, 6, 3) if data_format == "NHWC" else (2, 3, 5, 6), kl.float32)
                f = sample((3, 3, 3, 4), kl.float32, small=True)
                conv = conv2d_reference(attrs)
                out = conv(x.astype(np.float64), f.astype(np.float64))
                channel = 3 if data_format == "NHWC" else 1

                def reference(
                    x: Array,
                    f: Array,
                    args: list[Array],
                    conv: Any = conv,
                    channel: int = channel,
                    act: str = activation,
                ) -> Array:
                    z = conv(x.astype(np.float64), f.astype(np.float64))
                    bias, residual = args[0].astype(np.float64), args[1].astype(np.float64)
                    shape = [-1 if i == channel else 1 for i in range(4)]
                    return _ACTIVATIONS[act](z + bias.reshape(shape) + residual).astype(x.dtype)

                fused_ops = ["BiasAdd", "Add"] + ([activation] if activation else [])
                yield Case(
                    "_FusedConv2D",
                    [x, f, [sample((4,), kl.float32), sample(out.shape, kl.float32)]],
                    {**attrs, "fused_ops": fused_ops, "num_args": 2},
                    reference=reference,
                    id=f"_FusedConv2D-add-{activation or 'none'}-{data_format}-s{stride}",
                    declared=("fused_ops",),
                )


def cases() -> Iterator[Case]:
    yield from _elementwise_cases()
    yield from _matmul_cases()
    yield from _conv_cases()
    yield from _residual_conv_cases()
