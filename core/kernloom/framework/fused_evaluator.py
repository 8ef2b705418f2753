"""A planned ``_FusedElementwise`` expression as one Python function, for kernels that
evaluate it step by step over arrays they hold (numpy's ufuncs, or torch's functions).

A loop over the steps builds an argument list and unpacks it for every step: about 0.6 µs
a step before any arithmetic, which on small tensors is the whole cost. The optimizer
fuses every connected elementwise op into one node, so a chain of 1000 ``Add``/``Mul`` in
turn on a [16] vector became one node that ran 0.79 µs per original op, 4.4 times the
unfused graph's straight line (0.18); written out as straight-line code -- each operand a
local variable, each step one call -- with the per-input bookkeeping around it trimmed,
0.31 (``.venv/bin/python benchmarks/bench_optimizer.py chain``, ``benchmarks/OPTIMIZER.md``).

The function's source holds nothing but generated names (``i3``, ``t0``, ``f2``) and the
step order; the functions themselves are passed in as values, never as text.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Any, Final

__all__ = ["Evaluator", "compile_steps"]

Evaluator = Callable[[Sequence[Any], Any, Sequence[Any]], None]
"""``evaluate(inputs, out, temps)``: run the steps, the last one into ``out``."""

_FILENAME: Final = "<kernloom fused expression>"


def compile_steps(
    steps: Sequence[tuple[Callable[..., Any], Sequence[tuple[bool, int]], int]],
    num_inputs: int,
    num_temps: int,
    *,
    out_by_position: Container[Callable[..., Any]] = frozenset(),
) -> Evaluator:
    """``evaluate(inputs, out, temps)`` for planned steps (function, operands as
    (is_input, index), the temporary it writes or -1 for ``out``; ``plan_fused_expression``'s
    plan with each op's function): each step called as ``fn(*operands, out=target)``, in
    order, or as ``fn(*operands, target)`` for a function in ``out_by_position`` (a ufunc
    call costs a fifth less so; ``numpy_elementwise.OUT_BY_POSITION``). ``inputs`` must
    hold ``num_inputs`` values and ``temps`` ``num_temps``."""
    if not steps:
        raise ValueError("a fused expression has at least one step")
    functions: dict[int, str] = {}
    namespace: dict[str, Any] = {}
    body: list[str] = []
    if num_inputs:
        body.append(f"    {_unpacked('i', num_inputs)} = inputs")
    if num_temps:
        body.append(f"    {_unpacked('t', num_temps)} = temps")
    for fn, refs, slot in steps:
        name = functions.get(id(fn))
        if name is None:
            name = functions[id(fn)] = f"f{len(functions)}"
            namespace[name] = fn
        operands = [_operand(is_input, i, num_inputs, num_temps) for is_input, i in refs]
        target = "out" if slot < 0 else _operand(False, slot, num_inputs, num_temps)
        if fn not in out_by_position:
            target = f"out={target}"
        body.append(f"    {name}({', '.join([*operands, target])})")
    source = "def evaluate(inputs, out, temps):\n" + "\n".join(body) + "\n"
    exec(compile(source, _FILENAME, "exec"), namespace)  # generated names only
    evaluate: Evaluator = namespace["evaluate"]
    return evaluate


def _unpacked(prefix: str, count: int) -> str:
    """``i0, i1,`` -- a trailing comma, so that one name still unpacks a sequence."""
    return "".join(f"{prefix}{k}, " for k in range(count)).rstrip()


def _operand(is_input: bool, index: int, num_inputs: int, num_temps: int) -> str:
    limit, prefix = (num_inputs, "i") if is_input else (num_temps, "t")
    if not 0 <= index < limit:
        kind = "input" if is_input else "temporary"
        raise ValueError(f"step reads {kind} {index}; the plan has {limit}")
    return f"{prefix}{int(index)}"
