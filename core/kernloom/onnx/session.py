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
from kernloom.graph.graph import Graph
from kernloom.graph.tensor import Tensor
from kernloom.onnx._dtypes import onnx_type_name
from kernloom.onnx._small_types import from_codes, to_codes
from kernloom.onnx._values import (
    FeedLayout,
    OnnxCoded,
    OnnxOptional,
    OnnxSequence,
    Value,
    flatten,
    is_container_type,
)
from kernloom.onnx.errors import OnnxImportError
from kernloom.onnx.importer import (
    ImportedModel,
    flat_names,
    import_model_values,
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


def _type_name(value_type: onnx.TypeProto) -> str:
    """``tensor(float)``, ``seq(tensor(float))``, ``optional(...)`` as onnxruntime spells it."""
    kind = value_type.WhichOneof("value")
    if kind == "sequence_type":
        return f"seq({_type_name(value_type.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_name(value_type.optional_type.elem_type)})"
    name = onnx_type_name(value_type.tensor_type.elem_type)
    return f"tensor({_TYPE_NAMES.get(name, name.lower())})"


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
    return NodeArg(value.name, shape, _type_name(value.type))


@dataclass(frozen=True, slots=True)
class _Variant:
    """The model imported for one layout of its sequence and optional feeds."""

    imported: ImportedModel
    containers: dict[str, Value]
    session: Session


def _layout(name: str, value_type: onnx.TypeProto, fed: Any) -> FeedLayout:
    """What the import needs to know of a fed sequence or optional: ``fed`` a list of
    arrays for a sequence, None for an empty optional."""
    kind = value_type.WhichOneof("value")
    if kind == "optional_type":
        if fed is None:
            return FeedLayout(present=False)
        value_type = value_type.optional_type.elem_type
        if value_type.WhichOneof("value") == "tensor_type":
            return FeedLayout()
    if not isinstance(fed, list | tuple):
        raise OnnxImportError(
            f"input {name!r} is a sequence ({_type_name(value_type)}): feed a list of arrays, "
            f"input_feed={{{name!r}: [np.asarray(...), ...]}}; got {type(fed).__name__}"
        )
    return FeedLayout(length=len(fed))


def _fed_arrays(name: str, value: Value, fed: Any) -> list[Any]:
    """The arrays of a fed sequence or optional, in the order of ``flatten(value)``; a
    small type's (an ml_dtypes array) as kernloom's codes."""
    if isinstance(value, OnnxOptional):
        return [] if value.element is None else _fed_arrays(name, value.element, fed)
    if isinstance(value, OnnxSequence):
        return list(fed)
    if isinstance(value, OnnxCoded):
        return [to_codes(fed, value.elem_type, f"input {name!r}")]
    return [fed]


def _returned(value: Value, arrays: Any) -> Any:
    """A sequence or optional output as onnxruntime returns it: a list of arrays, an
    array, or None for an empty optional."""
    if isinstance(value, OnnxOptional):
        return None if value.element is None else _returned(value.element, arrays)
    if isinstance(value, OnnxSequence):
        return [np.asarray(next(arrays)) for _ in value.items]
    if isinstance(value, OnnxCoded):
        return from_codes(next(arrays), value.elem_type)
    return np.asarray(next(arrays))


def _close_all(variants: dict[Any, _Variant]) -> None:
    for variant in variants.values():
        variant.session.close()


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
        self._source = (
            os.fspath(path_or_bytes) if isinstance(path_or_bytes, str | os.PathLike) else None
        )
        self._model = load_model(path_or_bytes)
        self._config = session_config(sess_options, config)
        self._registry = registry
        initializers = {init.name for init in self._model.graph.initializer}
        self._container_types = {
            v.name: v.type for v in self._model.graph.input if is_container_type(v.type)
        }
        """Sequence and optional inputs: the model is imported per layout of their feeds
        (kernloom resolves them at import), at the first run that gives each layout."""
        self._input_args = [
            _node_arg(v) for v in self._model.graph.input if v.name not in initializers
        ]
        self._output_args = [_node_arg(v) for v in self._model.graph.output]
        self._output_names = [arg.name for arg in self._output_args]
        self._variants: dict[tuple[tuple[str, FeedLayout], ...], _Variant] = {}
        # The kernloom sessions' thread pools end with this object (or at close()), as an
        # onnxruntime session's do: code written for onnxruntime never closes sessions.
        self._finalizer = weakref.finalize(self, _close_all, self._variants)
        self._latest: _Variant | None = None
        if not self._container_types:
            self._latest = self._variant(())
        # As onnxruntime: get_inputs() lists the inputs that must be fed; an initializer
        # listed as an input too may be fed (it overrides the initializer) but need not be.
        # Which are pinned does not depend on the layout of sequence feeds: a converter
        # reads an initializer's value the same way for every length.
        probe = self._latest.imported if self._latest is not None else None
        self._pinned = set() if probe is None else pinned_initializers(self._model, probe)
        self._overridable = overridable_initializers(self._model) - self._pinned
        self._overridable_args = [
            _node_arg(v) for v in self._model.graph.input if v.name in self._overridable
        ]

    def _variant(self, key: tuple[tuple[str, FeedLayout], ...]) -> _Variant:
        """The model imported for the layout ``key`` of its sequence and optional feeds."""
        found = self._variants.get(key)
        if found is None:
            imported, containers = import_model_values(
                self._model, source=self._source, layouts=dict(key)
            )
            session = Session(imported.graph, self._config, registry=self._registry)
            found = _Variant(imported, containers, session)
            self._variants[key] = found
            if self._container_types:
                self._pinned = pinned_initializers(self._model, imported)
                self._overridable = overridable_initializers(self._model) - self._pinned
        self._latest = found
        return found

    def _current(self) -> _Variant:
        if self._latest is None:
            raise OnnxImportError(
                f"the model takes sequence or optional inputs ({sorted(self._container_types)}), "
                "which kernloom resolves at import: it is imported at the first run() that "
                "feeds them, for the lengths fed; call run() first"
            )
        return self._latest

    @property
    def graph(self) -> Graph:
        """The kernloom graph (of the latest run's feed layout, for a model with sequence
        or optional inputs)."""
        return self._current().imported.graph

    @property
    def session(self) -> Session:
        """The kernloom session that runs ``graph``."""
        return self._current().session

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
        return dict(self._current().imported.inputs)

    @property
    def output_tensors(self) -> dict[str, Tensor]:
        """The graph's output tensors by ONNX output name."""
        return dict(self._current().imported.outputs)

    def get_providers(self) -> list[str]:
        return ["KernloomExecutionProvider"]

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[Any]:
        """The named outputs (all when ``output_names`` is None or empty), in order: an
        array each, a list of arrays for a sequence, None for an empty optional."""
        declared = self._output_names
        names = list(output_names) if output_names else list(declared)
        unknown = [n for n in names if n not in declared]
        if unknown:
            raise OnnxImportError(
                f"output(s) {unknown} are not outputs of the model (outputs: {declared})"
            )
        missing = [n for n in self._container_types if n not in input_feed]
        if missing:
            raise OnnxImportError(
                f"input(s) {missing} must be fed (a list of arrays for a sequence, None "
                "for an empty optional)"
            )
        key = tuple((n, _layout(n, t, input_feed[n])) for n, t in self._container_types.items())
        variant = self._variant(key)
        inputs = variant.imported.inputs
        pinned = sorted(n for n in input_feed if n in self._pinned)
        if pinned:
            raise OnnxImportError(
                f"input(s) {pinned} are initializers the model also lists as inputs, but the "
                "import needed their values (a weight's or a shape's), so they are constants "
                "here and a feed cannot replace them: leave them out of input_feed (onnxruntime "
                "would take the feed)"
            )
        feeds: dict[Tensor, Any] = {}
        for name, fed in input_feed.items():
            container = variant.containers.get(name)
            if container is not None:
                feeds.update(
                    zip(flatten(container), _fed_arrays(name, container, fed), strict=True)
                )
            elif name in inputs:
                feeds[inputs[name]] = fed
        extra = [n for n in input_feed if n not in inputs and n not in variant.containers]
        if extra:
            raise OnnxImportError(
                f"input(s) {extra} are not inputs of the model (inputs: {list(inputs)})"
            )
        missing = [n for n in inputs if n not in input_feed and n not in self._overridable]
        missing = [
            n
            for n in missing
            if not any(n in flat_names(c, v) for c, v in variant.containers.items())
        ]
        if missing:
            raise OnnxImportError(f"input(s) {missing} must be fed")
        fetches: list[Tensor] = []
        for name in names:
            container = variant.containers.get(name)
            fetches.extend(
                flatten(container) if container is not None else [variant.imported.outputs[name]]
            )
        try:
            values = variant.session.run(fetches, feeds)  # (not self.session: a
            # concurrent run of another layout may have made another variant the latest)
        except KernloomError as exc:
            if exc.hint is not None:  # its fix in this interface's terms: input_feed, not feed_dict
                exc.args = (exc.render(self._spelling),)
                exc.hint = None
            raise
        arrays = iter(values)
        results: list[Any] = []
        for name in names:
            container = variant.containers.get(name)
            results.append(
                _returned(container, arrays) if container is not None else np.asarray(next(arrays))
            )
        return results

    def _spelling(self, setting: Setting) -> str:
        """A setting as the caller of ``run`` gives it: a feed is an ``input_feed`` entry
        under the ONNX input's name."""
        template = _ONNX_SPELLINGS.get(setting.name)
        if template is None:
            return python_spelling(setting)
        by_node = {t.node.name: name for name, t in self._current().imported.inputs.items()}
        key = by_node.get(setting.key.removesuffix(":0"), setting.key)
        return template.format(key=key, value=setting.value)
