"""The standard op library, and the generated op wrappers.

The core defines ops but no kernels; kernels come from device plugins. Every registry
sits on the one standard ``OpRegistry`` built here on first use.

``kl.ops.mat_mul``, ``kl.ops.add_n``, ... are wrappers generated from the OpDefs of the
default registry (plugins' ops included), with the op's real signature and docstring;
``help(kl.ops.mat_mul)`` shows them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kernloom.framework.op_def import OpDef, OpLibrary, OpRegistry
from kernloom.framework.origin import Origin
from kernloom.ops import (
    array_ops,
    control_flow_ops,
    function_ops,
    math_ops,
    nn_ops,
    resource_variable_ops,
    sendrecv_ops,
)

__all__ = ["STANDARD_ORIGIN", "standard_ops", "wrapper"]

STANDARD_ORIGIN = Origin("kernloom", "kernloom")

_lock = threading.Lock()
_standard: OpRegistry | None = None


def standard_ops() -> OpRegistry:
    """The standard op definitions (built once; OpDefs are frozen, so it is shared)."""
    global _standard
    with _lock:
        if _standard is None:
            lib = OpLibrary()
            for family in (
                array_ops,
                math_ops,
                nn_ops,
                sendrecv_ops,
                function_ops,
                control_flow_ops,
                resource_variable_ops,
            ):
                family.define(lib)
            registry = OpRegistry()
            for op_def in lib.finalize():
                registry.add(op_def, STANDARD_ORIGIN)
            _standard = registry
        return _standard


_wrappers: dict[int, Callable[..., Any]] = {}


def wrapper(op_def: OpDef) -> Callable[..., Any]:
    """The generated Python function for an op (cached per definition)."""
    from kernloom.graph.builder import make_wrapper

    with _lock:
        found = _wrappers.get(id(op_def))
        if found is None:
            found = _wrappers[id(op_def)] = make_wrapper(op_def)
        return found


def _wrapper_names() -> dict[str, OpDef]:
    from kernloom.graph.graph import snake_case
    from kernloom.registry import default_registry

    return {
        snake_case(r.op_def.name): r.op_def
        for r in default_registry().ops.registrations()
        if not r.op_def.name.startswith("_")
    }


def __getattr__(name: str) -> Callable[..., Any]:
    op_defs = _wrapper_names()
    if name in op_defs:
        return wrapper(op_defs[name])
    from kernloom.errors import did_you_mean

    raise AttributeError(
        f"kernloom.ops has no op wrapper {name!r}."
        + did_you_mean(name, op_defs)
        + " `kernloom ops` lists the ops."
    )


def __dir__() -> list[str]:
    return sorted({*globals(), *_wrapper_names()})
