"""``kernloom.onnx.backend``: onnx's standard backend interface over kernloom.

``prepare(model, device, **kwargs)`` imports the model once; the keyword arguments are
``kl.SessionConfig`` fields (``intra_op_threads=1``, ``kernel_labels={...}``), as
onnxruntime's backend takes its session options (``inter_op_threads`` is 1 unless given:
onnxruntime runs nodes one at a time by default). ``device`` is ``"CPU"`` or another
kernloom device type (``"GPU"``, ``"CUDA"`` meaning GPU): the session is restricted to it.
This is what onnx's own test suite (``onnx.backend.test.BackendTest``) runs against.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from kernloom.framework.device_factory_registry import probe_unavailable
from kernloom.onnx.session import InferenceSession
from kernloom.registry import default_registry
from kernloom.runtime.session_options import SessionConfig

__all__ = ["KernloomBackend", "KernloomRep", "prepare", "run_model", "run_node", "supports_device"]


def _device_type(device: str) -> str:
    kind = device.split(":", 1)[0].upper()
    return "GPU" if kind == "CUDA" else kind


class KernloomRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes a list (in input order) or a dict."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [arg.name for arg in self.session.get_inputs()]
        if isinstance(inputs, Mapping):
            feed = dict(inputs)
        else:
            values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feed = dict(zip(names, values, strict=False))
        return tuple(self.session.run(None, feed))


class KernloomBackend(Backend):
    """onnx's ``Backend`` for kernloom."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> KernloomRep:
        fields = {k: v for k, v in kwargs.items() if k in SessionConfig.model_fields}
        fields.setdefault("device_filters", (_device_type(device),))
        fields.setdefault("inter_op_threads", 1)  # onnxruntime's sequential default
        session = InferenceSession(model, config=SessionConfig(**fields))
        return KernloomRep(session)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype[Any], tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """One node on ``inputs`` (a list in the node's input order, or a dict)."""
        values = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        names = [n for n in node.input if n]
        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v)
            )
            for name, v in zip(names, values, strict=False)
        ]
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid(node.domain, opset)]
        )
        return cls.run_model(model, dict(zip(names, values, strict=False)), device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether an installed plugin's factory can give a ``device`` here: one that is
        registered but unavailable (the GPU plugins on a machine without a GPU) does not
        count, so onnx's ``BackendTest`` skips that device's cases, as for
        onnxruntime's backend, instead of failing every one in ``prepare``."""
        registrations = default_registry().device_factories.registrations(_device_type(device))
        return any(_can_create(registration.factory) for registration in registrations)


def _can_create(factory: Any) -> bool:
    """Whether ``factory`` says it is usable and lists a physical device (a plugin's code
    that raises counts as no)."""
    if probe_unavailable(factory) is not None:
        return False
    try:
        return bool(factory.list_physical_devices())
    except Exception:
        return False


prepare = KernloomBackend.prepare
run_model = KernloomBackend.run_model
run_node = KernloomBackend.run_node
supports_device = KernloomBackend.supports_device
