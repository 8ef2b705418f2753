"""The generated op wrappers: ``kl.ops.mat_mul``, ``kl.ops.conv2d``, ``kl.ops.top_kv2``.

One function per public op, named as TensorFlow's generated Python names them, with the
op's real signature and docstring (``help(kl.ops.mat_mul)``). The standard ops' wrappers
need no plugin; a name that is not a standard op is looked up in the default registry,
so that ops a plugin defines (``zero_out``) get wrappers too.
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

__all__ = ["wrapper"]

_lock = threading.Lock()
_wrappers: dict[int, Callable[..., Any]] = {}


def wrapper(op_def: OpDef) -> Callable[..., Any]:
    """The generated Python function for an op (cached per definition)."""
    with _lock:
        found = _wrappers.get(id(op_def))
        if found is None:
            found = _wrappers[id(op_def)] = make_wrapper(op_def)
        return found


def _public(ops: OpRegistry) -> dict[str, OpDef]:
    return {
        wrapper_name(r.op_def.name): r.op_def
        for r in ops.registrations()
        if not r.op_def.name.startswith("_")
    }


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):  # import machinery probing (__path__ for `from ... import`)
        raise AttributeError(name)  # must not load every installed plugin
    op_def = _public(standard_ops()).get(name)
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
