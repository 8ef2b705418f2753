"""Run one ``DiffCase`` in kernloom and in TensorFlow, in the static or the dynamic mode,
and compare the outcomes: both raise, or both return the same values.

TensorFlow runs in a TF1 graph session with grappler off (``disable_meta_optimizer``), so
no constant folding or layout pass stands between the op and its CPU kernel; its shape
functions run as the graph is built, as kernloom's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import kernloom as kl
from kernloom.graph.builder import apply_op
from tf_diff.grid import Array, DiffCase

__all__ = ["Outcome", "compare", "run_kernloom", "run_tensorflow"]


@dataclass
class Outcome:
    values: list[Array] | None = None
    error: str = ""


def _flat(inputs: list[Any]) -> list[Any]:
    return [v for item in inputs for v in (item if isinstance(item, list) else [item])]


def run_kernloom(case: DiffCase, dynamic: bool) -> Outcome:
    graph = kl.Graph()
    feeds: dict[kl.Tensor, Any] = {}

    def tensor(value: Any, host: bool) -> kl.Tensor:
        array = np.asarray(value)
        if host and not dynamic:
            return kl.constant(array)
        shape = None if dynamic else list(array.shape)
        t = kl.placeholder(kl.as_dtype(array.dtype), shape)
        feeds[t] = array
        return t

    try:
        with graph.as_default():
            args: list[Any] = []
            for i, item in enumerate(case.inputs):
                host = i in case.host
                args.append(
                    [tensor(v, host) for v in item]
                    if isinstance(item, list)
                    else tensor(item, host)
                )
            attrs = {k: _kl_attr(v) for k, v in case.attrs.items()}
            out = apply_op(case.op, args, attrs, name="op")
        with kl.Session(graph) as session:
            if isinstance(out, kl.Node):  # no outputs (Assert): run it as a target
                session.run([], feeds, targets=[out])
                return Outcome(values=[])
            fetches = list(out) if isinstance(out, tuple) else [out]
            values = session.run(fetches, feeds)
        return Outcome(values=[np.asarray(v) for v in values])
    except kl.KernloomError as exc:
        return Outcome(error=f"{type(exc).__name__}: {exc}")


def _kl_attr(value: Any) -> Any:
    if isinstance(value, np.dtype):
        return kl.as_dtype(value)
    if value is None:
        return kl.TensorShape(None)
    return value


def run_tensorflow(case: DiffCase, dynamic: bool) -> Outcome:
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.framework import op_def_library, op_def_registry

    graph = tf.Graph()
    feeds: dict[Any, Any] = {}

    def tensor(value: Any, host: bool) -> Any:
        array = np.asarray(value)
        if host and not dynamic:
            return tf.constant(array)
        shape = None if dynamic else list(array.shape)
        t = tf.compat.v1.placeholder(tf.as_dtype(array.dtype), shape)
        feeds[t] = array
        return t

    config = config_pb2.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    try:
        with graph.as_default():
            keywords: dict[str, Any] = {}
            op_def = op_def_registry.get(case.op)
            for i, (arg, item) in enumerate(zip(op_def.input_arg, case.inputs, strict=True)):
                host = i in case.host
                keywords[arg.name] = (
                    [tensor(v, host) for v in item]
                    if isinstance(item, list)
                    else tensor(item, host)
                )
            inferred = {a.type_attr for a in op_def.input_arg if a.type_attr}
            for key, value in case.attrs.items():
                if key not in inferred:  # TF infers these from the inputs, as kernloom does
                    keywords[key] = tf.as_dtype(value) if isinstance(value, np.dtype) else value
            for attr in op_def.attr:  # the generated wrappers pass every defaulted attr
                if attr.name not in keywords and attr.HasField("default_value"):
                    default = _default(attr.default_value)
                    if default is not None:
                        keywords[attr.name] = default
            _, _, op, _ = op_def_library._apply_op_helper(case.op, name="op", **keywords)
            fetches = list(op.outputs)
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            values = session.run(fetches or op, feeds)  # no outputs (Assert): the op itself
        if not fetches:
            return Outcome(values=[])
        return Outcome(values=[np.asarray(v) for v in values])
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        return Outcome(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


def _default(value: Any) -> Any:
    """A defaulted non-type attr's value, as the Python wrappers pass it."""
    kind = value.WhichOneof("value")
    if kind in ("b", "i", "f"):
        return getattr(value, kind)
    if kind == "s":
        return value.s.decode()
    if kind == "list":
        return list(value.list.i) or [s.decode() for s in value.list.s]
    return None


LINALG_TOLERANCE = {
    np.dtype(np.float32): (2e-5, 2e-6),
    np.dtype(np.complex64): (2e-5, 2e-6),
    np.dtype(np.float64): (1e-12, 1e-13),
    np.dtype(np.complex128): (1e-12, 1e-13),
}
"""Factorisations (DiffCase.factorised): Eigen's blocked LU, Cholesky and substitution
sum in another order than LAPACK's, so elements near zero differ by more than a few ulps
of themselves; the tolerance is relative to the matrices' entries (all of order 1)."""


def _tolerance(dtype: np.dtype[Any], approximate: bool) -> tuple[float, float]:
    """Exact, except for transcendental functions and complex arithmetic (whose products
    and quotients Eigen and numpy round differently: a few ulps, more under cancellation)."""
    if dtype.kind == "c":
        return {np.dtype(np.complex64): (1e-5, 1e-6), np.dtype(np.complex128): (1e-13, 1e-15)}[
            np.dtype(dtype)
        ]
    if not approximate:
        return 0.0, 0.0
    return {
        np.dtype(np.float16): (2e-3, 1e-4),
        np.dtype(np.float32): (2e-6, 1e-30),
        np.dtype(np.float64): (1e-13, 1e-300),
    }.get(np.dtype(dtype), (0.0, 0.0))


def _flushed(x: Array) -> Array:
    """``x`` with subnormals flushed to zero, as TensorFlow's CPU kernels leave them."""
    if x.dtype.kind != "f":
        return x
    tiny = np.finfo(x.dtype).tiny
    return np.where((x != 0) & (np.abs(x) < tiny), np.zeros_like(x), x)


def _same(a: Array, b: Array, approximate: bool, factorised: bool = False) -> str:
    if a.shape != b.shape:
        return f"shape {a.shape} vs TF {b.shape}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs TF {b.dtype}"
    if a.dtype.kind in "fc":
        parts = (a.real, b.real, a.imag, b.imag) if a.dtype.kind == "c" else (a, b)
        for x, y in zip(parts[::2], parts[1::2], strict=True):
            if not np.array_equal(np.isnan(x), np.isnan(y)):
                return f"NaN at other places: {a.ravel()[:6]} vs TF {b.ravel()[:6]}"
            rtol, atol = (
                LINALG_TOLERANCE.get(np.dtype(a.dtype), (0.0, 0.0))
                if factorised
                else _tolerance(a.dtype, approximate)
            )
            finite = ~np.isnan(x)
            if not np.allclose(x[finite], y[finite], rtol=rtol, atol=atol, equal_nan=False):
                if np.allclose(_flushed(x)[finite], y[finite], rtol=rtol, atol=atol):
                    return f"subnormal result: kernloom {x.ravel()[:4]} vs TF {y.ravel()[:4]}"
                bad = np.flatnonzero(~np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
                i = int(bad[0])
                return f"value at {i}: {x.ravel()[i]!r} vs TF {y.ravel()[i]!r}"
        return ""
    if not np.array_equal(a, b):
        bad = np.flatnonzero(a.ravel() != b.ravel())
        i = int(bad[0]) if bad.size else 0
        return f"value at {i}: {a.ravel()[i]!r} vs TF {b.ravel()[i]!r}"
    return ""


def compare(case: DiffCase, ours: Outcome, theirs: Outcome) -> str:
    """'' when the outcomes agree, else what differs."""
    if ours.error or theirs.error:
        if ours.error and theirs.error:
            return ""
        return f"kernloom: {ours.error or 'values'}; TF: {theirs.error or 'values'}"
    assert ours.values is not None and theirs.values is not None
    if len(ours.values) != len(theirs.values):
        return f"{len(ours.values)} outputs vs TF {len(theirs.values)}"
    for a, b in zip(ours.values, theirs.values, strict=True):
        why = _same(a, b, case.approximate, case.factorised)
        if why:
            return why
    return ""
