"""The generated op wrappers: ``kl.ops.mat_mul``, ``kl.ops.conv2d``, ``kl.ops.top_kv2``.

One function per public op, named as TensorFlow's generated Python names them, with the
op's real signature and docstring (``help(kl.ops.mat_mul)``). The standard ops' wrappers
need no plugin; a name that is not a standard op is looked up in the default registry,
so that ops a plugin defines (``zero_out``) get wrappers too.

Besides them, a few functions of TensorFlow's Python API that fill in an op's arguments
(``non_max_suppression``, ``tf.image.non_max_suppression``) are written here by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kernloom.errors import did_you_mean
from kernloom.framework.op_def import OpDef, OpRegistry
from kernloom.graph.builder import make_wrapper
from kernloom.graph.graph import wrapper_name
from kernloom.op_library import standard_ops
from kernloom.registry import default_registry

__all__ = ["non_max_suppression", "wrapper"]

_lock = threading.Lock()
_wrappers: dict[int, Callable[..., Any]] = {}


def wrapper(op_def: OpDef) -> Callable[..., Any]:
    """The generated Python function for an op (cached per definition)."""
    with _lock:
        found = _wrappers.get(id(op_def))
        if found is None:
            found = _wrappers[id(op_def)] = make_wrapper(op_def)
        return found


def non_max_suppression(
    boxes: Any,
    scores: Any,
    max_output_size: Any,
    iou_threshold: Any = 0.5,
    score_threshold: Any = float("-inf"),
    name: str | None = None,
) -> Any:
    """Greedily select boxes by descending score (``tf.image.non_max_suppression``).

    A NonMaxSuppressionV3 node: ``boxes`` [num_boxes, 4] (two opposite corners each, y
    before x), ``scores`` [num_boxes]; at most ``max_output_size`` indices (int32) of the
    boxes scoring above ``score_threshold``, none overlapping a better one by an IoU
    above ``iou_threshold``. Returns the selected indices, best first.
    """
    op = __getattr__("non_max_suppression_v3")
    return op(
        boxes,
        scores,
        max_output_size,
        iou_threshold,
        score_threshold,
        name=name or "non_max_suppression",
    )


def _public(ops: OpRegistry) -> dict[str, OpDef]:
    return {
        wrapper_name(r.op_def.name): r.op_def
        for r in ops.registrations()
        if not r.op_def.name.startswith("_")
    }


_standard_wrappers: tuple[OpRegistry, dict[str, OpDef]] | None = None


def _standard_public() -> dict[str, OpDef]:
    """``_public(standard_ops())``, made once: the standard registry is built once and
    never changes, and making the table (a snake_case of every op's name) took 0.6 ms,
    paid on every ``kl.ops.NAME`` lookup -- 15-20 % of importing ResNet-50 from ONNX."""
    global _standard_wrappers
    ops = standard_ops()
    made = _standard_wrappers
    if made is None or made[0] is not ops:
        made = _standard_wrappers = (ops, _public(ops))
    return made[1]


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):  # import machinery probing (__path__ for `from ... import`)
        raise AttributeError(name)  # must not load every installed plugin
    op_def = _standard_public().get(name)
    if op_def is None:
        every = _public(default_registry().ops)
        op_def = every.get(name)
        if op_def is None:
            raise AttributeError(
                f"kernloom.ops has no op wrapper {name!r}."
                + did_you_mean(name, every)
                + " `kernloom ops` lists the ops."
            )
    return wrapper(op_def)


def __dir__() -> list[str]:
    return sorted({*globals(), *_public(default_registry().ops)})
