"""How kernloom's value types (``DType``, ``TensorShape``) sit in pydantic models.

Every schema that crosses a boundary is a pydantic model (OpDef, KernelDef, GraphDef), and
their fields hold our own immutable value types: each is validated by its ``as_*``
function (which accepts the spellings users write) and serialised as plain JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_core import core_schema

__all__ = ["value_schema"]


def value_schema(
    parse: Callable[[Any], Any],
    dump: Callable[[Any], Any],
    json_input: core_schema.CoreSchema | None = None,
) -> core_schema.CoreSchema:
    """The pydantic core schema of a value type: ``parse`` validates (and converts) any
    input, ``dump`` gives its JSON form; ``json_input`` is what a JSON schema shows."""
    return core_schema.no_info_plain_validator_function(
        parse,
        serialization=core_schema.plain_serializer_function_ser_schema(dump),
        json_schema_input_schema=json_input,
    )
