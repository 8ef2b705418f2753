"""``InferenceSession``: onnxruntime's interface over a kernloom ``Session``.

Code written for ``onnxruntime.InferenceSession`` runs on kernloom by changing the
import: ``run(output_names, input_feed)``, ``get_inputs()``, ``get_outputs()`` with
NodeArg-like ``name``, ``shape`` and ``type``. Feeds go through the kernloom session's
own feed rule (``check_feed``): a value whose dtype or shape does not fit the input is
an error naming the input, never silently converted with loss.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from kernloom.errors import KernloomError, Setting, python_spelling
from kernloom.graph.tensor import Tensor
from kernloom.onnx._dtypes import onnx_type_name
from kernloom.onnx.errors import OnnxImportError
from kernloom.onnx.importer import (
    import_model,
    load_model,
    overridable_initializers,
    pinned_initializers,
)
from kernloom.registry import Registry
from kernloom.runtime.session import Session
from kernloom.runtime.session_options import SessionConfig

__all__ = ["InferenceSession", "NodeArg", "session_config"]

_ONNX_SPELLINGS = {
    "feed": "input_feed={{{key!r}: value}}",
    "feed_array": "input_feed={{{key!r}: np.asarray(values, dtype={value!r})}}",
}
"""How ``InferenceSession.run``'s caller gives the settings a feed error names."""


@dataclass(frozen=True, slots=True)
class NodeArg:
    """An input or output as onnxruntime describes it."""

    name: str
    shape: list[int | str | None]
    """Known sizes as ints, symbolic ones by their name, unknown ones as None."""
    type: str
    """``tensor(float)``, ``tensor(int64)``... as onnxruntime spells it."""


_TYPE_NAMES = {
    "FLOAT": "float",
    "DOUBLE": "double",
    "FLOAT16": "float16",
    "BOOL": "bool",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "COMPLEX64": "complex64",
    "COMPLEX128": "complex128",
    "STRING": "string",
}


def _node_arg(value: onnx.ValueInfoProto) -> NodeArg:
    tensor_type = value.type.tensor_type
    shape: list[int | str | None] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            shape.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            shape.append(dim.dim_param)
        else:
            shape.append(None)
    name = onnx_type_name(tensor_type.elem_type)
    return NodeArg(value.name, shape, f"tensor({_TYPE_NAMES.get(name, name.lower())})")


def session_config(sess_options: Any = None, config: SessionConfig | None = None) -> SessionConfig:
    """The kernloom config of an ``InferenceSession``: ``config`` when given; else
    onnxruntime's defaults and ``SessionOptions`` threads, so that code written for
    onnxruntime runs with the threads it asked for.

    onnxruntime runs a model's nodes one at a time (``ExecutionMode.ORT_SEQUENTIAL``) with
    ``intra_op_num_threads`` threads inside each (0: every core); ``ORT_PARALLEL`` runs
    independent nodes on ``inter_op_num_threads`` threads. Hence ``inter_op_threads=1``
    unless the options ask for parallel execution: on a CNN whose kernels already use
    every core, a second inter-op thread only competes for them (ResNet-50 on 2 cores:
    33.5 ms with one, 37.9 with two; ``benchmarks/ONNX.md``). Options are read by
    attribute name, so onnxruntime need not be installed.
    """
    if config is not None:
        return config
    if sess_options is None:
        return SessionConfig(inter_op_threads=1)
    intra = int(getattr(sess_options, "intra_op_num_threads", 0) or 0)
    inter = int(getattr(sess_options, "inter_op_num_threads", 0) or 0)
    mode = getattr(sess_options, "execution_mode", 0)
    parallel = int(getattr(mode, "value", mode) or 0) == 1  # ORT_PARALLEL
    return SessionConfig(
        intra_op_threads=intra or None,
        inter_op_threads=(inter or None) if parallel else 1,
    )


class InferenceSession:
    """An ONNX model imported once and run as a kernloom graph.

    ``config`` (a ``kl.SessionConfig``) chooses devices, threads and labels; without one,
    onnxruntime's ``sess_options`` (its thread counts and execution mode) are honoured,
    and without either onnxruntime's defaults hold (``session_config``). ``providers`` is
    accepted for onnxruntime compatibility and ignored: the placer picks devices.
    ``registry`` chooses the plugins (the default registry when None).
    """

    def __init__(
        self,
        path_or_bytes: str | os.PathLike[str] | bytes | onnx.ModelProto,
        sess_options: Any = None,
        providers: Sequence[Any] | None = None,
        *,
        config: SessionConfig | None = None,
        registry: Registry | None = None,
        **kwargs: Any,
    ) -> None:
        source = os.fspath(path_or_bytes) if isinstance(path_or_bytes, str | os.PathLike) else None
        self._model = load_model(path_or_bytes)
        imported = import_model(self._model, source=source)
        self.graph = imported.graph
        self._inputs = imported.inputs
        self._outputs = imported.outputs
        initializers = {init.name for init in self._model.graph.initializer}
        # As onnxruntime: get_inputs() lists the inputs that must be fed; an initializer
        # listed as an input too may be fed (it overrides the initializer) but need not be.
        self._pinned = pinned_initializers(self._model, imported)
        self._overridable = overridable_initializers(self._model) - self._pinned
        self._input_args = [
            _node_arg(v) for v in self._model.graph.input if v.name not in initializers
        ]
        self._overridable_args = [
            _node_arg(v) for v in self._model.graph.input if v.name in self._overridable
        ]
        self._output_args = [_node_arg(v) for v in self._model.graph.output]
        self.session = Session(self.graph, session_config(sess_options, config), registry=registry)
        # The kernloom session's thread pools end with this object (or at close()), as an
        # onnxruntime session's do: code written for onnxruntime never closes sessions.
        self._finalizer = weakref.finalize(self, self.session.close)

    def close(self) -> None:
        """End the session's threads now; ``run`` fails afterwards."""
        self._finalizer()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_inputs(self) -> list[NodeArg]:
        return list(self._input_args)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._output_args)

    def get_overridable_initializers(self) -> list[NodeArg]:
        """The initializers a feed may replace (listed as graph inputs too, IR >= 4)."""
        return list(self._overridable_args)

    @property
    def input_tensors(self) -> dict[str, Tensor]:
        """The graph's placeholders by ONNX input name (to run ``self.session`` directly)."""
        return dict(self._inputs)

    @property
    def output_tensors(self) -> dict[str, Tensor]:
        """The graph's output tensors by ONNX output name."""
        return dict(self._outputs)

    def get_providers(self) -> list[str]:
        return ["KernloomExecutionProvider"]

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray[Any, Any]]:
        """The named outputs (all when ``output_names`` is None or empty), in order."""
        names = list(output_names) if output_names else list(self._outputs)
        unknown = [n for n in names if n not in self._outputs]
        if unknown:
            raise OnnxImportError(
                f"output(s) {unknown} are not outputs of the model (outputs: {list(self._outputs)})"
            )
        pinned = sorted(n for n in input_feed if n in self._pinned)
        if pinned:
            raise OnnxImportError(
                f"input(s) {pinned} are initializers the model also lists as inputs, but the "
                "import needed their values (a weight's or a shape's), so they are constants "
                "here and a feed cannot replace them: leave them out of input_feed (onnxruntime "
                "would take the feed)"
            )
        extra = [n for n in input_feed if n not in self._inputs]
        if extra:
            raise OnnxImportError(
                f"input(s) {extra} are not inputs of the model (inputs: {list(self._inputs)})"
            )
        missing = [n for n in self._inputs if n not in input_feed and n not in self._overridable]
        if missing:
            raise OnnxImportError(f"input(s) {missing} must be fed")
        feeds = {self._inputs[n]: v for n, v in input_feed.items()}
        try:
            values = self.session.run([self._outputs[n] for n in names], feeds)
        except KernloomError as exc:
            if exc.hint is not None:  # its fix in this interface's terms: input_feed, not feed_dict
                exc.args = (exc.render(self._spelling),)
                exc.hint = None
            raise
        return [np.asarray(v) for v in values]

    def _spelling(self, setting: Setting) -> str:
        """A setting as the caller of ``run`` gives it: a feed is an ``input_feed`` entry
        under the ONNX input's name."""
        template = _ONNX_SPELLINGS.get(setting.name)
        if template is None:
            return python_spelling(setting)
        by_node = {t.node.name: name for name, t in self._inputs.items()}
        key = by_node.get(setting.key.removesuffix(":0"), setting.key)
        return template.format(key=key, value=setting.value)
