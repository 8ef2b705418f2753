"""The errors of the ONNX frontend."""

from __future__ import annotations

from dataclasses import dataclass

from kernloom.errors import InvalidArgumentError

__all__ = ["OnnxImportError", "Unsupported", "UnsupportedOnnxError", "outputs_note"]


def outputs_note(outputs: tuple[str, ...]) -> str:
    """How an error points at a node the model gives no name: by its outputs."""
    if not outputs:
        return ""
    listed = ", ".join(repr(o) for o in outputs)
    return f" [unnamed; output{'s' if len(outputs) > 1 else ''} {listed}]"


@dataclass(frozen=True, slots=True)
class Unsupported:
    """One node the importer cannot convert, and what is missing."""

    node: str
    op_type: str
    domain: str
    opset: int
    missing: str
    unnamed_outputs: tuple[str, ...] = ()
    """The node's outputs where the model gives it no name (``node`` is then made up)."""

    def __str__(self) -> str:
        op = f"{self.domain}::{self.op_type}" if self.domain else self.op_type
        where = outputs_note(self.unnamed_outputs)
        return f"node {self.node!r} ({op}, opset {self.opset}){where}: {self.missing}"


class OnnxImportError(InvalidArgumentError):
    """An ONNX model that cannot become a kernloom graph; the message names the node."""


class UnsupportedOnnxError(OnnxImportError):
    """Every node of a model that uses an op or attribute the importer does not handle."""

    def __init__(self, problems: list[Unsupported]) -> None:
        self.problems = problems
        ops = sorted({p.op_type for p in problems})
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"the ONNX model uses {len(problems)} unsupported node(s) (ops: "
            f"{', '.join(ops)}):\n{lines}\n`kernloom ops --onnx` lists the ONNX ops that import."
        )
